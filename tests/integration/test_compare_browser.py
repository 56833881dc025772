"""results/compare in a real headless Chromium (Debian's, scripts/chromium.sh installs it),
driven over the DevTools protocol: the page loads without a console error or an uncaught
exception, fits a 1,400 px window, shows every run, its plots and each run's training curves
are images that render, and each number on it is the one in the run's files: exact in the
cell's data-value, rounded as the page rounds its kind in the text.

The runs are real: results/resnet50/fp32 and results/ssd/fp32 of one tiny project, made once
for the module. Without Chromium (or websocket-client) the tests skip, saying why, unless
ACCELPIPE_REQUIRE_BROWSER=1 (CI sets it): then they fail.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from accelpipe.compare.page import NUMBERS, show
from accelpipe.compare.write import write_compare
from accelpipe.config import registry
from accelpipe.results.curves import CURVES_FILE
from tests.helpers.run_folders import energy, reference, write_run
from tests.workflow.project import TINY_CONFIG, Project, make_project

pytestmark = pytest.mark.integration

RUNS = ("results/resnet50/fp32", "results/ssd/fp32")
PER_HOUR = 0.5  # cost.per_hour.cpu of the project: the page shows costs
WINDOW = 1400  # the page fits a window this wide (CSS px)
# page field -> the trace summary's step_breakdown sections it adds up
PARTS = {
    "data_wait_ms": ("loader_first", "loader_next"),
    "forward_ms": ("forward",),
    "loss_ms": ("loss",),
    "backward_ms": ("backward",),
    "optimizer_step_ms": ("optimizer_step",),
}
# What the page reads: every run's cells (data-field -> text) in both tables, its marks,
# every image's state after decoding, once the decoding promises settle.
PAGE_STATE = """
Promise.allSettled([...document.images].map(i => i.decode())).then(() => JSON.stringify({
  rows: [...document.querySelectorAll('tr[data-run]')].map(tr => ({
    table: tr.closest('table').id, workload: tr.dataset.workload, run: tr.dataset.run,
    cells: Object.fromEntries([...tr.querySelectorAll('td[data-field]')]
      .map(td => [td.dataset.field, td.innerText.trim()])),
    values: Object.fromEntries([...tr.querySelectorAll('td[data-value]')]
      .map(td => [td.dataset.field, td.dataset.value])),
    marks: tr.querySelector('td.marks') ? tr.querySelector('td.marks').innerText : null})),
  images: [...document.images].map(i => ({complete: i.complete, width: i.naturalWidth,
    scheme: i.src.split(':')[0]})),
  curves: [...document.querySelectorAll('figure[data-run]')].map(f => ({
    workload: f.dataset.workload, run: f.dataset.run,
    src: f.querySelector('img') ? f.querySelector('img').src : null})),
  scrollWidth: document.documentElement.scrollWidth,
  clientWidth: document.documentElement.clientWidth,
}))
"""


def _unavailable(reason: str) -> None:
    if os.environ.get("ACCELPIPE_REQUIRE_BROWSER") == "1":
        pytest.fail(f"ACCELPIPE_REQUIRE_BROWSER=1 but {reason}")
    pytest.skip(reason)


class DevTools:
    """A DevTools protocol session with one page: calls, and the events seen meanwhile."""

    def __init__(self, url: str) -> None:
        import websocket

        self.ws = websocket.create_connection(url, suppress_origin=True)
        self.events: list[dict[str, Any]] = []
        self._id = 0

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self._id += 1
        self.ws.send(json.dumps({"id": self._id, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == self._id:
                if "error" in message:
                    raise AssertionError(f"{method}: {message['error']}")
                return message["result"]
            self.events.append(message)

    def wait_for(self, event: str) -> dict[str, Any]:
        while not any(e.get("method") == event for e in self.events):
            self.events.append(json.loads(self.ws.recv()))
        return next(e for e in self.events if e.get("method") == event)

    def load(self, url: str, width: int | None = None) -> dict[str, Any]:
        """Open `url` (in a window `width` CSS px wide, else the browser's own); the page's
        state (PAGE_STATE) once loaded and its images decoded."""
        if width is None:
            self.call("Emulation.clearDeviceMetricsOverride")
        else:
            metrics = {"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": False}
            self.call("Emulation.setDeviceMetricsOverride", **metrics)
        self.events.clear()
        self.call("Page.navigate", url=url)
        self.wait_for("Page.loadEventFired")
        result = self.call(
            "Runtime.evaluate", expression=PAGE_STATE, awaitPromise=True, returnByValue=True
        )
        return json.loads(result["result"]["value"])

    def errors(self) -> list[str]:
        """Console errors, uncaught exceptions and error log entries seen so far."""
        self.call("Runtime.evaluate", expression="0")  # every earlier event has arrived
        found = []
        for event in self.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.exceptionThrown":
                found.append(f"exception: {params['exceptionDetails']}")
            elif method == "Runtime.consoleAPICalled" and params["type"] in ("error", "assert"):
                found.append(f"console.{params['type']}: {params['args']}")
            elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
                found.append(f"log: {params['entry']['text']} {params['entry'].get('url', '')}")
        return found


def _devtools_port(profile: Path, browser: subprocess.Popen[bytes]) -> int:
    """Chromium writes the port it chose (--remote-debugging-port=0) into the profile."""
    active = profile / "DevToolsActivePort"
    while not (active.exists() and active.read_text().strip()):
        if browser.poll() is not None:
            raise AssertionError(f"chromium exited with {browser.returncode} before listening")
        time.sleep(0.05)
    return int(active.read_text().split()[0])


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevTools]:
    binary = os.environ.get("ACCELPIPE_CHROMIUM") or shutil.which("chromium")
    if binary is None:
        _unavailable("no chromium (bash scripts/chromium.sh installs Debian's)")
    try:
        import websocket  # noqa: F401
    except ImportError:
        _unavailable("no websocket-client (requirements/dev.txt)")
    profile = tmp_path_factory.mktemp("chromium")
    # --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start.
    args = ["--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-port=0"]
    args += [f"--user-data-dir={profile}", "about:blank"]
    with (profile.parent / "chromium.log").open("wb") as log:
        proc = subprocess.Popen([binary, *args], stdout=log, stderr=log)
    try:
        port = _devtools_port(profile, proc)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list") as reply:
            page = next(t for t in json.load(reply) if t["type"] == "page")
        tools = DevTools(page["webSocketDebuggerUrl"])
        for domain in ("Page", "Runtime", "Log"):
            tools.call(f"{domain}.enable")
        yield tools
        tools.ws.close()
    finally:
        proc.terminate()
        proc.wait()


@pytest.fixture(scope="module")
def project(browser: DevTools, tmp_path_factory: pytest.TempPathFactory) -> Project:
    """Two real runs (one per framework) and results/compare, priced on the cpu."""
    config = TINY_CONFIG | {"cost": {"per_hour": {"cpu": PER_HOUR}}}
    proj = make_project(tmp_path_factory.mktemp("compare"), config)
    proj.snakemake(*RUNS)
    proj.snakemake("results/compare")
    return proj


def _read(run: Path, name: str) -> dict[str, Any]:
    return json.loads((run / name).read_text())


def _expected(run: Path) -> dict[str, tuple[float | None, bool]]:
    """data-field -> (the value in the run's files, whether it is computed from them and so
    only equal to 4 significant digits: costs, the step and `other`, the step minus its
    parts). Every number cell of the page is here."""
    workload = run.parent.name
    perf = _read(run, "performance.json")
    summary = _read(run, "trace_summary.json")
    nodes = _read(run, "provenance.json")["config"][workload]["train"]["nodes"]
    metric = _read(run, "metrics.json")[registry.workload(workload).metric]
    # The step breakdown gives each instant of the mean step to one section: the parts and
    # `other` (the step alone, other sections, none) add up to the step.
    breakdown = summary["step_breakdown"]
    shares = breakdown["sections_ms"]
    parts = {f: sum(shares.get(s, 0.0) for s in names) for f, names in PARTS.items()}
    step = breakdown["step_ms"]
    rate = perf["throughput"]["samples_per_s"]
    spread = perf["per_step"]["samples_per_s"]
    compute = perf["compute"]
    energy = perf.get("energy") or {}
    exact = {
        "metric_value": metric,
        "samples_per_s": rate,
        "stage_samples_per_s": perf["stage_throughput"]["samples_per_s"],
        **{f"per_step_samples_per_s_{q}": spread[q] for q in ("p10", "p90")},
        **{
            k: perf[k]
            for k in ("time_to_train_s", "time_to_target_s", "world_size", "global_batch")
        },
        "reference_ratio": (perf["reference"] or {}).get("ratio"),
        "nodes": nodes,
        **{k: compute[k] for k in ("flops_per_sample", "model_tflops", "mfu", "gemm_fraction")},
        "joules_per_run": energy.get("process_joules"),
        "joules_per_1000_samples": energy.get("joules_per_1000_samples"),
        **parts,
    }
    computed = {
        "profiled_step_ms": step,
        "other_ms": step - sum(parts.values()),
        "cost_per_run": perf["time_to_train_s"] / 3600 * PER_HOUR * nodes,
        "cost_per_1000_samples": 1000 / rate / 3600 * PER_HOUR * nodes,
    }
    return {k: (v, False) for k, v in exact.items()} | {k: (v, True) for k, v in computed.items()}


def test_the_page_loads_without_errors_and_its_plots_render(
    project: Project, browser: DevTools
) -> None:
    state = browser.load((project.root / "results/compare/compare.html").as_uri())
    assert browser.errors() == []
    assert len(state["images"]) == 3 + len(RUNS)  # the plots, each run's training curves
    for image in state["images"]:
        assert image["complete"] and image["width"] > 0 and image["scheme"] == "data"


def test_the_page_fits_a_1400_px_window(
    project: Project, browser: DevTools, tmp_path: Path
) -> None:
    state = browser.load((project.root / "results/compare/compare.html").as_uri(), WINDOW)
    _fits(state)
    # the check sees a page that does not fit
    wide = tmp_path / "wide.html"
    wide.write_text('<table style="width: 2000px"><tr><td>wide</td></tr></table>')
    assert browser.load(wide.as_uri(), WINDOW)["scrollWidth"] > WINDOW


def _fits(state: dict[str, Any]) -> None:
    """No horizontal scrolling: nothing wider than the window less its vertical scrollbar."""
    assert state["scrollWidth"] <= WINDOW
    assert state["scrollWidth"] <= state["clientWidth"]


def test_many_runs_with_long_names_and_every_figure_fit_too(
    browser: DevTools, tmp_path: Path
) -> None:
    """Hand-made run folders (tests.helpers.run_folders): a grid's long run name, a long
    device name, every workload, costs and energy: still no horizontal scrolling."""
    results = tmp_path / "results"
    runs = [
        write_run(results, workload, "lr0.001_bs16_warmup100_wd0.05_seed1", 0.7123456,
                  (12345.678, 11000.5, 13000.25), 3725.123, backend="cuda",
                  reference=reference(0.87654, comparable=False),
                  energy_block=energy(51.2345, 1234567.8))
        for workload in registry.WORKLOADS
    ] + [write_run(results, "ssd", "old", 0.2, seconds=33.3, with_performance=False)]  # fmt: skip
    for run in runs[:-1]:
        perf = json.loads((run / "performance.json").read_text())
        perf["device"] = "NVIDIA H100 80GB HBM3 (SXM5, 700 W)"
        perf["compute"] = {
            **dict.fromkeys(("flops_counted_by", "peak_note", "gemm", "not_measured")),
            "flops_per_sample": 12_345_678_901.0,
            "model_tflops": 152.3456,
            "mfu": 0.1540123,
            "gemm_fraction": 0.2538,
        }
        (run / "performance.json").write_text(json.dumps(perf))
    write_compare(runs, {"cuda": 4.1}, tmp_path / "compare")
    state = browser.load((tmp_path / "compare/compare.html").as_uri(), WINDOW)
    assert browser.errors() == []
    _fits(state)


def test_each_runs_training_curves_are_its_folders_png(project: Project, browser: DevTools) -> None:
    state = browser.load((project.root / "results/compare/compare.html").as_uri())
    shown = {f"results/{c['workload']}/{c['run']}": c["src"] for c in state["curves"]}
    assert list(shown) == list(RUNS)
    for run, src in shown.items():
        png = (project.root / run / CURVES_FILE).read_bytes()
        assert base64.b64decode(src.split(",", 1)[1]) == png


def test_every_run_is_on_the_page_with_the_numbers_of_its_files(
    project: Project, browser: DevTools
) -> None:
    state = browser.load((project.root / "results/compare/compare.html").as_uri())
    for table in ("runs", "steps"):
        shown = [
            f"results/{r['workload']}/{r['run']}" for r in state["rows"] if r["table"] == table
        ]
        assert shown == list(RUNS)
    for run in RUNS:
        workload, name = run.split("/")[1:]
        cells: dict[str, str] = {}
        values: dict[str, str] = {}
        for row in state["rows"]:
            if (row["workload"], row["run"]) == (workload, name):
                cells |= row["cells"]
                values |= row["values"]
        expected = _expected(project.root / run)
        assert set(expected) == set(NUMBERS) == set(values)
        for field, (value, computed) in expected.items():
            shown = json.loads(values[field])  # the number behind the cell, as read
            if value is None:
                assert shown is None and cells[field] in ("none", "–"), field
                continue
            if computed:
                assert shown == pytest.approx(value, rel=1e-3, abs=1e-6), field
            else:
                assert shown == value, field  # exactly the file's
            assert cells[field] == show(shown, NUMBERS[field].kind), field  # rounded
        # one run per workload: nothing to compare it with, so no marks (never across
        # workloads: resnet50's speed is not set against ssd's)
        assert all(not r["marks"] for r in state["rows"] if r["run"] == name)


def test_the_error_check_sees_errors(browser: DevTools, tmp_path: Path) -> None:
    """The checks above would catch a broken page: a console error, an uncaught exception
    and an image that does not load."""
    broken = tmp_path / "broken.html"
    broken.write_text(
        '<img src="missing.png"><script>console.error("bad");throw new Error(\'uncaught\')</script>'
    )
    state = browser.load(broken.as_uri())
    errors = browser.errors()
    assert any(e.startswith("console.error") for e in errors)
    assert any(e.startswith("exception") and "uncaught" in e for e in errors)
    assert any(e.startswith("log:") and "missing.png" in e for e in errors)
    assert state["images"][0]["width"] == 0
