"""End-to-end: ResNet-50 on synthetic ImageNet through the real snakemake workflow."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import yaml

from accelpipe.core import mllog
from tests.helpers.evaluation_checks import check_mlperf_log
from tests.workflow.project import (
    REPO,
    TINY_CONFIG,
    TINY_RUNS,
    Project,
    built_project,
    make_project,
)

pytestmark = pytest.mark.e2e

RUNS = TINY_RUNS["resnet50"]  # bf16, fp32


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Project:
    return built_project(tmp_path_factory, RUNS)


@pytest.mark.parametrize("target", RUNS)
def test_named_runs_score_every_validation_image(project: Project, target: str) -> None:
    """What every run publishes: tests/workflow/test_result_folders.py."""
    result = project.root / target
    metrics = json.loads((result / "metrics.json").read_text())
    assert 0 <= metrics["top1"] <= metrics["top5"] <= 1
    assert metrics["n_images"] == 8 and metrics["classes"] == 4
    with (result / "per_class_accuracy.csv").open() as f:
        assert sum(int(r["images"]) for r in csv.DictReader(f)) == 8


def test_the_diff_target_puts_the_two_runs_side_by_side(project: Project) -> None:
    """results/<workload>/diff/<A>_vs_<B>: the diff of published runs, which stay as they
    are; its report has a verdict on every row, the trace's rows included."""
    target = "results/resnet50/diff/fp32_vs_bf16"
    before = [project.fingerprint(run) for run in RUNS]
    project.snakemake(target)
    assert [project.fingerprint(run) for run in RUNS] == before
    diff = json.loads((project.root / target / "diff.json").read_text())
    assert [r["name"] for r in diff["rows"][:2]] == ["throughput", "step time"]
    groups = {r["group"] for r in diff["rows"]}
    assert {"headline", "trace", "step breakdown", "section"} <= groups
    verdicts = {"faster", "slower", "within noise", "not compared", "only in A", "only in B"}
    assert {r["verdict"] for r in diff["rows"]} <= verdicts
    assert set(diff["gate"]) >= {"passed", "regressed", "threshold"}
    assert "(A) vs bf16 (B)" in (project.root / target / "diff.md").read_text()


def test_prepared_index_lists_every_image(project: Project) -> None:
    index = project.root / "data/prepared/imagenet/index"
    config = json.loads((index / "config.json").read_text())
    root = Path(config["root"])
    if not root.is_absolute():
        root = project.root / root
    for split, n in (("train", 24), ("val", 8)):
        with (index / f"{split}.csv").open() as f:
            rows = list(csv.DictReader(f))
        assert len(rows) == n
        assert all((root / r["path"]).stat().st_size == int(r["bytes"]) for r in rows)


def test_a_run_override_retrains_only_that_run(project: Project) -> None:
    assert project.planned_jobs(*RUNS) == {}
    runs = TINY_CONFIG["resnet50"]["runs"] | {"bf16": {"precision": "bf16", "lr": 0.5}}
    changed = "resnet50=" + json.dumps({"runs": runs})
    jobs = project.planned_jobs(*RUNS, "--config", changed)
    assert jobs == {"train": 1, "evaluate": 1, "summarize_trace": 1, "publish_run": 1}


def test_graph_mode_trains_like_eager(project: Project) -> None:
    """`compile: true` runs the stage through torch.compile (inductor on CPU)."""
    project.snakemake("work/resnet50/graph/train")
    work = project.root / "work/resnet50"
    assert json.loads((work / "graph/train/stage.json").read_text())["compiled"] is True
    eager, graph = (_losses(work / run / "train/train_log.csv") for run in ("fp32", "graph"))
    assert len(graph) == len(eager) == 6
    # Same seed, same batches, same fp32 maths up to the compiler's fusion and reordering.
    assert graph[0] == pytest.approx(eager[0], rel=1e-3)


def test_two_process_run_shards_the_global_batch(project: Project) -> None:
    """devices: 2 trains data-parallel (torchrun, gloo on CPU): each rank a DistributedSampler
    share of the same global batch of 8."""
    project.snakemake("work/resnet50/ddp/train")
    stage = json.loads((project.root / "work/resnet50/ddp/train/stage.json").read_text())
    assert (stage["world_size"], stage["global_batch"], stage["steps"]) == (2, 8, 6)
    losses = _losses(project.root / "work/resnet50/ddp/train/train_log.csv")
    assert len(losses) == 6 and all(0 < v < 10 for v in losses)


def test_a_run_stops_at_its_target_with_its_time_to_target(project: Project) -> None:
    """to_target: evaluated after every epoch, it stops at the first that reaches 0.25."""
    project.snakemake("results/resnet50/to_target")
    result = project.root / "results/resnet50/to_target"
    with (result / "eval_log.csv").open() as f:
        (evaluation,) = list(csv.DictReader(f))  # epoch 1 of 2 reached it: no second one
    assert (evaluation["epoch"], evaluation["step"], evaluation["reached"]) == ("1", "3", "1")
    stage = json.loads((project.root / "work/resnet50/to_target/train/stage.json").read_text())
    assert (stage["steps"], stage["evaluations"], stage["stopped_at_target"]) == (3, 1, True)
    performance = json.loads((result / "performance.json").read_text())
    assert performance["time_to_target_s"] == float(evaluation["run_s"])
    assert performance["time_to_target_s"] < stage["seconds"]  # initialisation is not in it
    assert performance["time_to_target"]["epoch"] == 1
    # the evaluate stage scores the stopped model as training did: one scoring function
    metrics = json.loads((result / "metrics.json").read_text())
    assert metrics["top1"] == float(evaluation["value"]) >= 0.25
    assert metrics["quality_target"]["reached"] is True
    # MLPerf's log of the run: MLCommons' checker passes it, a success timed as performance.json
    check_mlperf_log(result / mllog.FILENAME, performance["time_to_target_s"])
    last = (result / mllog.FILENAME).read_text().splitlines()[-1]
    assert mllog.parse(last).key == "run_stop" and mllog.parse(last).metadata["status"] == "success"


def test_seed_runs_combine_their_times_to_target(project: Project) -> None:
    """results/resnet50/ttt: to_target with seeds 1, 2 and 3, each its own run."""
    project.snakemake("results/resnet50/ttt")
    summary = json.loads((project.root / "results/resnet50/ttt/ttt.json").read_text())
    assert [(s["run"], s["seed"]) for s in summary["seeds"]] == [
        (f"to_target-seed{k}", k) for k in (1, 2, 3)
    ]
    times = []
    for k in (1, 2, 3):
        run = project.root / f"results/resnet50/to_target-seed{k}"
        performance = json.loads((run / "performance.json").read_text())
        times.append(performance["time_to_target_s"])
        check_mlperf_log(run / mllog.FILENAME, performance["time_to_target_s"])
        stage = json.loads(
            (project.root / f"work/resnet50/to_target-seed{k}/train/stage.json").read_text()
        )
        provenance = json.loads((run / "provenance.json").read_text())
        assert provenance["config"]["resnet50"]["train"]["seed"] == k
        assert stage["stopped_at_target"] is (performance["time_to_target_s"] is not None)
    assert [s["time_to_target_s"] for s in summary["seeds"]] == times
    reached = sorted(t for t in times if t is not None)
    assert summary["reached"] == len(reached)
    if len(reached) >= 2:  # 3 seeds: the middle one (one that never reached it is the slowest)
        assert summary["olympic_mean_s"] == round(reached[1], 3)
    else:
        assert summary["olympic_mean_s"] is None and "never reached" in summary["not_scored"]


def _losses(log: Path) -> list[float]:
    with log.open() as f:
        return [float(r["loss"]) for r in csv.DictReader(f)]


@pytest.mark.slow
def test_shipped_config_learns_the_classes(tmp_path: Path) -> None:
    """The embedded default config: top-1 far above chance on the synthetic classes."""
    shipped = yaml.safe_load((REPO / "config.yaml").read_text())
    project = make_project(tmp_path, shipped)
    project.snakemake("results/resnet50/fp32")
    metrics = json.loads((project.root / "results/resnet50/fp32/metrics.json").read_text())
    assert metrics["top1"] > 5 * metrics["chance_top1"], metrics


BENCHMARK = "results/resnet50/benchmark"


def test_benchmark_rows_are_train_only_jobs_whose_table_matches_their_logs(
    project: Project,
) -> None:
    planned = project.planned_jobs(BENCHMARK)
    # one job per row, and no run's train or evaluate (data jobs if a test before made them stale)
    assert (planned["benchmark_row"], planned["benchmark"]) == (2, 1)
    assert not {"train", "evaluate", "publish_run"} & planned.keys()
    project.snakemake(BENCHMARK)
    table = json.loads((project.root / BENCHMARK / "benchmark.json").read_text())
    assert [r["row"] for r in table["rows"]] == ["fp32-b4", "fp32-b8"]
    for row in table["rows"]:
        train = project.root / "work/resnet50/benchmark" / row["row"]
        stage = json.loads((train / "stage.json").read_text())
        assert (stage["steps"], stage["global_batch"]) == (6, row["global_batch"])
        assert stage["precision"] == row["precision"] == "fp32"
        with (train / "train_log.csv").open() as f:
            logged = list(csv.DictReader(f))
        measured = logged[2:]  # warmup_steps: 2 of the tiny config; no profiled steps
        assert row["steps_measured"] == len(measured) == 4
        rates = sorted(float(r["samples_per_s"]) for r in measured)
        assert row["per_step_samples_per_s_median"] == pytest.approx(
            (rates[1] + rates[2]) / 2, rel=1e-3
        )
        samples, wall = (sum(float(r[c]) for r in measured) for c in ("samples", "wall_ms"))
        assert row["samples_per_s"] == pytest.approx(samples / wall * 1e3, rel=1e-3)
        assert row["peak_host_rss_bytes"] > 0 and row["peak_device_memory_bytes"] is None
    with (project.root / BENCHMARK / "benchmark.csv").open() as f:
        assert [r["row"] for r in csv.DictReader(f)] == ["fp32-b4", "fp32-b8"]
    assert (project.root / BENCHMARK / "benchmark.png").stat().st_size > 0


def test_a_benchmark_setting_reruns_the_benchmark_only(project: Project) -> None:
    project.snakemake(*RUNS, BENCHMARK)  # a no-op unless a test before changed the data
    override = "resnet50=" + json.dumps({"benchmark": {"steps": 5}})
    assert project.planned_jobs(*RUNS, BENCHMARK, "--config", override) == {
        "benchmark_row": 2,
        "benchmark": 1,
    }


def test_import_without_the_train_tar_names_the_key(project: Project) -> None:
    before = project.fingerprint("results")
    source = 'datasets={"imagenet":{"source":"import"}}'
    proc = project.snakemake(*RUNS, "--config", source, check=False)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "datasets.imagenet.import.train_tar" in output, output
    assert "Traceback" not in output, output
    assert project.fingerprint("results") == before
