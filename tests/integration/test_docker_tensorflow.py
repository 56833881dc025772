"""runtime: docker for a TensorFlow workload: the tiny SSD run builds and runs in the
cpu-tensorflow image (data stages too: the COCO dataset's framework is tensorflow), with
no torch in it. (The local runtime's run of the same config is tests/workflow/test_ssd.py.)"""

from __future__ import annotations

import copy
import json

import pytest

from tests.integration.conftest import BASE_IMAGE, REPO, copy_wheelhouse
from tests.workflow.project import TINY_CONFIG, Project, make_project

pytestmark = pytest.mark.integration
TARGET = "results/ssd/fp32"


@pytest.fixture(scope="module")
def tf_docker_project(engine, tmp_path_factory: pytest.TempPathFactory) -> Project:
    if not any((REPO / "docker/wheelhouse").glob("tensorflow_cpu-*.whl")):
        pytest.fail("docker/wheelhouse has no tensorflow-cpu wheel (make wheelhouse)")
    config = copy.deepcopy(TINY_CONFIG)
    config["runtime"] = "docker"
    config["containers"] = {"base_image": BASE_IMAGE, "offline": True}
    config["ssd"]["runs"] = {"fp32": {"precision": "fp32"}}
    project = make_project(tmp_path_factory.mktemp("docker-tf"), config)
    copy_wheelhouse(project.root)
    project.snakemake(TARGET)
    return project


def test_every_ssd_stage_ran_in_the_tensorflow_image(tf_docker_project: Project) -> None:
    provenance = json.loads((tf_docker_project.root / TARGET / "provenance.json").read_text())
    images = {stage["image"] for stage in provenance["stages"].values()}
    assert len(images) == 1, images
    assert images.pop().startswith("localhost/accelpipe/cpu-tensorflow:")
    assert provenance["packages"]["tensorflow-cpu"]
    assert "torch" not in provenance["packages"]


def test_container_run_publishes_a_complete_result(tf_docker_project: Project) -> None:
    result = tf_docker_project.root / TARGET
    metrics = json.loads((result / "metrics.json").read_text())
    assert metrics["images"] == 8 and 0 <= metrics["AP50"] <= 1
    summary = json.loads((result / "trace_summary.json").read_text())
    assert {"forward", "backward", "optimizer_step"} <= set(summary["sections"])
    stage = json.loads((tf_docker_project.root / "work/ssd/fp32/train/stage.json").read_text())
    assert stage["steps"] == 6 and stage["image"].startswith("localhost/accelpipe/cpu-tensorflow:")
