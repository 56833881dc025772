"""End-to-end: the ViT Segmenter on synthetic ADE20K through the real snakemake workflow,
its named runs and its hyperparameter grid (TensorFlow 2.21 here). Its two-worker run trains
under Slurm in tests/integration/test_slurm.py; the local two-worker launch is test_ssd.py's."""

from __future__ import annotations

import csv
import hashlib
import json
import zipfile
from pathlib import Path

import pytest
import yaml

from accelpipe.datasets import ade20k
from accelpipe.datasets.ade20k_synthetic import synthesize
from tests.helpers.evaluation_checks import check_evaluations
from tests.helpers.http_server import FileServer
from tests.workflow.project import (
    REPO,
    TINY_RUNS,
    Project,
    built_project,
    make_project,
)

pytestmark = pytest.mark.e2e

*RUNS, GRID = TINY_RUNS["segmenter"]  # bf16, fp32, the grid
GRID_RUNS = ("decoder-linear_lr-0p01", "decoder-mask_lr-0p01")


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Project:
    return built_project(tmp_path_factory, TINY_RUNS["segmenter"])


@pytest.mark.parametrize("target", RUNS)
def test_named_runs_score_and_draw_their_predictions(project: Project, target: str) -> None:
    """What every run publishes: tests/workflow/test_result_folders.py."""
    result = project.root / target
    names = {p.name for p in result.iterdir()}
    assert "per_class_iou.csv" in names
    assert len([n for n in names if n.startswith("prediction_")]) == 2  # prediction_images
    metrics = json.loads((result / "metrics.json").read_text())
    assert metrics["images"] == 4
    check_evaluations(result, [1, 2], reached=None)
    for key in ("mIoU", "mean_accuracy", "pixel_accuracy"):
        assert 0 <= metrics[key] <= 1
    stage = json.loads(
        (project.root / target.replace("results", "work") / "train/stage.json").read_text()
    )
    assert stage["global_batch"] == 4 and stage["architecture"]["encoder"] == "tiny"
    assert stage["architecture"]["classes"] == 150 and stage["architecture"]["image_size"] == 32


def test_per_class_table_agrees_with_the_metrics(project: Project) -> None:
    """mIoU is the mean IoU over classes with a union (mmseg's nanmean), from the CSV."""
    result = project.root / RUNS[1]
    with (result / "per_class_iou.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [int(r["class"]) for r in rows] == list(range(150))
    assert rows[0]["name"] == "wall" and rows[149]["name"] == "flag"
    scored = [float(r["IoU"]) for r in rows if r["IoU"] != ""]
    metrics = json.loads((result / "metrics.json").read_text())
    assert metrics["classes_scored"] == len(scored)
    assert metrics["mIoU"] == pytest.approx(sum(scored) / len(scored), abs=1e-5)
    labelled = sum(int(r["label_pixels"]) for r in rows)
    predicted = sum(int(r["predicted_pixels"]) for r in rows)
    assert labelled == predicted > 0  # every labelled pixel got one prediction


def test_trace_summary_has_the_tensorflow_sections(project: Project) -> None:
    summary = json.loads((project.root / RUNS[1] / "trace_summary.json").read_text())
    assert {"step", "forward", "loss", "backward", "optimizer_step"} <= set(summary["sections"])
    assert summary["steps"]["count"] == 2


def test_grid_ranks_every_grid_run_with_its_own_numbers(project: Project) -> None:
    with (project.root / GRID / "grid.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert sorted(r["run"] for r in rows) == sorted(GRID_RUNS)
    values = [float(r["mIoU"]) for r in rows]
    assert values == sorted(values, reverse=True)
    # equal mIoU: one rank, marked tied
    expected = [(1, "1"), (1, "1")] if values[0] == values[1] else [(1, "0"), (2, "0")]
    assert [(int(r["rank"]), r["tied"]) for r in rows] == expected
    for row in rows:
        run = project.root / "results/segmenter" / row["run"]
        assert float(row["mIoU"]) == json.loads((run / "metrics.json").read_text())["mIoU"]
        assert row["run"] == f"decoder-{row['model.decoder']}_lr-0p01"
        stage = json.loads(
            (project.root / f"work/segmenter/{row['run']}/train/stage.json").read_text()
        )
        assert stage["architecture"]["decoder"] == row["model.decoder"]
        # the same throughput and time as the run's own performance.json
        performance = json.loads((run / "performance.json").read_text())
        assert float(row["samples_per_s"]) == performance["throughput"]["samples_per_s"] > 0
        assert float(row["train_seconds"]) == performance["time_to_train_s"] > 0
    assert (project.root / GRID / "grid.png").stat().st_size > 0


def test_grid_changes_re_run_only_what_they_change(project: Project) -> None:
    assert project.planned_jobs(*RUNS, GRID) == {}
    reordered = {"grid": {"model.decoder": ["linear", "mask"]}}
    assert project.planned_jobs(GRID, "--config", "segmenter=" + json.dumps(reordered)) == {}
    fewer = {"grid": {"model.decoder": ["linear"]}}
    assert project.planned_jobs(GRID, "--config", "segmenter=" + json.dumps(fewer)) == {"grid": 1}


def test_pretrained_encoder_is_downloaded_converted_and_loaded(
    project: Project, tmp_path: Path
) -> None:
    """model.pretrained augreg: the weights stage downloads the encoder's npz (in the original
    ViT layout, served on 127.0.0.1 with its sha256), converts it once into
    data/weights/vit-tiny-augreg, and the run's train job starts from it; without pretrained
    weights the train job does not depend on that stage. A wrong sha256 fails naming it and
    leaves the published run as it was."""
    from accelpipe.core.keras2 import keras
    from accelpipe.models import segmenter, vit_npz

    keras.utils.set_random_seed(3)
    source = segmenter.build_segmenter(150, 32, encoder="tiny", decoder="mask")
    (tmp_path / "www").mkdir()
    npz = vit_npz.save_npz(source, tmp_path / "www" / "Ti_8-augreg.npz")
    digest = hashlib.sha256(npz.read_bytes()).hexdigest()
    target = "work/segmenter/fp32/train"
    assert project.planned_jobs(target, "--forcerun", "train") == {"train": 1}  # random init
    with FileServer(tmp_path / "www") as server:
        weights = {"url": server.url(npz.name), "sha256": digest}

        def config(weights_file: dict) -> list[str]:
            model = {"encoder": "tiny", "image_size": 32, "pretrained": "augreg"}
            files = {"vit": {"augreg": {"tiny": weights_file}}}
            return ["segmenter=" + json.dumps({"model": model}), "weights=" + json.dumps(files)]

        assert project.planned_jobs(target, "--config", *config(weights)) == {
            "weights": 1,
            "train": 1,
        }
        project.snakemake(target, "--config", *config(weights))
        stage = json.loads((project.root / target / "stage.json").read_text())
        converted = project.root / "data/weights/vit-tiny-augreg"
        made = json.loads((converted / "stage.json").read_text())
        assert made["files"][0]["sha256"] == digest and made["converted"]["grid"] == [4, 4]
        assert stage["pretrained"]["source"] == "augreg"
        assert stage["pretrained"]["sha256"] == made["converted"]["sha256"]

        published = project.root / RUNS[1] / "metrics.json"
        before = published.read_bytes()
        wrong = config(weights | {"sha256": "0" * 64})
        failed = project.snakemake(RUNS[1], "--config", *wrong, check=False)
    assert failed.returncode != 0
    assert f"has sha256 {digest}, expected {'0' * 64}" in failed.stdout + failed.stderr
    assert published.read_bytes() == before  # the published run is left as it was


# ----------------------------------------------------------------------------- bad input


def _fails_naming(project: Project, needle: str, *config: str) -> str:
    """RUNS[1] with --config overrides fails naming `needle`; the published results stay."""
    before = project.fingerprint("results")
    proc = project.snakemake(RUNS[1], GRID, "--config", *config, check=False)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output
    assert needle in output, output
    assert "Traceback" not in output, output
    assert project.fingerprint("results") == before
    return output


def _ade20k(**block: object) -> str:
    return "datasets=" + json.dumps({"ade20k": block})


@pytest.fixture
def raw_copy(tmp_path: Path) -> Path:
    """A user's own ADEChallengeData2016 folder (for `path:` sources)."""
    return synthesize(tmp_path / "ADEChallengeData2016", 4, 2, size=(40, 32), seed=5)


def test_wrong_sha1_of_the_download_is_named(
    project: Project, raw_copy: Path, tmp_path: Path
) -> None:
    served = tmp_path / "served"
    served.mkdir()
    with zipfile.ZipFile(served / "ADEChallengeData2016.zip", "w") as zf:
        for path in sorted(raw_copy.rglob("*")):
            zf.write(path, f"{ade20k.ROOT}/{path.relative_to(raw_copy).as_posix()}")
    wrong = "0" * 40
    with FileServer(served) as server:
        block = {"url": server.url("ADEChallengeData2016.zip"), "sha1": wrong}
        out = _fails_naming(
            project, "ADEChallengeData2016.zip", _ade20k(source="ade20k", download=block)
        )
    assert f"expected {wrong}" in out


def test_missing_annotation_is_named(project: Project, raw_copy: Path) -> None:
    (raw_copy / "annotations/training/ADE_train_00000002.png").unlink()
    _fails_naming(project, "ADE_train_00000002", _ade20k(source=f"path:{raw_copy}"))


def test_annotation_of_another_size_is_named(project: Project, raw_copy: Path) -> None:
    from PIL import Image

    label = raw_copy / "annotations/validation/ADE_val_00000001.png"
    Image.open(label).resize((7, 5), Image.NEAREST).save(label)
    out = _fails_naming(project, "ADE_val_00000001.png", _ade20k(source=f"path:{raw_copy}"))
    assert "ADE_val_00000001.jpg" in out  # both files named


@pytest.mark.parametrize("verify_labels", [False, True], ids=["train-finds-it", "prepare-finds-it"])
def test_label_value_above_150_is_named(
    project: Project, raw_copy: Path, verify_labels: bool
) -> None:
    """By default training meets the value as it decodes the label (prepare only walks the
    PNG's chunks); with verify_labels prepare decodes every label and names the raw files."""
    import numpy as np
    from PIL import Image

    label = raw_copy / "annotations/training/ADE_train_00000003.png"
    values = np.array(Image.open(label))
    values[0, 0] = 151
    Image.fromarray(values).save(label)
    segmenter = "segmenter=" + json.dumps({"prepare": {"verify_labels": verify_labels}})
    # prepare names the files of the raw folder (a link to the user's copy); training has the
    # records, which hold the file names
    png, jpg = "ADE_train_00000003.png", "ADE_train_00000003.jpg"
    if verify_labels:
        png, jpg = (
            f"data/raw/ade20k/annotations/training/{png}",
            f"data/raw/ade20k/images/training/{jpg}",
        )
    needle = f"{png} (annotation of {jpg}): value 151 is above the 150 classes"
    _fails_naming(project, needle, _ade20k(source=f"path:{raw_copy}"), segmenter)


@pytest.mark.parametrize(
    ("grid", "needle"),
    [
        ({"model.decoderr": ["mask"]}, "'segmenter.grid.model.decoderr'"),
        ({"train.lr": []}, "'segmenter.grid.train.lr': [] should be non-empty"),
    ],
)
def test_bad_grid_is_named_before_any_job(project: Project, grid: dict, needle: str) -> None:
    out = _fails_naming(project, needle, "segmenter=" + json.dumps({"grid": grid}))
    assert "Select jobs to execute" not in out  # refused while planning


@pytest.mark.slow
def test_shipped_config_learns_the_classes(tmp_path: Path) -> None:
    """The embedded default config: mIoU on the synthetic validation images far above an
    untrained model of the same architecture."""
    shipped = yaml.safe_load((REPO / "config.yaml").read_text())
    (tmp_path / "project").mkdir()
    project = make_project(tmp_path / "project", shipped)
    project.snakemake("results/segmenter/fp32")
    trained = json.loads((project.root / "results/segmenter/fp32/metrics.json").read_text())
    untrained = _untrained_metrics(project, tmp_path / "untrained")
    assert trained["mIoU"] > max(0.3, 3 * untrained["mIoU"]), (trained, untrained)


def _untrained_metrics(project: Project, out: Path) -> dict:
    from accelpipe.config.schema import validate
    from accelpipe.core.keras2 import keras
    from accelpipe.plan import stage_config
    from accelpipe.workloads.segmenter import workload as segmenter

    work = project.root / "work/segmenter/fp32/train"
    stage = json.loads((work / "stage.json").read_text())
    model_dir = out / "model"
    model_dir.mkdir(parents=True)
    keras.utils.set_random_seed(1)
    segmenter._build(stage["architecture"]).save_weights(str(model_dir / "model.weights.h5"))
    (model_dir / "stage.json").write_text(json.dumps({"architecture": stage["architecture"]}))
    config = validate(yaml.safe_load((project.root / "config.yaml").read_text()))
    cfg = stage_config.evaluate(config, "segmenter", "fp32")
    prepared = project.root / "data/prepared/ade20k/tfrecord"
    return segmenter.evaluate(prepared, "untrained", cfg, model_dir, out)
