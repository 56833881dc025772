from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from accelpipe import datasets
from accelpipe.config import registry
from accelpipe.config.schema import EVAL_OUTSIDE_TRAIN_KEY, slice_schema, validate, validate_slice
from accelpipe.core.errors import ConfigError
from accelpipe.plan import stage_config


@pytest.fixture(scope="module")
def config() -> dict:
    return validate({"ssd": {"train": {"lr": 0.5}, "runs": {"small": {"batch_size": 4}}}})


def test_train_slice_is_the_run_with_its_overrides_and_nothing_else(config: dict) -> None:
    train = stage_config.train(config, "ssd", "small")
    assert set(train) == {"backend", "model", "train", "profile"}
    assert train["train"]["lr"] == 0.5 and train["train"]["batch_size"] == 4
    assert "runs" not in train and "evaluate" not in train


def test_evaluate_slice_carries_only_the_precision_of_training(config: dict) -> None:
    evaluate = stage_config.evaluate(config, "ssd", "small")
    assert evaluate == {
        "backend": "cpu",
        "evaluate": config["ssd"]["evaluate"],
        "train": {"precision": "auto"},
        "target": None,  # the published one
    }


def test_prepare_slice_is_the_owning_workloads_prepare_block(config: dict) -> None:
    assert stage_config.prepare(config, "coco", "tfrecord") == {"prepare": config["ssd"]["prepare"]}
    assert stage_config.prepare(config, "brats", "2d")["folds"] == 5


def test_publish_slice_names_the_dataset_and_the_resolved_run(config: dict) -> None:
    publish = stage_config.publish(config, "ssd", "small")
    assert set(publish["datasets"]) == {"coco"}
    assert publish["ssd"]["train"]["batch_size"] == 4


def test_performance_settings_reach_publish_only(config: dict) -> None:
    """A new warm-up count rewrites performance.json without re-running training."""
    assert stage_config.publish(config, "ssd", "small")["performance"] == {"warmup_steps": 5}
    assert "performance" not in stage_config.train(config, "ssd", "small")


@pytest.mark.parametrize(
    ("workload", "setting"),
    [
        ("unet2d", {"batch_size": 3}),
        ("swinunetr", {"sw_batch_size": 7}),
        ("resnet50", {"batch_size": 5, "loader_workers": 0}),
        ("ssd", {"batch_size": 2}),
        ("segmenter", {"batch_size": 1, "prediction_images": 9}),
    ],
)
def test_evaluate_settings_that_cannot_change_training_stay_out_of_its_slice(
    workload: str, setting: dict
) -> None:
    """Issue 30 item 15: a new evaluation batch size re-runs the evaluate stage, never the
    training that evaluates inside it; the train job gets the value from eval_settings."""
    evaluating = {"train": {"eval_every": 1}, "runs": {"r": {}}}
    run = "r/fold0" if workload == "unet2d" else "r"  # unet2d's runs are cross-validated
    base = validate({workload: evaluating})
    changed = validate({workload: evaluating | {"evaluate": setting}})
    assert "evaluate" in stage_config.train(base, workload, run)
    assert stage_config.train(changed, workload, run) == stage_config.train(base, workload, run)
    assert stage_config.evaluate(changed, workload, run) != stage_config.evaluate(
        base, workload, run
    )
    assert stage_config.eval_settings(changed)[workload] == (
        stage_config.eval_settings(base)[workload] | setting
    )


@pytest.mark.parametrize(
    ("workload", "setting"),
    [
        ("swinunetr", {"overlap": 0.25}),
        ("ssd", {"nms_iou": 0.6}),
        ("segmenter", {"short_side": 64}),
    ],
)
def test_evaluate_settings_that_change_scores_retrain_a_run_evaluating_inside(
    workload: str, setting: dict
) -> None:
    evaluating = {"train": {"eval_every": 1}, "runs": {"r": {}}}
    base = validate({workload: evaluating})
    changed = validate({workload: evaluating | {"evaluate": setting}})
    assert stage_config.train(changed, workload, "r") != stage_config.train(base, workload, "r")


def test_a_run_the_config_lacks_is_refused_naming_the_key(config: dict) -> None:
    with pytest.raises(ConfigError, match=r"ssd\.runs"):
        stage_config.train(config, "ssd", "nope")


def test_a_cross_validated_runs_folds_train_its_settings() -> None:
    config = validate({"unet2d": {"runs": {"default": {}, "slow": {"lr": 0.0001}}}})
    assert stage_config.train(config, "unet2d", "slow/fold3")["train"]["lr"] == 0.0001
    default = stage_config.train(config, "unet2d", "fold3")["train"]
    assert default == config["unet2d"]["train"]


def test_benchmark_row_is_the_base_train_block_at_the_rows_precision_and_batch() -> None:
    config = validate(
        {
            "ssd": {
                "train": {"lr": 0.5, "epochs": 50},
                "runs": {"small": {"batch_size": 4}},
                "benchmark": {"warmup_steps": 3, "steps": 7, "batch_sizes": [16]},
            }
        }
    )
    row = stage_config.benchmark_row(config, "ssd", "bf16-b16")
    assert row["train"] == config["ssd"]["train"] | {
        "precision": "bf16",
        "batch_size": 16,
        "epochs": 1,
        "steps_per_epoch": 10,
        "log_every": 1,
    }
    assert row["profile"]["enabled"] is False and row["model"] == config["ssd"]["model"]
    assert stage_config.benchmark(config, "ssd") == {"warmup_steps": 3}


def test_benchmark_settings_are_not_part_of_any_runs_slices(config: dict) -> None:
    changed = validate(
        {
            "ssd": {
                "train": {"lr": 0.5},
                "runs": {"small": {"batch_size": 4}},
                "benchmark": {"steps": 99},
            }
        }
    )
    for slice_of in (stage_config.train, stage_config.evaluate, stage_config.publish):
        assert slice_of(changed, "ssd", "small") == slice_of(config, "ssd", "small")


# ----------------------------------------------------------------------------- slice schemas


def _shipped_config(name: str) -> dict:
    import yaml

    return validate(yaml.safe_load((Path(__file__).parents[3] / name).read_text()))


def _every_slice(config: dict):
    """(stage, names, slice) of every slice the rules pass for `config`."""
    from accelpipe.config import registry
    from accelpipe.config.schema import fold_run, run_names
    from accelpipe.plan import targets

    for name in registry.DATASETS:
        yield "raw", {"dataset": name}, stage_config.raw(config, name)
    for workload, entry in registry.WORKLOADS.items():
        names = {"workload": workload}
        yield (
            "prepare",
            {"dataset": entry.dataset, "variant": entry.variant},
            (stage_config.prepare(config, entry.dataset, entry.variant)),
        )
        runs = run_names(config[workload], workload)
        if "folds" in config[workload]:
            runs = [fold_run(name, 0) for name in runs]
        for run in runs:
            for stage in ("train", "evaluate", "publish"):
                yield stage, names, getattr(stage_config, stage)(config, workload, run)
        for row in targets.benchmark_rows(config, workload):
            yield "train", names, stage_config.benchmark_row(config, workload, row)
        yield "benchmark", names, stage_config.benchmark(config, workload)
        if config[workload].get("grid"):
            yield "grid", names, {"keys": sorted(config[workload]["grid"])}
    yield "compare", {}, {"cost": config["cost"]}


def _drop_unused_sources(stage: str, filled: dict) -> None:
    """A raw or publish slice holds only its dataset's active source; checking it fills in the
    others' defaults, which nothing reads."""
    if stage == "raw":
        active = stage_config.active_source(filled)
        filled.clear()
        filled.update(active)
    if stage == "publish":
        for name, block in filled["datasets"].items():
            filled["datasets"][name] = stage_config.active_source(block)


@pytest.mark.parametrize("which", ["defaults", "config.yaml", ".test/config.yaml"])
def test_every_slice_the_rules_pass_is_valid_and_complete(which: str) -> None:
    """Each slice stage_config builds passes its stage's schema with nothing to fill in but
    the evaluate settings a train slice leaves to $ACCELPIPE_EVAL_SETTINGS (their defaults,
    for a train stage run by hand)."""
    config = validate({}) if which == "defaults" else _shipped_config(which)
    seen = set()
    for stage, names, value in _every_slice(config):
        node = slice_schema(stage, **names)
        filled = validate_slice(value, node, stage)
        _drop_unused_sources(stage, filled)
        for key in EVAL_OUTSIDE_TRAIN_KEY if stage == "train" else ():
            filled.get("evaluate", {}).pop(key, None)
        assert filled == value, (stage, names)
        seen.add(stage)
    stages = {"raw", "prepare", "train", "evaluate", "publish", "benchmark", "compare"}
    assert seen == stages | ({"grid"} if which != "defaults" else set())


@pytest.mark.parametrize(
    ("stage", "names", "value", "message"),
    [
        ("train", {"workload": "ssd"}, {}, "missing keys 'backend', 'model', 'profile', 'train'"),
        ("train", {"workload": "ssd"}, {"backend": "cpu", "model": {}, "profile": {}},
         "missing key 'train' (the slice's sections: backend, model, profile, train)"),
        ("evaluate", {"workload": "segmenter"}, {"backend": "cpu", "train": {}, "target": None},
         "missing key 'evaluate'"),
        ("prepare", {"dataset": "brats", "variant": "2d"}, {"prepare": {}}, "missing key 'folds'"),
        ("publish", {"workload": "resnet50"}, {}, "missing keys 'backend', 'datasets'"),
        ("benchmark", {"workload": "ssd"}, {}, "missing key 'warmup_steps'"),
        ("grid", {"workload": "segmenter"}, {}, "missing key 'keys'"),
        ("compare", {}, {}, "missing key 'cost'"),
        ("train", {"workload": "ssd"}, {"backend": "cpu", "model": {}, "profile": {},
         "train": {"lrr": 1}}, "unknown config key 'train.lrr'"),
        ("train", {"workload": "ssd"}, {"backend": "tpu", "model": {}, "profile": {},
         "train": {}}, "config key 'backend': 'tpu' is not one of"),
        ("evaluate", {"workload": "ssd"}, {"backend": "cpu", "train": {}, "target": None,
         "evaluate": {"batch_size": 0}}, "config key 'evaluate.batch_size': 0 is less than"),
        ("raw", {"dataset": "coco"}, {"source": "ftp://x"}, "config key 'source': 'ftp://x'"),
        ("compare", {}, {"cost": {}, "extra": 1}, "unknown config key 'extra'"),
    ],
)  # fmt: skip
def test_a_bad_slice_is_one_error_naming_the_key(stage, names, value, message) -> None:
    with pytest.raises(ConfigError) as err:
        validate_slice(value, slice_schema(stage, **names), stage)
    assert str(err.value).startswith(f"--config-json of the {stage} stage: ")
    assert message in str(err.value), str(err.value)


def test_keys_inside_a_section_default_as_in_the_config() -> None:
    node = slice_schema("evaluate", workload="ssd")
    value = {"backend": "cpu", "evaluate": {}, "train": {}, "target": None}
    filled = validate_slice(value, node, "evaluate")
    assert filled["evaluate"] == validate({})["ssd"]["evaluate"]
    assert filled["train"] == {"precision": "auto"}


def test_unknown_names_are_refused_naming_them() -> None:
    with pytest.raises(ConfigError, match="unknown workload 'yolo'"):
        slice_schema("train", workload="yolo")
    with pytest.raises(ConfigError, match="'coco' has no prepared variant 'raw'"):
        slice_schema("prepare", dataset="coco", variant="raw")
    assert slice_schema("summarize-trace") is None


# ----------------------------------------------------------------------------- config hash


def test_a_runs_config_hash_changes_with_what_makes_its_result_only() -> None:
    """Issue 30 item 13: the hash of the run's raw, prepare, train and evaluate slices."""
    base = validate({})
    hash_ = stage_config.run_config_hash(base, "resnet50", "fp32")
    assert (
        len(hash_) == 64 and stage_config.publish(base, "resnet50", "fp32")["config_hash"] == hash_
    )
    same = (
        {"cost": {"per_hour": {"cpu": 1.0}}},  # the page's prices
        {"resnet50": {"benchmark": {"steps": 99}}},  # another target's settings
        {"resnet50": {"runs": {"fp32": {"precision": "fp32"}, "extra": {}}}},  # another run
        {"performance": {"warmup_steps": 2}},  # how publish reads it
    )
    for change in same:
        assert stage_config.run_config_hash(validate(change), "resnet50", "fp32") == hash_, change
    different = (
        {"resnet50": {"train": {"lr": 0.5}}},
        {"resnet50": {"model": {"width": 8}}},
        {"resnet50": {"evaluate": {"batch_size": 8}}},  # re-runs evaluate: its metric
        {"datasets": {"imagenet": {"synthetic": {"classes": 3}}}},
        {"backend": "cuda"},
    )
    for change in different:
        assert stage_config.run_config_hash(validate(change), "resnet50", "fp32") != hash_, change


def test_current_hashes_name_a_run_the_config_cannot_make_none() -> None:
    config = validate({})
    hashes = stage_config.current_hashes(config, [("resnet50", "fp32"), ("resnet50", "tiny")])
    assert hashes == {
        "resnet50/fp32": stage_config.run_config_hash(config, "resnet50", "fp32"),
        "resnet50/tiny": None,
    }


@pytest.mark.parametrize(
    ("source", "kept"),
    [
        ("synthetic", {"synthetic"}),
        ("msd", {"msd"}),
        ("path:/data/Task01_BrainTumour", set()),
    ],
)
def test_raw_and_publish_slices_hold_only_the_active_source(source: str, kept: set) -> None:
    """Editing the URL of a source that is not used must not re-run the raw job (and with it
    everything after it): the slices are Snakemake's rerun trigger."""
    config = validate({"datasets": {"brats": {"source": source}}})
    raw = stage_config.raw(config, "brats")
    assert raw == {"source": source} | {k: config["datasets"]["brats"][k] for k in kept}
    assert stage_config.publish(config, "unet2d", "fold0")["datasets"] == {"brats": raw}
    other = validate(
        {"datasets": {"brats": {"source": source, "msd": {"url": "https://mirror/x.tar"}}}}
    )
    assert (stage_config.raw(other, "brats") == raw) is (source != "msd")


def test_the_publish_slice_shows_a_dataset_url_without_its_credentials() -> None:
    url = "https://alice:pa55word@host/Task01.tar?X-Amz-Signature=5ecre75ig"
    config = validate({"datasets": {"brats": {"source": "msd", "msd": {"url": url}}}})
    assert stage_config.raw(config, "brats")["msd"]["url"] == url  # the raw job fetches it
    published = stage_config.publish(config, "unet2d", "fold0")["datasets"]["brats"]["msd"]
    assert published["url"] == "https://***@host/Task01.tar?X-Amz-Signature=***"


def test_every_datasets_official_settings_block_is_the_one_its_source_reads() -> None:
    """active_source finds a dataset's official settings as the one block beside `source` and
    `synthetic`: the block its RawSources hands the official source."""
    for name in registry.DATASETS:
        sources = datasets.get(name).SOURCES
        config = validate({"datasets": {name: {"source": sources.official}}})
        block = config["datasets"][name]
        assert set(block) == {"source", "synthetic", sources.settings}
        assert stage_config.active_source(block) == {
            "source": sources.official,
            sources.settings: block[sources.settings],
        }


def test_planning_loads_no_power_meter_no_mlperf_log_and_no_tensorboard() -> None:
    """Snakemake imports stage_config (and the preflight, through it) to plan a DAG: the
    publish slice's figures come from the figure catalogue alone, not from the modules that
    meter, log or write a run (issue 32 item 4: performance.py brought all of them along)."""
    heavy = (
        "accelpipe.devices.power",
        "accelpipe.core.mllog",
        "accelpipe.engines.run_log",
        "tensorboard",
    )
    probe = (
        "import sys; import accelpipe.plan.stage_config, accelpipe.plan.preflight; "
        f"print(sorted(m for m in {heavy!r} if m in sys.modules))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert loaded == "[]"
