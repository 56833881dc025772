"""accelpipe.preflight: the preflight's name per image and what the config's train jobs ask
of a host (Snakemake reads both while planning)."""

from __future__ import annotations

import copy

from accelpipe import preflight
from accelpipe.config import validate
from tests.workflow.project import TINY_CONFIG


def _config(**changes: object) -> dict:
    config = copy.deepcopy(TINY_CONFIG)
    config.update(changes)
    return validate(config)


def test_one_preflight_per_backend_and_image() -> None:
    assert preflight.path("cuda", "pytorch") == "work/preflight/cuda-pytorch.json"
    image = "registry.example/accelpipe/rocm-tensorflow:0123456789ab"
    assert preflight.name("rocm", "tensorflow", image) == "rocm-tensorflow-0123456789ab"


def test_the_biggest_job_of_the_framework_sets_the_devices_asked() -> None:
    """The tiny config's resnet50, ssd and segmenter have a `ddp` run on 2 devices."""
    config = _config(backend="cuda")
    for framework in ("pytorch", "tensorflow"):
        assert preflight.needs(config, framework) == {
            "devices": 2,
            "world_size": 2,
            "precision": "bf16",  # auto on cuda, and the bf16 runs
        }


def test_nodes_count_in_the_world_size_and_fp32_runs_need_no_bf16() -> None:
    unet2d = copy.deepcopy(TINY_CONFIG["unet2d"])
    unet2d["train"] |= {"devices": 4, "nodes": 2, "precision": "fp32"}
    config = _config(backend="rocm", unet2d=unet2d)
    # only unet2d's folds train at 4 x 2; the other PyTorch runs ask less
    assert preflight.needs(config, "pytorch")["devices"] == 4
    assert preflight.needs(config, "pytorch")["world_size"] == 8
    fp32 = {name: copy.deepcopy(TINY_CONFIG[name]) for name in ("ssd", "segmenter")}
    for block in fp32.values():
        block["train"]["precision"] = "fp32"
        block["runs"] = {"only": {}}
        block.pop("grid", None)
        block["benchmark"] = {"precisions": ["fp32"]}
    config = _config(backend="cuda", **fp32)
    assert preflight.needs(config, "tensorflow") == {
        "devices": 1,
        "world_size": 1,
        "precision": "fp32",
    }
