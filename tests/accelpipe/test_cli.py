"""The `accelpipe` command: user errors are one line on stderr with exit status 2, and
every stage's --help ends with an example that runs."""

from __future__ import annotations

import argparse
import json
import re
import shlex
from pathlib import Path

import pytest

from accelpipe import stages
from accelpipe.cli import build_parser, check_config_json, main
from accelpipe.config.runtime import RUNTIME_ENV
from accelpipe.stages.examples import EXAMPLES


def _raw(tmp_path: Path, cfg: str, *, dataset: str = "brats", out: str = "raw") -> list[str]:
    """argv of an `accelpipe raw` stage writing into tmp_path."""
    return [
        "raw",
        "--dataset",
        dataset,
        "--config-json",
        cfg,
        "--out",
        str(tmp_path / out),
        "--downloads",
        str(tmp_path / "dl"),
    ]


def test_bad_config_json_is_one_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(_raw(tmp_path, "{not json"))
    assert code == 2
    err = capsys.readouterr().err
    assert "--config-json is not valid JSON" in err and "Traceback" not in err
    assert not (tmp_path / "raw").exists()


def test_error_goes_to_log_file_and_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "logs/raw.log"
    missing = tmp_path / "nowhere"
    cfg = json.dumps({"source": f"path:{missing}"})
    code = main(["--log", str(log), *_raw(tmp_path, cfg)])
    assert code == 2
    assert str(missing) in capsys.readouterr().err
    assert str(missing) in log.read_text()
    assert not (tmp_path / "raw").exists()


def test_synthetic_raw_stage_writes_layout_and_stage_record(tmp_path: Path) -> None:
    cfg = json.dumps(
        {"source": "synthetic", "synthetic": {"cases": 5, "shape": [16, 16, 16], "seed": 0}}
    )
    out = tmp_path / "raw"
    assert main(_raw(tmp_path, cfg)) == 0
    stage = json.loads((out / "stage.json").read_text())
    assert stage["stage"] == "raw" and stage["cases"] == 5 and stage["source"] == "synthetic"
    assert len(list((out / "Task01_BrainTumour/imagesTr").glob("*.nii.gz"))) == 5


def test_unknown_dataset_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(_raw(tmp_path, "{}", dataset="kits", out="r")) == 2
    assert "'kits'" in capsys.readouterr().err


def test_accel_leases_devices_sets_visibility_and_releases(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from accelpipe.core import leases

    monkeypatch.setenv("ACCELPIPE_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    seen: dict[str, str | None] = {}

    def fake_stage(args: object) -> None:  # records what the stage would see
        import os

        seen["visible"] = os.environ.get("CUDA_VISIBLE_DEVICES")
        with (
            pytest.raises(AssertionError),
            leases.lease(2, ["7", "9"], tmp_path / "locks", on_wait=_no_wait),
        ):
            pass  # "7" is held by this stage's lease: only "9" is free

    monkeypatch.setattr("accelpipe.stages.data.run_raw", fake_stage)
    runtime = {"runtime": "local", "backend": "cuda", "pool": ["7", "9"]}
    monkeypatch.setenv(RUNTIME_ENV, json.dumps({"pytorch": runtime}))
    code = main(["--framework", "pytorch", "--accel", "1", *_raw(tmp_path, "{}", out="r")])
    assert code == 0
    assert seen["visible"] == "7"
    with leases.lease(2, ["7", "9"], tmp_path / "locks", on_wait=_no_wait) as devices:
        assert devices == ["7", "9"]  # released when the stage ended


def _no_wait() -> None:
    raise AssertionError("would wait for a device")


def _stage_argv(stage: str, tmp_path: Path, cfg: str) -> list[str]:
    """argv of `stage` with `cfg` as its --config-json, every path under tmp_path."""
    p = str(tmp_path)
    run = ["--workload", "ssd", "--run", "fp32"]
    argv = {
        "raw": ["--dataset", "coco", "--downloads", p],
        "prepare": ["--dataset", "coco", "--variant", "tfrecord", "--raw", p],
        "train": [*run, "--prepared", p],
        "evaluate": [*run, "--prepared", p, "--model", p],
        "publish": ["--workload", "ssd", *(f"--{k}" for k in ("raw",)), p]
        + [x for k in ("prepared", "model", "eval", "trace") for x in (f"--{k}", p)],
        "grid": ["--workload", "segmenter", "--runs", p],
        "benchmark": ["--workload", "ssd", "--rows", p],
        "compare": ["--runs", p],
    }[stage]
    return [stage, *argv, "--config-json", cfg, "--out", str(tmp_path / "out")]


@pytest.mark.parametrize(
    ("stage", "cfg", "key"),
    [
        ("raw", '{"sourc": "synthetic"}', "unknown config key 'sourc'"),
        ("prepare", "{}", "missing key 'prepare'"),
        ("train", "{}", "missing keys 'backend', 'model', 'profile', 'train'"),
        ("train", '{"backend": "cpu", "model": {}, "profile": {}}', "missing key 'train'"),
        ("evaluate", '{"backend": "cpu", "train": {}, "target": null}', "missing key 'evaluate'"),
        ("publish", "{}", "missing keys 'backend', 'datasets'"),
        ("grid", '{"keys": "model.encoder"}', "config key 'keys': 'model.encoder' is not of"),
        ("benchmark", '{"warmup_steps": -1}', "config key 'warmup_steps': -1 is less than"),
        ("compare", '{"cost": {"per_hour": {"tpu": 1}}}', "unknown config key 'cost.per_hour.tpu'"),
    ],
)
def test_a_bad_config_json_of_any_stage_is_one_line_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], stage: str, cfg: str, key: str
) -> None:
    """Checked before the stage runs: no KeyError traceback from inside it, nothing made."""
    assert main(_stage_argv(stage, tmp_path, cfg)) == 2
    err = capsys.readouterr().err
    assert f"accelpipe {stage}: --config-json of the {stage} stage: {key}" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_the_stage_reads_its_slice_with_the_configs_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from accelpipe.config.schema import validate

    seen: list[dict] = []
    monkeypatch.setattr(
        "accelpipe.stages.data.run_raw", lambda args: seen.append(json.loads(args.config_json))
    )
    assert main(_stage_argv("raw", tmp_path, '{"source": "synthetic"}')) == 0
    assert seen == [validate({})["datasets"]["coco"]]


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def test_every_subcommand_is_a_stage_with_an_example() -> None:
    assert set(_subcommands()) == set(stages.MODULES) == set(EXAMPLES)


@pytest.mark.parametrize("stage", sorted(stages.MODULES))
def test_every_stage_help_has_an_example_that_parses_and_validates(
    stage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`accelpipe <stage> --help` shows an example line `accelpipe <stage> ...`; it parses
    with the real parser (the real argument names) and its --config-json is a slice the
    stage takes."""
    with pytest.raises(SystemExit) as done:
        main([stage, "--help"])
    assert done.value.code == 0
    lines = [line.strip() for line in capsys.readouterr().out.splitlines()]
    found = [line for line in lines if re.match(rf"accelpipe {re.escape(stage)}(\s|$)", line)]
    assert found, f"no example line in `accelpipe {stage} --help`"
    for line in found:
        args = build_parser().parse_args(shlex.split(line)[1:])
        assert args.stage == stage
        check_config_json(args)  # raises ConfigError naming the key if the slice is wrong
