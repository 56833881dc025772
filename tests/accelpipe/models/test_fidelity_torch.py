"""The PyTorch networks are the references' networks, at the schema defaults (issue 31 item 5).

The figures are an independent audit's (issue 31): with copied weights accelpipe's ResNet-50
gives torchvision's outputs (25,557,032 parameters, 4.089 GMAC forward at 224x224), its
DynUNet2D gives MONAI's DynUNet as NVIDIA's nnU-Net 21.02 builds it (20,613,868), and its
SwinUNETR is MONAI's as AMD's seed builds it (62,186,659). torchvision is not a dependency, so
ResNet-50 is held to its size and cost; MONAI is, so DynUNet2D is held to MONAI's outputs.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from accelpipe.config.schema import validate
from accelpipe.workloads.resnet50 import workload as resnet50
from accelpipe.workloads.swinunetr import workload as swinunetr
from accelpipe.workloads.unet2d import workload as unet2d

pytestmark = pytest.mark.torch

IMAGENET_CLASSES = 1000  # the dataset's, not a config key
# BraTS as MSD Task01 and NVIDIA's nnU-Net see it: 4 MRI modalities in, 4 classes out
# (background and the three tumour labels)
BRATS = {"in_channels": 4, "n_class": 4}


@pytest.fixture(scope="module")
def defaults() -> dict[str, Any]:
    return validate({})


def _n_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def test_resnet50_has_torchvisions_size_and_cost(defaults: dict[str, Any]) -> None:
    model = resnet50.build_model(defaults["resnet50"]["model"], IMAGENET_CLASSES).eval()
    assert _n_params(model) == 25_557_032  # torchvision.models.resnet50()
    size = defaults["resnet50"]["model"]["image_size"]
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(torch.zeros(1, 3, size, size))
    # torch.utils.flop_counter counts 2 FLOPs a multiply-add: 4.089 GMAC, torchvision's figure
    assert counter.get_total_flops() == 2 * 4_089_184_256


def _monai_dynunet(model_cfg: dict[str, Any]) -> torch.nn.Module:
    """MONAI's DynUNet with the arguments NVIDIA's nnU-Net 21.02 gives it for 2D BraTS
    (models/nn_unet.py): 3x3 kernels at every level, the strides as kernels of the
    transposed convs, the filters MONAI derived then (32 doubling to 512), instance norm with
    affine parameters, biased transposed convs, plain (not residual) blocks, deep
    supervision."""
    from monai.networks.nets import DynUNet

    strides = [[s, s] for s in model_cfg["strides"]]
    return DynUNet(
        spatial_dims=2,
        in_channels=BRATS["in_channels"],
        out_channels=BRATS["n_class"],
        kernel_size=[[3, 3]] * len(strides),
        strides=strides,
        upsample_kernel_size=strides[1:],
        filters=model_cfg["filters"],
        norm_name=("INSTANCE", {"affine": True}),
        deep_supervision=model_cfg["deep_supervision"],
        deep_supr_num=model_cfg["deep_supr_num"],
        res_block=False,
        trans_bias=True,
    )


_BLOCK = {"0.weight": "conv1.conv.weight", "3.weight": "conv2.conv.weight"}
_BLOCK |= {f"{i}.{p}": f"norm{n}.{p}" for i, n in ((1, 1), (4, 2)) for p in ("weight", "bias")}


def _monai_name(name: str, levels: int) -> str:
    """The name in MONAI's DynUNet of one of DynUNet2D's parameters."""
    part, index, rest = [*name.split(".", 2), ""][:3]
    if part == "encoder":
        level = int(index)
        block = (
            "input_block"
            if level == 0
            else "bottleneck"
            if level == levels - 1
            else f"downsamples.{level - 1}"
        )
        return f"{block}.{_BLOCK[rest]}"
    if part == "decoder":
        kind, tail = rest.split(".", 1)
        if kind == "up":
            return f"upsamples.{index}.transp_conv.conv.{tail}"
        return f"upsamples.{index}.conv_block.{_BLOCK[tail]}"
    if part == "head":
        return f"output_block.conv.conv.{index}"
    return f"deep_supervision_heads.{index}.conv.conv.{rest}"  # ds_heads


def test_dynunet2d_gives_monais_dynunet_outputs(defaults: dict[str, Any]) -> None:
    model_cfg = defaults["unet2d"]["model"]
    ours = unet2d.build_model(model_cfg, BRATS)
    reference = _monai_dynunet(model_cfg)
    assert _n_params(ours) == _n_params(reference) == 20_613_868
    theirs = reference.state_dict()  # tensors that share the parameters' storage
    copied = set()
    with torch.no_grad():
        for name, value in ours.state_dict().items():
            target = _monai_name(name, len(model_cfg["filters"]))
            theirs[target].copy_(value)
            copied.add(target)
    assert len(copied) == len(list(reference.parameters()))  # every parameter, once
    x = torch.randn(2, BRATS["in_channels"], 64, 64, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(ours.eval()(x), reference.eval()(x), rtol=1e-4, atol=1e-4)
        # training mode: MONAI stacks the deep-supervision heads, resized to full size
        heads, stacked = ours.train()(x), reference.train()(x)
    assert isinstance(heads, list) and stacked.shape[1] == len(heads)
    for k, head in enumerate(heads):
        resized = torch.nn.functional.interpolate(head, x.shape[2:])
        torch.testing.assert_close(resized, stacked[:, k], rtol=1e-4, atol=1e-4)


def test_swinunetr_has_the_seeds_size(defaults: dict[str, Any]) -> None:
    model = swinunetr.build_model(defaults["swinunetr"]["model"])
    assert _n_params(model) == 62_186_659
