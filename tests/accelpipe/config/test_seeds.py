"""`<workload>.seeds`: a run repeated with several seeds, each its own named run."""

from __future__ import annotations

import pytest

from accelpipe.config.schema import run_names, run_train, validate
from accelpipe.core.errors import ConfigError
from accelpipe.plan import stage_config, targets

RUNS = {"fp32": {"precision": "fp32", "lr": 0.5}, "bf16": {"precision": "bf16"}}


def _config(seeds: dict | None = None, **block: object) -> dict:
    resnet50: dict = {"runs": RUNS, **block}
    if seeds is not None:
        resnet50["seeds"] = seeds
    return validate({"resnet50": resnet50})


def test_each_seed_is_a_run_with_the_runs_settings_and_its_seed() -> None:
    config = _config({"run": "fp32", "values": [3, 7]})
    block = config["resnet50"]
    assert run_names(block, "resnet50") == ["bf16", "fp32", "fp32-seed3", "fp32-seed7"]
    train = run_train(block, "resnet50", "fp32-seed7")
    assert (train["precision"], train["lr"], train["seed"]) == ("fp32", 0.5, 7)
    assert targets.check_ttt(config, "resnet50") == ["fp32-seed3", "fp32-seed7"]


def test_the_run_defaults_to_the_first_by_name() -> None:
    config = _config({"values": [1, 2, 3, 4, 5]})
    assert targets.check_ttt(config, "resnet50") == [f"bf16-seed{k}" for k in range(1, 6)]


def test_a_cross_validated_workload_combines_fold0_of_each_seed_run() -> None:
    config = validate({"unet2d": {"seeds": {"values": [1, 2, 3]}}})
    assert targets.check_ttt(config, "unet2d") == [
        "default-seed1/fold0",
        "default-seed2/fold0",
        "default-seed3/fold0",
    ]
    targets.check_run(config, "unet2d", "default-seed2/fold3")  # every fold of it exists


def test_without_seeds_there_is_no_ttt_and_the_error_names_the_key() -> None:
    with pytest.raises(ConfigError, match=r"config key 'resnet50.seeds.values' is empty"):
        targets.check_ttt(_config(), "resnet50")
    assert run_names(_config({})["resnet50"], "resnet50") == ["bf16", "fp32"]
    assert not [t for t in targets.buildable(_config(), 0) if t.kind == "ttt"]


def test_a_seed_run_of_an_unknown_run_or_a_clashing_name_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"'resnet50.seeds.run': 'fp16' is not a run"):
        _config({"run": "fp16", "values": [1]})
    clashing = RUNS | {"fp32-seed1": {"precision": "fp32"}}
    with pytest.raises(ConfigError, match=r"fp32-seed1 is also a run of 'resnet50.seeds'"):
        validate({"resnet50": {"runs": clashing, "seeds": {"run": "fp32", "values": [1]}}})


def test_the_seeds_are_listed_and_changing_them_retrains_no_other_run() -> None:
    config = _config({"run": "fp32", "values": [1, 2]})
    kinds = {t.path: t.kind for t in targets.buildable(config, 0)}
    assert kinds["results/resnet50/ttt"] == "ttt"
    assert kinds["results/resnet50/fp32-seed2"] == "seed_run"
    other = _config({"run": "fp32", "values": [1, 2, 3]})
    for run in ("fp32", "fp32-seed1"):
        assert stage_config.train(config, "resnet50", run) == stage_config.train(
            other, "resnet50", run
        )
