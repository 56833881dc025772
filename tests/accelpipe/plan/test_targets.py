"""Targets a config cannot have are refused with the key that decides them."""

from __future__ import annotations

import pytest

from accelpipe.config.schema import validate
from accelpipe.core.errors import ConfigError
from accelpipe.plan import targets
from accelpipe.plan.targets import (
    check_dataset,
    check_grid,
    check_run,
    cross_validation_runs,
    variant_owner,
    workload_data,
)


@pytest.fixture(scope="module")
def config() -> dict:
    return validate(
        {
            "unet2d": {"folds": 5, "runs": {"default": {}, "slow": {"lr": 0.0001}}},
            "swinunetr": {"runs": {"default": {}, "b": {}}},
        }
    )


@pytest.mark.parametrize("run", ["fold0", "fold4", "slow/fold0", "slow/fold4"])
def test_folds_of_each_named_run_below_the_count_exist(config: dict, run: str) -> None:
    check_run(config, "unet2d", run)  # accepted, and listed as a target
    assert f"results/unet2d/{run}" in {t.path for t in targets.buildable(config, 0)}


@pytest.mark.parametrize(
    "run", ["fold5", "fold7", "fold01", "fold-1", "default", "fold", "slow", "slow/fold5"]
)
def test_other_unet2d_runs_name_the_folds_key(config: dict, run: str) -> None:
    with pytest.raises(ConfigError, match=r"'unet2d\.folds' is 5, so each run's folds are fold0"):
        check_run(config, "unet2d", run)


def test_the_default_runs_folds_have_no_name_in_their_path(config: dict) -> None:
    with pytest.raises(
        ConfigError, match=r"folds of the run named default are results/unet2d/fold2"
    ):
        check_run(config, "unet2d", "default/fold2")


def test_a_fold_of_an_unknown_run_names_the_runs_key(config: dict) -> None:
    with pytest.raises(
        ConfigError, match=r"'unet2d\.runs' has no run 'fast' \(known: default, slow"
    ):
        check_run(config, "unet2d", "fast/fold0")


def test_named_runs_come_from_the_runs_key(config: dict) -> None:
    check_run(config, "swinunetr", "b")
    with pytest.raises(ConfigError, match=r"'swinunetr\.runs' has no run 'c' \(known: b, default"):
        check_run(config, "swinunetr", "c")


def test_unknown_workload_lists_the_known_ones(config: dict) -> None:
    with pytest.raises(ConfigError, match=r"unknown workload 'yolov8' \(known: resnet50, "):
        check_run(config, "yolov8", "default")
    with pytest.raises(ConfigError, match="unknown workload 'yolov8'"):
        workload_data("yolov8")


def test_cross_validation_only_where_there_are_folds(config: dict) -> None:
    assert cross_validation_runs(config, "unet2d", "cv") == [f"fold{k}" for k in range(5)]
    assert cross_validation_runs(config, "unet2d", "slow/cv") == [f"slow/fold{k}" for k in range(5)]
    with pytest.raises(ConfigError, match=r"'unet2d\.runs' has no run 'fast'"):
        cross_validation_runs(config, "unet2d", "fast/cv")
    with pytest.raises(ConfigError, match=r"swinunetr has no cross-validation.*'swinunetr\.runs'"):
        cross_validation_runs(config, "swinunetr", "cv")


@pytest.mark.parametrize("workload", ["unet2d", "swinunetr", "resnet50", "ssd", "segmenter"])
def test_every_workload_has_a_grid_of_named_runs(workload: str) -> None:
    config = validate({workload: {"grid": {"train.lr": [0.1, 0.01]}}})
    runs = check_grid(config, workload)
    # a cross-validated workload's grid ranks fold 0 of each run
    names = ["lr-0p1", "lr-0p01"]
    assert runs == ([f"{n}/fold0" for n in names] if workload == "unet2d" else names)
    for run in runs:
        check_run(config, workload, run)


def test_an_empty_grid_says_how_to_name_one() -> None:
    with pytest.raises(ConfigError, match=r"'resnet50\.grid' is empty.*train\.lr"):
        check_grid(validate({}), "resnet50")


def test_datasets_and_variants() -> None:
    assert variant_owner("brats", "2d") == "unet2d"
    assert variant_owner("imagenet", "index") == "resnet50"
    check_dataset("nsclc")
    with pytest.raises(ConfigError, match=r"unknown dataset .kits. \(known: ade20k, brats, coco"):
        check_dataset("kits")
    with pytest.raises(ConfigError, match=r"'brats' has no prepared variant '3d' \(known: 2d\)"):
        variant_owner("brats", "3d")


def test_benchmark_rows_are_every_precision_times_batch_size() -> None:
    config = validate({"ssd": {"benchmark": {"batch_sizes": [8, 16], "precisions": ["bf16"]}}})
    assert targets.benchmark_rows(config, "ssd") == ["bf16-b8", "bf16-b16"]
    assert targets.check_benchmark_row(config, "ssd", "bf16-b16") == ("bf16", 16)


def test_benchmark_batch_sizes_default_to_the_train_batch(config: dict) -> None:
    batch = config["resnet50"]["train"]["batch_size"]
    assert targets.benchmark_rows(config, "resnet50") == [f"bf16-b{batch}", f"fp32-b{batch}"]


def test_a_benchmark_row_the_config_lacks_names_both_keys(config: dict) -> None:
    with pytest.raises(ConfigError) as err:
        targets.check_benchmark_row(config, "ssd", "fp16-b128")
    assert "'ssd.benchmark.precisions'" in str(err.value)
    assert "'ssd.benchmark.batch_sizes'" in str(err.value)
    assert "bf16-b128, fp32-b128" in str(err.value)


def test_benchmark_rows_train_as_fold0_where_there_are_folds(config: dict) -> None:
    assert targets.benchmark_run(config, "unet2d") == "fold0"
    assert targets.benchmark_run(config, "ssd") == "benchmark"
