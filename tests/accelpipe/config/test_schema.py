"""Config schema: defaults, unknown and mistyped keys, string coercion from --config."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from accelpipe.config import registry
from accelpipe.config.schema import (
    load,
    load_slice,
    run_names,
    run_train,
    slice_schema,
    validate,
    validate_slice,
)
from accelpipe.core.errors import ConfigError

REPO = Path(__file__).resolve().parents[3]


def test_empty_config_gets_the_reference_defaults() -> None:
    config = validate({})
    assert config["backend"] == "cpu" and config["runtime"] == "local"
    assert config["datasets"]["brats"]["source"] == "synthetic"
    assert config["datasets"]["brats"]["msd"]["md5"] == "240a19d752f0d9e9101544901065d872"
    unet = config["unet2d"]
    assert unet["folds"] == 5 and unet["prepare"] == {"patch_size": [192, 160], "fold_seed": 12345}
    assert unet["model"]["filters"] == [32, 64, 128, 256, 512, 512]
    assert unet["train"]["lr"] == 0.001 and unet["train"]["batch_size"] == 64
    assert unet["profile"]["schedule"] == {"wait": 5, "warmup": 1, "active": 5, "repeat": 1}


def test_shipped_config_is_valid_and_keeps_its_values() -> None:
    shipped = yaml.safe_load((REPO / "config.yaml").read_text())
    config = validate(shipped)
    assert config["unet2d"]["train"]["epochs"] == shipped["unet2d"]["train"]["epochs"]
    assert config["unet2d"]["train"]["weight_decay"] == 0.0001  # filled from the schema


def test_validate_does_not_modify_its_input() -> None:
    raw = {"unet2d": {"train": {"lr": "0.1"}}}
    validate(raw)
    assert raw == {"unet2d": {"train": {"lr": "0.1"}}}


@pytest.mark.parametrize(
    ("config", "named"),
    [
        ({"unet2d": {"train": {"lrr": 1}}}, "'unet2d.train.lrr'"),
        ({"datasets": {"bratz": {}}}, "'datasets.bratz'"),
        ({"typo": 1}, "'typo'"),
        ({"backend": "tpu"}, "'backend'"),
        ({"unet2d": {"train": {"lr": "fast"}}}, "'unet2d.train.lr'"),
        ({"unet2d": {"train": {"lr": 0}}}, "'unet2d.train.lr'"),
        ({"unet2d": {"prepare": {"patch_size": [64]}}}, "'unet2d.prepare.patch_size'"),
        ({"datasets": {"brats": {"source": "ftp://x"}}}, "'datasets.brats.source'"),
        ({"unet2d": {"profile": {"schedule": {"active": 0}}}}, "'unet2d.profile.schedule.active'"),
        ({"cost": {"per_hour": {"tpu": 1.0}}}, "'cost.per_hour.tpu'"),
        ({"cost": {"per_hour": {"cuda": -1}}}, "'cost.per_hour.cuda'"),
    ],
)
def test_bad_keys_and_values_are_named(config: dict, named: str) -> None:
    with pytest.raises(ConfigError) as err:
        validate(config)
    assert named in str(err.value)


@pytest.mark.parametrize(
    ("config", "named"),
    [
        ({"ssd": {"trian": {}}}, "ssd.trian"),
        ({"ssd": {"train": {"lrr": 1}}}, "ssd.train.lrr"),
        ({"ssd": {"prepare": {"shards": 2}}}, "ssd.prepare.shards"),
        ({"ssd": {"model": {"depth": 34}}}, "ssd.model.depth"),
        ({"ssd": {"evaluate": {"iou": 0.5}}}, "ssd.evaluate.iou"),
        ({"ssd": {"runs": {"fast": {"lrr": 1}}}}, "ssd.runs.fast.lrr"),
        ({"datasets": {"coco": {"sorce": "coco"}}}, "datasets.coco.sorce"),
        ({"datasets": {"coco": {"synthetic": {"images": 3}}}}, "datasets.coco.synthetic.images"),
        ({"datasets": {"coco": {"download": {"test": {}}}}}, "datasets.coco.download.test"),
        (
            {"datasets": {"coco": {"download": {"val": {"sha1": "0"}}}}},
            "datasets.coco.download.val.sha1",
        ),
    ],
)
def test_unknown_ssd_and_coco_keys_are_named(config: dict, named: str) -> None:
    with pytest.raises(ConfigError) as err:
        validate(config)
    message = str(err.value)
    assert message.startswith(f"unknown config key '{named}' (allowed here: ")
    assert "\n" not in message


def test_cost_has_no_price_unless_given_one_per_backend() -> None:
    assert validate({})["cost"] == {"per_hour": {}}
    given = validate({"cost": {"per_hour": {"cuda": "4.5", "gaudi": 3}}})  # --config: strings
    assert given["cost"]["per_hour"] == {"cuda": 4.5, "gaudi": 3}


def test_strings_from_the_command_line_take_the_schema_types() -> None:
    config = validate(
        {
            "unet2d": {
                "train": {
                    "lr": "5e-4",
                    "epochs": "3",
                    "augment": "false",
                    "steps_per_epoch": "null",
                },
                "prepare": {"patch_size": ["32", "48"]},
            }
        }
    )
    train = config["unet2d"]["train"]
    assert (train["lr"], train["epochs"], train["augment"], train["steps_per_epoch"]) == (
        0.0005,
        3,
        False,
        None,
    )
    assert config["unet2d"]["prepare"]["patch_size"] == [32, 48]
    assert (
        validate({"datasets": {"brats": {"source": "path:/x"}}})["datasets"]["brats"]["source"]
        == "path:/x"
    )


def test_named_runs_override_the_train_block() -> None:
    config = validate({"resnet50": {"runs": {"fast": {"lr": "0.5", "compile": "true"}}}})
    settings = run_train(config["resnet50"], "resnet50", "fast")
    assert settings["lr"] == 0.5 and settings["compile"] is True
    assert settings["batch_size"] == config["resnet50"]["train"]["batch_size"]  # not overridden
    assert run_train(config["unet2d"], "unet2d", "fold3") == config["unet2d"]["train"]  # folds


@pytest.mark.parametrize(
    ("runs", "named"),
    [
        ({"fast": {"lrr": 1}}, "'resnet50.runs.fast.lrr'"),
        ({"cv": {}}, "'resnet50.runs'"),
    ],
)
def test_bad_runs_are_named(runs: dict, named: str) -> None:
    with pytest.raises(ConfigError) as err:
        validate({"resnet50": {"runs": runs}})
    assert named in str(err.value)


def test_unknown_run_names_the_known_ones() -> None:
    config = validate({})
    with pytest.raises(ConfigError, match=r"has no run 'nope' \(known: bf16, fp32\)"):
        run_train(config["resnet50"], "resnet50", "nope")


def test_the_profiler_records_after_the_performance_warmup() -> None:
    config = validate({})
    for workload in ("unet2d", "swinunetr", "resnet50", "ssd", "segmenter"):
        schedule = config[workload]["profile"]["schedule"]
        assert schedule["wait"] >= config["performance"]["warmup_steps"]
        assert schedule["active"] >= 5  # a median of the profiled steps
    early = {"ssd": {"profile": {"schedule": {"wait": 2}}}}
    with pytest.raises(ConfigError, match=r"'ssd\.profile\.schedule\.wait': 2 is less than"):
        validate(early)
    validate(early | {"performance": {"warmup_steps": 2}})
    validate({"ssd": {"profile": {"enabled": False, "schedule": {"wait": 0}}}})


@pytest.mark.parametrize(
    ("config", "named"),
    [
        ({"unet2d": {"train": {"lr": float("nan")}}}, "'unet2d.train.lr': nan"),
        ({"unet2d": {"train": {"lr": "nan"}}}, "'unet2d.train.lr': nan"),  # --config's text
        ({"resnet50": {"train": {"weight_decay": float("inf")}}}, "'resnet50.train.weight_decay'"),
        ({"unet2d": {"grid": {"train.lr": [0.001, float("nan")]}}}, "'unet2d.grid.train.lr[1]'"),
        ({"datasets": {"brats": {"msd": {"archive": {"max_ratio": float("inf")}}}}}, "max_ratio"),
    ],
)
def test_every_number_must_be_finite(config: dict, named: str) -> None:
    """NaN fails no comparison, so a `minimum` alone let `lr: .nan` through."""
    with pytest.raises(ConfigError, match=re.escape(named)) as err:
        validate(config)
    assert "is not a finite number" in str(err.value)


def test_yaml_nan_in_a_config_file_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"'ssd\.train\.lr': nan is not a finite number"):
        validate(yaml.safe_load("ssd:\n  train:\n    lr: .nan\n"))


def test_a_stage_slice_with_nan_is_refused() -> None:
    node = slice_schema("prepare", dataset="nsclc", variant="nifti")
    text = '{"prepare": {"val_fraction": NaN}}'  # JSON as Python writes it for a NaN
    with pytest.raises(ConfigError, match=r"stage: config key 'prepare.val_fraction': nan is"):
        validate_slice(load_slice(text), node, "prepare")


@pytest.mark.parametrize(
    ("part", "needle"),
    [
        ({"properties": {"backend": {}}}, "properties.backend is already in the schema"),
        ({"definitions": {"precision": {}}}, "definitions.precision is already in the schema"),
        ({"required": ["ssd"]}, "only definitions and properties, not 'required'"),
    ],
)
def test_a_workload_s_schema_part_adds_only_its_own_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, part: dict, needle: str
) -> None:
    """Each workload's block comes from its folder (workloads/<name>/schema.yaml), merged into
    the shared schema: a part that would replace a shared key is refused, naming its file."""
    (tmp_path / "schema.yaml").write_text(yaml.safe_dump(part))
    own = registry.folder
    monkeypatch.setattr(registry, "folder", lambda n: tmp_path if n == "ssd" else own(n))
    with pytest.raises(ConfigError, match=needle) as err:
        load()
    assert str(tmp_path / "schema.yaml") in str(err.value)


def test_the_loaded_schema_holds_each_workload_s_block_and_train_definition() -> None:
    loaded = load()
    for name in registry.WORKLOADS:
        assert loaded["properties"][name]["properties"]["train"] == {
            "$ref": f"#/definitions/{name}_train"
        }
        assert f"{name}_train" in loaded["definitions"]
    assert list(loaded["properties"])[-len(registry.WORKLOADS) :] == list(registry.WORKLOADS)


def test_grid_values_given_as_text_are_typed_as_the_key_they_vary() -> None:
    """Snakemake's --config reads nested values with YAML's BaseLoader, so
    `unet2d={"grid":{"train.lr":[0.0001,0.001]}}` arrives as strings."""
    grid = {"train.lr": ["0.0001", "0.001"], "train.batch_size": ["8"], "train.augment": ["false"]}
    config = validate({"unet2d": {"grid": grid}})
    assert config["unet2d"]["grid"] == {
        "train.lr": [0.0001, 0.001],
        "train.batch_size": [8],
        "train.augment": [False],
    }
    assert run_names(config["unet2d"], "unet2d")[-2:] == [
        "augment-false_batch_size-8_lr-0p0001",
        "augment-false_batch_size-8_lr-0p001",
    ]


def test_a_grid_value_that_cannot_be_typed_names_its_key() -> None:
    with pytest.raises(ConfigError, match=r"'unet2d\.grid\.train\.lr': 'fast' is not of type") as e:
        validate({"unet2d": {"grid": {"train.lr": ["0.001", "fast"]}}})
    assert "'unet2d.train.lr', the key it varies" in str(e.value)
    with pytest.raises(ConfigError, match=r"'unet2d\.grid\.train\.lr\[0\]': nan is not a finite"):
        validate({"unet2d": {"grid": {"train.lr": ["nan"]}}})
