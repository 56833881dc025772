"""The hyperparameter grid: run names, overrides, validation and the runs each stage sees."""

from __future__ import annotations

import pytest

from accelpipe.config.grid import expand, value_slug
from accelpipe.config.schema import run_names, validate
from accelpipe.core.errors import ConfigError
from accelpipe.plan import stage_config, targets

SEED_GRID = {  # the hackathon's RayTune grid: pretrained x model x mask_decoder
    "model.pretrained": ["none", "path:/weights/ViT-B_16_imagenet21k.npz"],
    "model.encoder": ["B_16", "L_32"],
    "model.decoder": ["mask", "linear"],
}


def _config(grid: dict, **block: object) -> dict:
    return validate({"segmenter": {"grid": grid, **block}})


def test_the_seed_grid_gives_eight_named_runs_with_their_overrides() -> None:
    runs = expand(_config(SEED_GRID)["segmenter"], "segmenter")
    assert len(runs) == 8
    name = "decoder-linear_encoder-L_32_pretrained-ViT-B_16_imagenet21k"
    assert runs[name] == {
        "model": {
            "decoder": "linear",
            "encoder": "L_32",
            "pretrained": "path:/weights/ViT-B_16_imagenet21k.npz",
        },
        "train": {},
    }
    assert "decoder-mask_encoder-B_16_pretrained-none" in runs


@pytest.mark.parametrize(
    ("value", "slug"),
    [
        (None, "none"),
        (True, "true"),
        (0.001, "0p001"),
        (-0.5, "m0p5"),
        (8, "8"),
        ("a/b c", "a-b-c"),
    ],
)
def test_values_become_file_name_safe_slugs(value: object, slug: str) -> None:
    assert value_slug(value) == slug


def test_names_do_not_depend_on_the_order_of_keys_or_values() -> None:
    a = expand({"grid": {"train.lr": [0.1, 0.01], "model.decoder": ["mask"]}}, "segmenter")
    b = expand({"grid": {"model.decoder": ["mask"], "train.lr": [0.01, 0.1]}}, "segmenter")
    assert sorted(a) == sorted(b) == ["decoder-mask_lr-0p01", "decoder-mask_lr-0p1"]


def test_each_run_sees_its_own_model_and_train_values() -> None:
    config = _config({"model.decoder": ["mask", "linear"], "train.lr": [0.1]})
    run = stage_config.train(config, "segmenter", "decoder-linear_lr-0p1")
    assert run["model"]["decoder"] == "linear" and run["model"]["encoder"] == "B_16"
    assert run["train"]["lr"] == 0.1 and run["train"]["batch_size"] == 8
    assert (
        "grid"
        not in stage_config.publish(config, "segmenter", "decoder-linear_lr-0p1")["segmenter"]
    )


def test_a_changed_value_leaves_the_other_runs_slices_unchanged() -> None:
    """Snakemake re-runs a job when its params change: runs a change does not make keep theirs."""
    before = _config({"model.decoder": ["mask", "linear"], "train.lr": [0.1]})
    after = _config({"model.decoder": ["mask", "linear"], "train.lr": [0.1, 0.2]})
    for run in ("decoder-mask_lr-0p1", "decoder-linear_lr-0p1"):
        for slice_of in (stage_config.train, stage_config.evaluate, stage_config.publish):
            assert slice_of(before, "segmenter", run) == slice_of(after, "segmenter", run)


def test_named_runs_and_grid_runs_together() -> None:
    config = _config({"model.decoder": ["linear"]})
    assert run_names(config["segmenter"], "segmenter") == ["bf16", "fp32", "decoder-linear"]
    targets.check_run(config, "segmenter", "bf16")
    assert targets.check_grid(config, "segmenter") == ["decoder-linear"]


@pytest.mark.parametrize(
    ("grid", "named"),
    [
        ({"model.encoderx": ["B_16"]}, "'segmenter.grid.model.encoderx': model has no key"),
        ({"model.encoder": ["B_99"]}, "'segmenter.grid.model.encoder': 'B_99' is not one of"),
        ({"model.encoder": []}, "'segmenter.grid.model.encoder'"),
        ({"train.lr": [0.1, -1]}, "'segmenter.grid.train.lr': -1 is less than"),
        ({"optimizer.lr": [0.1]}, "'segmenter.grid'"),
        ({"train.lr": 0.1}, "'segmenter.grid.train.lr'"),
        (
            {"model.pretrained": ["path:/a/ViT.npz", "path:/b/ViT.npz"]},
            "both give the run name 'pretrained-ViT'",
        ),
    ],
)
def test_a_bad_grid_is_refused_naming_the_key(grid: dict, named: str) -> None:
    with pytest.raises(ConfigError, match="^.*" + named.replace("(", r"\(").replace(".", r"\.")):
        _config(grid)


def test_a_grid_run_may_not_share_a_name_with_a_named_run() -> None:
    with pytest.raises(ConfigError, match=r"'segmenter\.runs': decoder-mask is also a run"):
        _config({"model.decoder": ["mask"]}, runs={"decoder-mask": {}})


def test_grid_targets_need_a_grid() -> None:
    with pytest.raises(ConfigError, match=r"'segmenter\.grid' is empty"):
        targets.check_grid(validate({}), "segmenter")
    with pytest.raises(ConfigError, match="unknown workload 'yolo'"):
        targets.check_grid(validate({}), "yolo")
    with pytest.raises(ConfigError, match="'grid' does not match"):
        validate({"segmenter": {"runs": {"grid": {}}}})
