"""End-to-end, every workload: each tiny run's result folder holds what every run publishes.

The builds are the ones each workload's own end-to-end file checks further (TINY_RUNS, made
once per test run); what only one workload writes is checked there.
"""

from __future__ import annotations

import json

import pytest

from accelpipe import engines
from accelpipe.config import registry
from tests.helpers.performance_checks import check_headline
from tests.workflow.project import TINY_CONFIG, TINY_RUNS, Project, built_project

pytestmark = pytest.mark.e2e

EVERY_RUN_PUBLISHES = {
    "metrics.json",
    "train_log.csv",
    "trace_summary.json",
    "step_breakdown.png",
    "performance.json",
    "provenance.json",
}


def test_every_workload_has_a_tiny_run() -> None:
    assert set(TINY_RUNS) == set(registry.WORKLOADS)


@pytest.fixture(scope="module", params=sorted(TINY_RUNS))
def built(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, Project]:
    return request.param, built_project(tmp_path_factory, TINY_RUNS[request.param])


def test_each_run_publishes_a_complete_folder(built: tuple[str, Project]) -> None:
    name, project = built
    workload, engine = registry.workload(name), engines.for_workload(name)
    others = {p for e in engines.ENGINES.values() for p in e.packages} - set(engine.packages)
    for target in (t for t in TINY_RUNS[name] if not t.endswith("/grid")):
        result = project.root / target
        assert EVERY_RUN_PUBLISHES | {engine.weights} <= {p.name for p in result.iterdir()}
        check_headline(result, TINY_CONFIG["performance"]["warmup_steps"])
        metrics = json.loads((result / "metrics.json").read_text())
        assert 0 <= metrics[workload.metric] <= 1, target
        stage = json.loads((project.root / f"work/{target[8:]}/train/stage.json").read_text())
        assert stage["steps"] == 6  # the tiny config: 2 epochs of 3 steps
        provenance = json.loads((result / "provenance.json").read_text())
        assert provenance["backend"] == "cpu"
        assert set(engine.packages) & set(provenance["packages"])  # the engine's, recorded
        assert not others & set(provenance["packages"]), target  # and no other's
        run = target.rsplit("/", 1)[1]
        configured = TINY_CONFIG[name].get("runs", {}).get(run, {}).get("precision")
        if configured is not None:  # a named run's precision reached its train stage
            assert stage["precision"] == provenance["config"][name]["train"]["precision"]
            assert stage["precision"] == configured
