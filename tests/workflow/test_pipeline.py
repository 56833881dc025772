"""End-to-end runs of the real snakemake workflow on the tiny config."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from accelpipe.config.quality import load_targets
from tests.helpers.evaluation_checks import check_evaluations
from tests.helpers.performance_checks import check_headline
from tests.helpers.profile_schedule import PROFILED_STEPS, TINY_SCHEDULE
from tests.helpers.tensorboard import read_scalars
from tests.workflow.project import TINY_CONFIG, Project, head_commit

pytestmark = pytest.mark.e2e

DOWNSTREAM_OF_TRAIN = {"train", "evaluate", "summarize_trace", "publish_run"}


def test_fold0_result_folder_holds_its_scores_trace_and_provenance(project: Project) -> None:
    """What every run publishes: tests/workflow/test_result_folders.py; here, what it holds."""
    result = project.root / "results/unet2d/fold0"
    assert {"per_case_dice.csv", "trace_summary.md"} <= {p.name for p in result.iterdir()}

    metrics = json.loads((result / "metrics.json").read_text())
    assert set(metrics["dice"]) == {"1", "2", "3"}
    assert all(0.0 <= v <= 1.0 for v in metrics["dice"].values())
    assert metrics["mean_dice"] == pytest.approx(sum(metrics["dice"].values()) / 3, abs=1e-5)
    # judged by the published nnU-Net 2D target of our recipe (the tiny config sets none): the
    # five folds' best epochs at 21.02, so one fold's verdict is indicative and says why
    verdict = metrics["quality_target"]
    published = load_targets()["unet2d"]
    assert (verdict["metric"], verdict["target"]) == ("mean_dice", published.value)
    assert verdict["recipe"] == verdict["our_recipe"] == "nvidia-nnunet-21.02@2b20ca80"
    assert verdict["comparable"] is False and "averaged over the folds" in verdict["differences"][0]
    assert verdict["reached"] is (metrics["mean_dice"] >= published.value)
    # evaluated inside training after both epochs, with the evaluate stage's scoring
    check_evaluations(result, [1, 2], reached=metrics["mean_dice"] >= published.value)

    with (result / "per_case_dice.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == metrics["n_cases"] == 1  # 5 cases, 5 folds: one validation case

    with (result / "train_log.csv").open() as f:
        log = list(csv.DictReader(f))
    assert [int(r["step"]) for r in log] == list(range(1, 7))  # 2 epochs x 3 steps
    assert all(float(r["samples_per_s"]) > 0 and float(r["lr"]) > 0 for r in log)

    summary = json.loads((result / "trace_summary.json").read_text())
    assert {"forward", "loss", "backward", "optimizer_step", "loader_first", "step"} <= set(
        summary["sections"]
    )
    assert summary["sections"]["forward"]["count"] == 2  # the 2 active profiler steps
    assert summary["memory"]["sections"]["forward"]["cpu"] > 0  # from the [memory] events
    assert (result / "step_breakdown.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The one profiler cycle's key-averages table; no memory snapshot on the CPU.
    tables = result / "profiler_tables"
    assert [p.name for p in tables.iterdir()] == ["trace_step000004.key_averages.txt"]
    assert "forward" in (tables / "trace_step000004.key_averages.txt").read_text()
    assert not (result / "memory_snapshot.pickle").exists()

    provenance = json.loads((result / "provenance.json").read_text())
    assert provenance["backend"] == "cpu" and provenance["device"].startswith("cpu")
    assert provenance["config"]["unet2d"]["train"]["lr"] == 0.001
    assert {"raw", "prepare", "train", "evaluate", "trace"} <= set(provenance["stages"])
    assert provenance["packages"]["torch"].startswith("2.")
    assert provenance["git"] == {"commit": head_commit(project.root), "dirty": False}
    _check_performance(result, log, provenance)
    # TensorBoard: the train log's scalars and the evaluation's metrics at the last step
    work = project.root / "work/unet2d/fold0"
    assert list((work / "train/tensorboard").glob("events.out.tfevents.*"))
    assert read_scalars(work / "eval/tensorboard")["eval/mean_dice"] == [
        (len(log), pytest.approx(metrics["mean_dice"], rel=1e-6))
    ]


def _check_performance(result: Path, log: list[dict], provenance: dict) -> None:
    """performance.json equals a recomputation from the published train_log.csv."""
    performance = json.loads((result / "performance.json").read_text())
    warmup = TINY_CONFIG["performance"]["warmup_steps"]
    assert TINY_CONFIG["unet2d"]["profile"]["schedule"] == TINY_SCHEDULE
    assert [int(r["step"]) for r in log if r["profiled"] == "1"] == PROFILED_STEPS
    measured = [r for r in log[warmup:] if r["profiled"] == "0"]
    assert performance["steps"] == {
        "total": len(log),
        "logged": len(log),
        "warmup": warmup,
        "profiled_excluded": len(log) - warmup - len(measured),
        "measured": len(measured),
    }
    for column in ("samples_per_s", "step_ms"):
        values = [float(r[column]) for r in measured]
        assert performance["per_step"][column] == pytest.approx(
            {q: np.percentile(values, p) for q, p in (("median", 50), ("p10", 10), ("p90", 90))},
            abs=1e-3,
        )
    check_headline(result, warmup)
    waited, took = (sum(float(r[c]) for r in measured) for c in ("data_wait_ms", "step_ms"))
    assert performance["data_wait_share"] == pytest.approx(waited / took, abs=1e-4)
    assert performance["time_to_train_s"] == provenance["stages"]["train"]["seconds"]
    assert performance["peak_device_memory_bytes"] is None  # the cpu keeps no count
    assert performance["peak_host_rss_bytes"] > 0
    assert performance["reference"] is None and "cpu" in performance["reference_note"]


def test_second_run_has_nothing_to_do(project: Project) -> None:
    assert project.planned_jobs("results/unet2d/fold0") == {}


def test_changed_lr_reruns_train_and_after_but_not_data(project: Project) -> None:
    jobs = project.planned_jobs(
        "results/unet2d/fold0", "--config", 'unet2d={"train":{"lr":0.0005}}'
    )
    assert set(jobs) == DOWNSTREAM_OF_TRAIN


def test_changed_evaluation_batch_size_reruns_evaluate_not_train(project: Project) -> None:
    """Issue 30 item 15: fold0 evaluates inside training (eval_every 1), yet a new evaluation
    batch size cannot change what training makes: no train job (docs/stages.md)."""
    jobs = project.planned_jobs(
        "results/unet2d/fold0", "--config", 'unet2d={"evaluate":{"batch_size":3}}'
    )
    assert set(jobs) == {"evaluate", "publish_run"}


def test_changed_url_of_a_source_not_used_reruns_nothing(project: Project) -> None:
    """brats comes from `synthetic`: its msd block (the download's URL) is no job's key."""
    msd = {"url": "https://mirror.example.org/Task01_BrainTumour.tar", "md5": "0" * 32}
    brats = "datasets=" + json.dumps({"brats": {"msd": msd}})
    assert project.planned_jobs("results/unet2d/fold0", "--config", brats) == {}


def test_changed_prepare_setting_reruns_from_prepare(project: Project) -> None:
    jobs = project.planned_jobs(
        "results/unet2d/fold0", "--config", 'unet2d={"prepare":{"fold_seed":7}}'
    )
    assert set(jobs) == DOWNSTREAM_OF_TRAIN | {"prepare_dataset"}


TRACE_AND_AFTER = {"summarize_trace", "publish_run"}
# the raw and prepare stages both enter the dataset's module (make_raw, prepare_variant)
DATA_AND_AFTER = {"raw_dataset", "prepare_dataset", *DOWNSTREAM_OF_TRAIN}


def _edited(project: Project, module: str) -> Path:
    package = project.root / "workflow/accelpipe"
    path = package / module
    path = path if path.is_file() else package / module / "__init__.py"
    return path if path.exists() else package / f"{module}.py"


def _planned_with(project: Project, module: str, edit) -> dict[str, int]:
    """The jobs a dry run plans with `module`'s text edited; the module is put back after."""
    path = _edited(project, module)
    original, stat = path.read_text(), path.stat()
    try:
        path.write_text(edit(original))
        return project.planned_jobs("results/unet2d/fold0")
    finally:
        path.write_text(original)
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


@pytest.mark.parametrize(
    ("module", "reruns"),
    [
        ("models/dynunet2d.py", DOWNSTREAM_OF_TRAIN),
        ("launch/torch_launch.py", DOWNSTREAM_OF_TRAIN),  # train's launcher, not a data stage's
        ("inputs/slices.py", DOWNSTREAM_OF_TRAIN),
        ("datasets/msd.py", DATA_AND_AFTER),
        ("traces", TRACE_AND_AFTER),  # the package's __init__ (or module)
        ("results/publish.py", {"publish_run"}),
        ("workloads/resnet50/workload.py", set()),  # not imported by any unet2d stage
        ("datasets/tcia.py", set()),
    ],
)
def test_edited_module_reruns_exactly_the_stages_that_import_it(
    project: Project, module: str, reruns: set[str]
) -> None:
    statement = "\n_ACCELPIPE_TEST_EDIT = 1\n"
    assert set(_planned_with(project, module, lambda text: text + statement)) == reruns
    assert project.planned_jobs("results/unet2d/fold0") == {}


def _with_docstring_edit(text: str) -> str:
    start = text.index('"""') + 3
    return text[:start] + "Reworded. " + text[start:]


@pytest.mark.parametrize("module", ["datasets/msd.py", "models/dynunet2d.py", "datasets/tcia.py"])
@pytest.mark.parametrize(
    "edit",
    [
        lambda text: text + "\n# a comment\n",
        lambda text: text.replace("\n\n\n", "\n\n\n# a comment between definitions\n", 1),
        _with_docstring_edit,
    ],
    ids=["trailing comment", "comment line", "docstring"],
)
def test_a_comment_or_docstring_reruns_nothing(project: Project, module: str, edit) -> None:
    assert edit(_edited(project, module).read_text()) != _edited(project, module).read_text()
    assert _planned_with(project, module, edit) == {}


@pytest.mark.parametrize(
    ("override", "reruns"),
    [
        # an accelerator backend: its image's preflight (accelpipe doctor) before the train
        (("backend=cuda",), {"preflight", *DOWNSTREAM_OF_TRAIN}),
        (("backend=rocm",), {"preflight", *DOWNSTREAM_OF_TRAIN}),
        (("runtime=docker",), DOWNSTREAM_OF_TRAIN),  # another image: its stages run again
        (("runtime=docker", "backend=gaudi"), {"preflight", *DOWNSTREAM_OF_TRAIN}),
        (('accelerators={"pool": ["0", "1"]}',), set()),  # which cards: not what runs
        # where a stage runs and what it makes change together: the data stages still
        # re-run for their own reason (params) and not for the runtime's
        (
            ("runtime=docker", 'datasets={"brats": {"source": "path:/nonexistent"}}'),
            {"raw_dataset", "prepare_dataset", *DOWNSTREAM_OF_TRAIN},
        ),
    ],
    ids=lambda o: " ".join(o) if isinstance(o, tuple) else None,
)
def test_where_stages_run_is_not_the_data_stages_key(
    project: Project, override: tuple[str, ...], reruns: set[str]
) -> None:
    jobs = project.planned_jobs("results/unet2d/fold0", "--config", *override)
    assert set(jobs) == reruns
    assert project.planned_jobs("results/unet2d/fold0") == {}


def test_a_job_printout_is_readable(project: Project) -> None:
    """No list of package paths in a job's printout: its code is one short key."""
    proc = project.snakemake("--dry-run", "--forceall", "results/unet2d/cv")
    out = proc.stdout + proc.stderr
    assert "workflow/accelpipe" not in out
    inputs = [line for line in out.splitlines() if line.strip().startswith("input:")]
    assert inputs and max(len(line) for line in inputs) < 200


def test_report_shows_metrics_and_trace_plot(project: Project) -> None:
    project.snakemake("results/unet2d/fold0", "--report", "results/report.html")
    html = (project.root / "results/report.html").read_text(errors="replace")
    assert "step_breakdown.png" in html
    assert "metrics.json" in html


def test_the_report_holds_every_built_run(project: Project) -> None:
    """`snakemake --report` with no target (docs/stages.md): every run already built, not
    only the default target's; building the report runs no job."""
    project.snakemake("results/unet2d/fold1")
    built = project.fingerprint("results")
    project.snakemake("--report", "results/every.html")
    html = (project.root / "results/every.html").read_text(errors="replace")
    for fold in ("fold0", "fold1"):
        assert f"results/unet2d/{fold}/metrics.json" in html, fold
    assert project.fingerprint("results") == built | {
        "every.html": project.fingerprint("results")["every.html"]
    }


def test_cross_validation_aggregates_five_folds(project: Project) -> None:
    project.snakemake("results/unet2d/cv")
    cv = json.loads((project.root / "results/unet2d/cv/cv_metrics.json").read_text())
    assert sorted(cv["folds"]) == [f"fold{k}" for k in range(5)]
    folds = [
        json.loads((project.root / f"results/unet2d/fold{k}/metrics.json").read_text())
        for k in range(5)
    ]
    assert cv["mean"]["mean_dice"] == pytest.approx(
        sum(f["mean_dice"] for f in folds) / 5, abs=1e-5
    )


SLOW = 'unet2d={"runs":{"default":{},"slow":{"lr":0.0005}}}'


def test_a_named_run_trains_its_folds_under_its_name(project: Project) -> None:
    """A named run of the cross-validated workload leaves the default run's folds alone."""
    default_fold = project.fingerprint("results/unet2d/fold0")
    project.snakemake("results/unet2d/slow/fold1", "--config", SLOW)
    assert project.fingerprint("results/unet2d/fold0") == default_fold
    result = project.root / "results/unet2d/slow/fold1"
    with (result / "train_log.csv").open() as f:
        assert {float(r["lr"]) for r in csv.DictReader(f)} == {0.0005}
    assert json.loads((result / "metrics.json").read_text())["run"] == "slow/fold1"
    # its folds: fold1 (split 1 of prepare's folds.json) is done, cv needs the other four
    assert project.planned_jobs("results/unet2d/slow/cv", "--config", SLOW) == {
        "train": 4,
        "evaluate": 4,
        "summarize_trace": 4,
        "publish_run": 4,
        "cross_validation": 1,
    }


def test_grid_ranks_fold0_of_each_grid_run(project: Project) -> None:
    project.snakemake("results/unet2d/grid")
    with (project.root / "results/unet2d/grid/grid.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert sorted(r["run"] for r in rows) == ["lr-0p003", "lr-0p01"]
    for row in rows:
        fold0 = project.root / "results/unet2d" / row["run"] / "fold0"
        metrics = json.loads((fold0 / "metrics.json").read_text())
        assert float(row["mean_dice"]) == metrics["mean_dice"]
        with (fold0 / "train_log.csv").open() as f:
            assert {float(r["lr"]) for r in csv.DictReader(f)} == {float(row["train.lr"])}


def test_changed_lr_really_retrains_and_keeps_data(project: Project) -> None:
    data_before = project.fingerprint("data")
    project.snakemake("results/unet2d/fold0", "--config", 'unet2d={"train":{"lr":0.0005}}')
    assert project.fingerprint("data") == data_before
    with (project.root / "results/unet2d/fold0/train_log.csv").open() as f:
        assert {float(r["lr"]) for r in csv.DictReader(f)} == {0.0005}


def test_killed_training_resumes_from_its_last_epoch(project: Project) -> None:
    longer = 'unet2d={"train":{"epochs":40,"steps_per_epoch":3}}'
    target = "work/unet2d/fold1/train"
    job = project.start_snakemake(target, "--config", longer)
    work = project.root / "work/unet2d/fold1"
    try:
        checkpoint = project.wait_for(
            lambda: next(work.glob(".train-partial-*/checkpoint.pt"), None), job
        )
    finally:
        project.kill(job)
    assert not (work / "train").exists()  # a killed run never looks complete
    partial = checkpoint.parent
    project.snakemake("--unlock")
    project.snakemake(target, "--config", longer)

    stage = json.loads((work / "train/stage.json").read_text())
    assert stage["resumed_from_step"] is not None and stage["resumed_from_step"] >= 3
    assert stage["resumed_from_step"] % 3 == 0  # an epoch boundary
    with (work / "train/train_log.csv").open() as f:
        steps = [int(r["step"]) for r in csv.DictReader(f)]
    assert steps == list(range(1, 121))  # no step lost or logged twice across the kill
    assert not partial.exists() and not (work / "train/checkpoint.pt").exists()
    # both attempts timed (issue 30 item 11), the killed one's log kept beside the new one
    assert [a["status"] for a in stage["attempts"]] == ["interrupted", "finished"]
    logs = project.root / "logs/unet2d/fold1"
    assert (logs / "train.attempt1.log").stat().st_size > 0
    resumed = stage["resumed_from_step"]
    assert f"resuming from step {resumed}, attempt 2" in (logs / "train.log").read_text()


def test_runs_from_a_shell_that_never_activated_the_venv(project: Project) -> None:
    """`.venv/bin/snakemake ...` with a PATH that lacks the venv: the rules still find the
    venv's `accelpipe` (that of the Python running Snakemake)."""
    bare_path = "/usr/bin:/bin"
    assert shutil.which("accelpipe", path=bare_path) is None  # nothing else to fall back on
    snakemake = Path(sys.executable).parent / "snakemake"
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env |= {"PATH": bare_path, "PYTHONPATH": str(project.root / "workflow")}
    before = (project.root / "results/unet2d/fold0/provenance.json").stat().st_mtime_ns
    proc = subprocess.run(
        [str(snakemake), "--cores", "1", "results/unet2d/fold0", "--forcerun", "publish_run"],
        cwd=project.root,
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "command not found" not in proc.stderr
    after = (project.root / "results/unet2d/fold0/provenance.json").stat().st_mtime_ns
    assert after > before  # publish really ran
