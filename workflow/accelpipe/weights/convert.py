"""Converters: a family's source file read into a freshly built network of the family (names
and shapes checked by the model's own loaders), its variables written keyed by the model's
names (models.pretrained_npz)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from accelpipe.models import pretrained_npz, ssd_resnet34, vit, vit_npz


def _write(variables: dict[str, Any], target: Path) -> dict[str, Any]:
    pretrained_npz.save({name: v.numpy() for name, v in variables.items()}, target)
    return {
        "file": target.name,
        "sha256": pretrained_npz.sha256(target),
        "tensors": len(variables),
        "parameters": int(sum(v.shape.num_elements() for v in variables.values())),
    }


def resnet34(checkpoint: Path, target: Path) -> dict[str, Any]:
    """A ResNet-34 TF checkpoint (the reference's TF1 `model.ckpt-28152` naming, or our
    `ssd_resnet34.save_backbone`) -> the SSD backbone's variables. Its width is read from the
    stem (64 = ResNet-34); the layers past group 3 and the classifier are not used."""
    width = ssd_resnet34.checkpoint_width(checkpoint)
    model = ssd_resnet34.build_backbone(width)
    ssd_resnet34.load_backbone(model, checkpoint)
    return _write(ssd_resnet34.backbone_variables(model), target) | {"width": width}


def vit_encoder(npz: Path, encoder: str, target: Path) -> dict[str, Any]:
    """An original-ViT / AugReg npz -> the encoder's variables, at the npz's own position
    grid (the model resizes it to its grid when it loads them); the head is not used."""
    config = vit.encoder_config(encoder)
    side = vit_npz.source_grid(npz)
    model = vit.build_vit(side * config.patch, encoder)
    loaded = vit_npz.load_pretrained(model, npz)
    return _write(vit.encoder_variables(model), target) | {
        "encoder": encoder,
        "grid": [side, side],
        "keys_ignored": loaded["keys_ignored"],
    }
