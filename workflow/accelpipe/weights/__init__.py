"""The weights stage: starting weights fetched, checked and converted once into what a model
loads (`<data_root>/weights/<name>/weights.npz`, models.pretrained_npz), cached like the data.

`make(cfg, out, downloads)` takes the slice accelpipe.plan.pretrained.weights_slice builds:

- `family`: `resnet34` (a detector's backbone: a TF checkpoint, in the reference's TF1 naming
  or our own) or `vit` (a ViT encoder: an npz in the original ViT / AugReg layout),
  plus `encoder`;
- `source`: the official one (`mlperf`, `augreg`; its `files` are downloaded into `downloads`:
  resumable, locked, the md5 or sha256 checked on disk), or `path:<location>` (read in place).

The source is read into a freshly built network of the family (every tensor the model needs is
checked by name and shape: the first mismatch is one DataError naming it), and that network's
variables are written keyed by the model's own names. The facts returned (source, the sha256 of
every source file, the converted file's sha256 and tensor count) go into stage.json.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from accelpipe.core.errors import ConfigError
from accelpipe.models.pretrained_npz import WEIGHTS_FILE
from accelpipe.weights import convert, sources

FAMILIES = ("resnet34", "vit")


def make(cfg: dict[str, Any], out: Path, downloads: Path) -> dict[str, Any]:
    """Fetch the source `cfg` names and convert it into `out/weights.npz`; returns facts."""
    family = cfg.get("family")
    if family not in FAMILIES:
        raise ConfigError(f"weights stage: unknown family {family!r} ({' | '.join(FAMILIES)})")
    where, facts = sources.locate(cfg, Path(downloads))
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    target = out / WEIGHTS_FILE
    if family == "resnet34":
        converted = convert.resnet34(where, target)
    else:
        converted = convert.vit_encoder(where, str(cfg["encoder"]), target)
    return {"family": family, **facts, "converted": converted}
