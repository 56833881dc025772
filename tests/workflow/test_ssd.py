"""End-to-end: SSD-ResNet34 on synthetic COCO through the real snakemake workflow
(TensorFlow 2.21 here; tests/workflow/test_ssd_cli.py drives the same stages under TF 2.15)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import yaml

from tests.helpers.evaluation_checks import check_evaluations
from tests.workflow.project import (
    REPO,
    TINY_CONFIG,
    TINY_RUNS,
    Project,
    built_project,
    make_project,
)

pytestmark = pytest.mark.e2e

RUNS = TINY_RUNS["ssd"]  # bf16, fp32


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Project:
    return built_project(tmp_path_factory, RUNS)


@pytest.mark.parametrize(("target", "precision"), [(RUNS[0], "bf16"), (RUNS[1], "fp32")])
def test_named_runs_score_coco_metrics_and_record_their_model(
    project: Project, target: str, precision: str
) -> None:
    """What every run publishes: tests/workflow/test_result_folders.py."""
    result = project.root / target
    assert {"per_category_ap.csv", "detections.json"} <= {p.name for p in result.iterdir()}
    metrics = json.loads((result / "metrics.json").read_text())
    assert set(metrics) >= {"AP", "AP50", "AP75", "APs", "APm", "APl"}
    assert all(0 <= metrics[k] <= 1 for k in ("AP", "AP50", "AP75"))
    assert metrics["images"] == 8
    # evaluated inside training after the last epoch: MLPerf's AP 0.23 is out of reach here
    check_evaluations(result, [2], reached=False)
    stage = json.loads(
        (project.root / target.replace("results", "work") / "train/stage.json").read_text()
    )
    assert (stage["precision"], stage["global_batch"]) == (precision, 4)
    assert stage["architecture"] == {"classes": 5, "width": 8}


def test_detections_are_coco_results_for_the_validation_images(project: Project) -> None:
    result = project.root / RUNS[1]
    detections = json.loads((result / "detections.json").read_text())
    truth = json.loads(
        (project.root / "data/prepared/coco/tfrecord/instances_val2017.json").read_text()
    )
    images = {i["id"]: i for i in truth["images"]}
    categories = {c["id"] for c in truth["categories"]}
    metrics = json.loads((result / "metrics.json").read_text())
    assert len(detections) == metrics["detections"]
    for d in detections:
        assert d["image_id"] in images and d["category_id"] in categories
        assert 0.05 < d["score"] <= 1 and len(d["bbox"]) == 4
    per_image = {}
    for d in detections:
        per_image[d["image_id"]] = per_image.get(d["image_id"], 0) + 1
    assert max(per_image.values()) <= 200
    with (result / "per_category_ap.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert sorted(int(r["category_id"]) for r in rows) == sorted(categories)


def test_trace_summary_has_the_tensorflow_sections(project: Project) -> None:
    summary = json.loads((project.root / RUNS[1] / "trace_summary.json").read_text())
    sections = set(summary["sections"])
    assert {"step", "forward", "loss", "backward", "optimizer_step"} <= sections
    assert {"loader_first", "loader_next"} & sections
    assert summary["steps"]["count"] == 2  # profile.schedule active: 2
    assert summary["memory"] is None  # TF traces carry no [memory] events
    tables = project.root / RUNS[1] / "profiler_tables"
    assert [p.name for p in tables.iterdir()] == ["trace_step000004.framework_op_stats.csv"]
    with (tables / "trace_step000004.framework_op_stats.csv").open(newline="") as f:
        ops = [row["Operation Name"] for row in csv.DictReader(f)]
    assert any(op.startswith("forward/") for op in ops)


def test_rerun_is_a_no_op_and_a_run_override_retrains_only_that_run(project: Project) -> None:
    assert project.planned_jobs(*RUNS) == {}
    runs = TINY_CONFIG["ssd"]["runs"] | {"bf16": {"precision": "bf16", "lr": 0.02}}
    changed = "ssd=" + json.dumps({"runs": runs})
    jobs = project.planned_jobs(*RUNS, "--config", changed)
    assert jobs == {"train": 1, "evaluate": 1, "summarize_trace": 1, "publish_run": 1}


def test_two_worker_run_shards_the_global_batch(project: Project) -> None:
    """devices: 2 trains with MultiWorkerMirroredStrategy: two processes, each half of the
    global batch of 4 from its own share of the records."""
    project.snakemake("work/ssd/ddp/train")
    stage = json.loads((project.root / "work/ssd/ddp/train/stage.json").read_text())
    assert (stage["world_size"], stage["global_batch"], stage["steps"]) == (2, 4, 6)
    with (project.root / "work/ssd/ddp/train/train_log.csv").open() as f:
        losses = [float(r["loss"]) for r in csv.DictReader(f)]
    assert len(losses) == 6 and all(0 < v < 100 for v in losses)


def test_pretrained_backbone_is_loaded_and_its_frozen_layers_kept(
    project: Project, tmp_path: Path
) -> None:
    """model.pretrained path:<checkpoint> (an air-gapped copy; no server): the weights stage
    converts it into data/weights/, the train job depends on it and starts from it, and the
    frozen stem leaves training as loaded. MLPerf's own checkpoint fits width 64 only: at the
    tiny width the plan stops naming the key."""
    from accelpipe.core.keras2 import keras
    from accelpipe.models import ssd_resnet34

    keras.utils.set_random_seed(7)
    source = ssd_resnet34.build_ssd300(num_classes=6, width=8)
    prefix = ssd_resnet34.save_backbone(source, tmp_path / "backbone")
    override = {"model": {"width": 8, "pretrained": f"path:{prefix}"}}
    config = ("--config", "ssd=" + json.dumps(override))
    jobs = project.planned_jobs("work/ssd/fp32/train", *config)
    assert jobs == {"weights": 1, "train": 1}
    project.snakemake("work/ssd/fp32/train", *config)
    work = project.root / "work/ssd/fp32/train"
    pretrained = json.loads((work / "stage.json").read_text())["pretrained"]
    assert pretrained["source"] == f"path:{prefix}"
    assert "data/weights/resnet34-path-" in pretrained["file"]
    mlperf = {"model": {"pretrained": "mlperf"}}
    refused = project.snakemake(
        "work/ssd/fp32/train", "--config", "ssd=" + json.dumps(mlperf), check=False
    )
    assert refused.returncode != 0
    message = "'ssd.model.pretrained': mlperf weights fit ssd.model.width 64, not 8"
    assert message in refused.stdout + refused.stderr
    trained = ssd_resnet34.build_ssd300(num_classes=6, width=8)
    trained.load_weights(str(work / "model.weights.h5"))
    for name in ssd_resnet34.FROZEN_LAYERS:
        got, want = trained.get_layer(name).get_weights(), source.get_layer(name).get_weights()
        kept = 2 if "bn" in name else len(want)  # BN: gamma, beta (moving stats do update)
        for k in range(kept):
            assert (got[k] == want[k]).all(), name
    # a trained (not frozen) layer moved away from the checkpoint
    moved = trained.get_layer("g2b1_conv1").get_weights()[0]
    assert not (moved == source.get_layer("g2b1_conv1").get_weights()[0]).all()


@pytest.mark.slow
def test_shipped_config_learns_the_objects(tmp_path: Path) -> None:
    """The embedded default config: COCO AP50 far above an untrained model of the same
    architecture on the same validation images."""
    shipped = yaml.safe_load((REPO / "config.yaml").read_text())
    (tmp_path / "project").mkdir()
    project = make_project(tmp_path / "project", shipped)
    project.snakemake("results/ssd/fp32")
    trained = json.loads((project.root / "results/ssd/fp32/metrics.json").read_text())
    untrained = _untrained_metrics(project, tmp_path / "untrained")
    assert trained["AP50"] > max(0.2, 3 * untrained["AP50"]), (trained, untrained)


def _untrained_metrics(project: Project, out: Path) -> dict:
    """The evaluate stage's metrics for freshly initialised weights of the trained model's
    architecture."""
    from accelpipe.config.schema import validate
    from accelpipe.core.keras2 import keras
    from accelpipe.models import ssd_resnet34
    from accelpipe.plan import stage_config
    from accelpipe.workloads.ssd import workload as ssd

    work = project.root / "work/ssd/fp32/train"
    architecture = json.loads((work / "stage.json").read_text())["architecture"]
    model_dir = out / "model"
    model_dir.mkdir(parents=True)
    keras.utils.set_random_seed(1)
    model = ssd_resnet34.build_ssd300(architecture["classes"] + 1, architecture["width"])
    model.save_weights(str(model_dir / "model.weights.h5"))
    (model_dir / "stage.json").write_text(json.dumps({"architecture": architecture}))
    config = validate(yaml.safe_load((project.root / "config.yaml").read_text()))
    cfg = stage_config.evaluate(config, "ssd", "fp32")
    prepared = project.root / "data/prepared/coco/tfrecord"
    return ssd.evaluate(prepared, "untrained", cfg, model_dir, out)


def test_benchmark_rows_run_each_precision_in_the_tensorflow_engine(project: Project) -> None:
    project.snakemake("results/ssd/benchmark")
    table = json.loads((project.root / "results/ssd/benchmark/benchmark.json").read_text())
    assert [(r["row"], r["precision"]) for r in table["rows"]] == [
        ("bf16-b4", "bf16"),
        ("fp32-b4", "fp32"),
    ]
    for row in table["rows"]:
        stage = json.loads(
            (project.root / "work/ssd/benchmark" / row["row"] / "stage.json").read_text()
        )
        assert (stage["steps"], stage["precision"]) == (4, row["precision"])
        assert row["steps_measured"] == 3 and row["samples_per_s"] > 0
