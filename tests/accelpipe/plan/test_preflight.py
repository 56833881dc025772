"""accelpipe.plan.preflight: the preflight's name per image and what the config's train jobs ask
of a host (Snakemake reads both while planning)."""

from __future__ import annotations

import copy

from accelpipe.config import registry
from accelpipe.config.schema import validate
from accelpipe.plan import preflight
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


def test_auto_is_resolved_per_workload_as_its_trainer_resolves_it() -> None:
    """swinunetr's "auto" is fp16 on rocm (its registry entry), bf16 for the others: the
    preflight checks what each trains in, not the backend's default for all (issue 32 item 4)."""
    config = validate({"backend": "rocm", "swinunetr": {"runs": {"auto": {"precision": "auto"}}}})
    found = preflight.precisions(config, "pytorch")
    assert found["swinunetr"] == {"fp16", "bf16", "fp32"}  # its run, its benchmark rows
    assert found["unet2d"] == {"bf16", "fp32"}  # its auto folds, its benchmark rows


def test_only_a_pytorch_workload_may_redefine_auto() -> None:
    """The TensorFlow engine takes no per-workload "auto": a TF workload that declared one
    would train in the backend's default while the preflight checked its own."""
    declared = {w.name for w in registry.WORKLOADS.values() if w.auto_precision}
    assert declared and all(registry.workload(w).framework == "pytorch" for w in declared)
