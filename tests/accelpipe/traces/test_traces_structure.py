"""The step breakdown of traces without accelpipe's sections (accelpipe.traces.structure):
forward pass, backward pass, optimizer, data and collectives from what torch records.

Expected numbers come from a plain reading of the rule written out here (json.load, loops,
the step cut at every edge), never from the summarizer's own output."""

from __future__ import annotations

import gzip
import itertools
import json
import re
from collections import defaultdict
from pathlib import Path

import pytest

from accelpipe.traces import reader, render_markdown, summarize_traces
from tests.helpers.chrome_traces import CPU, SHARED_TRACES, write_trace, x_event

pytestmark = pytest.mark.torch  # the standard loop's trace is made with torch.profiler

ANN, OP = "user_annotation", "cpu_op"
PRECEDENCE = ("collectives", "data", "optimizer", "backward pass", "forward pass")
PARTS = ("data", "forward pass", "backward pass", "optimizer", "collectives")


# --------------------------------------------------------------------------- the rule, plainly


def _part(event: dict) -> str | None:
    name = event["name"]
    if re.match(r"(nccl|gloo|mpi|ucc):|c10d::|record_param_comms$", name):
        return "collectives"
    if event["cat"] == OP:
        return "backward pass" if name.startswith("autograd::engine") else "forward pass"
    if name.startswith("enumerate(DataLoader)#"):
        return "data"
    if name.startswith(("Optimizer.step#", "Optimizer.zero_grad#")):
        return "optimizer"
    return None


def _reading(events: list[dict], step: dict) -> dict:
    """One step split by the rule: µs per part, per other section, and None."""
    lo, hi = step["ts"], step["ts"] + step["dur"]
    mine = [
        e
        for e in events
        if e.get("ph") == "X" and e.get("pid") == step["pid"] and e.get("cat") in (ANN, OP)
    ]
    items = []  # (start, end, tid, part, i)
    others = []  # (name, start, end): sections that are no part
    for i, e in enumerate(mine):
        if e["name"].startswith("ProfilerStep#"):
            continue
        part = _part(e)
        start, end = e["ts"], e["ts"] + e["dur"]
        if part is None:
            named = f"{e['name']} (section)" if e["name"] in PARTS else e["name"]
            others.append((named, start, end))
        elif lo <= start <= hi and (part != "forward pass" or e["tid"] == step["tid"]):
            items.append((start, end, e["tid"], part, i))

    def held(a: tuple) -> bool:  # a forward op inside another event of its thread
        return a[3] == "forward pass" and any(
            b is not a
            and b[2] == a[2]
            and b[0] <= a[0]
            and b[1] >= a[1]
            and (b[0], -b[1]) != (a[0], -a[1])
            for b in items
        )

    kept = sorted((a for a in items if not held(a)), key=lambda a: a[0])
    runs: list[list] = []  # [part, start, end]
    for start, end, _tid, part, _i in kept:
        if runs and runs[-1][0] == part:
            runs[-1][2] = max(runs[-1][2], end)
        else:
            runs.append([part, start, end])
    fills, reach = [], lo
    for part, start, end in runs:
        if start > reach:
            fills.append((part, reach, start))
        reach = max(reach, end)
    edges = {t for _, s, e in runs + fills + others for t in (s, e) if lo < t < hi}
    out: dict = defaultdict(float)
    for a, b in itertools.pairwise(sorted({lo, hi, *edges})):
        over = [p for p, s, e in runs if s <= a and e >= b]
        held_by = [iv for iv in others if iv[1] <= a and iv[2] >= b]
        filled = [p for p, s, e in fills if s <= a and e >= b]
        if over:
            owner = min(over, key=PRECEDENCE.index)
        elif held_by:
            owner = min(held_by, key=lambda iv: (-iv[1], iv[2]))[0]
        else:
            owner = filled[0] if filled else None
        out[owner] += b - a
    return dict(out)


def _load(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return json.load(f)["traceEvents"]


def _steps(events: list[dict]) -> list[dict]:
    found = [e for e in events if e.get("cat") == ANN and e["name"].startswith("ProfilerStep#")]
    return sorted(found, key=lambda e: e["ts"])


def _mean_reading(events: list[dict], count: int) -> tuple[dict, list[dict]]:
    """The mean (ms) of the first ``count`` steps' readings, and each step's reading (µs)."""
    each = [_reading(events, step) for step in _steps(events)[:count]]
    mean: dict = defaultdict(float)
    for reading in each:
        for part, us in reading.items():
            mean[part] += us / len(each) / 1e3
    return dict(mean), each


def _check_breakdown(breakdown: dict, want: dict, steps_ms: dict) -> None:
    no_section = want.pop(None, 0.0)
    assert breakdown["sections_ms"] == pytest.approx(want, abs=1e-6)
    assert breakdown["no_section_ms"] == pytest.approx(no_section, abs=1e-6 * (len(want) + 1))
    total = sum(breakdown["sections_ms"].values()) + breakdown["no_section_ms"]
    assert total == pytest.approx(steps_ms["mean"], abs=1e-9)
    assert breakdown["basis"] == "structure"


# --------------------------------------------------------------------------- a standard loop


@pytest.fixture(scope="module")
def standard_loop(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """torch.profiler over a plain training loop (nn.Linear model, DataLoader, SGD), no
    record_function of ours: 3 active steps."""
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile, schedule
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    data = DataLoader(TensorDataset(torch.randn(96, 32), torch.randn(96, 1)), batch_size=16)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    path = tmp_path_factory.mktemp("loop") / "loop.pt.trace.json"
    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=1, warmup=1, active=3, repeat=1),
        on_trace_ready=lambda done: done.export_chrome_trace(str(path)),
    ) as prof:
        for x, y in data:
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            prof.step()
    return path


def test_a_standard_loop_is_split_by_its_structure(standard_loop: Path) -> None:
    events = _load(standard_loop)
    summary = summarize_traces([standard_loop])
    assert summary["sections"]  # the DataLoader's and optimizer's own annotations
    breakdown = summary["step_breakdown"]
    assert summary["steps"]["count"] == breakdown["steps"] == 3
    assert breakdown["steps_by_basis"] == {"structure": 3}
    assert list(breakdown["sections_ms"]) == ["data", "forward pass", "backward pass", "optimizer"]
    want, each = _mean_reading(events, 3)
    for reading in each:  # "(no section)" under 10% of each step
        assert reading.get(None, 0.0) < 0.1 * sum(reading.values())
    _check_breakdown(breakdown, want, summary["steps"]["ms"])
    md = render_markdown(summary)
    assert "split by the structure of a PyTorch step" in md and "| forward pass |" in md


def test_the_second_read_gives_the_same_split_in_tiny_chunks(
    standard_loop: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    want = summarize_traces([standard_loop])["step_breakdown"]
    monkeypatch.setattr(reader, "CHUNK_BYTES", 97)
    assert summarize_traces([standard_loop])["step_breakdown"] == want


# --------------------------------------------------------------------------- real traces

REAL = {  # the parts each real trace's steps show
    "amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz": {
        "forward pass",
        "backward pass",
        "optimizer",
    },
    "timeline_analysis__sampled_rank-0.json.gz": {
        "forward pass",
        "backward pass",
        "optimizer",
        "collectives",
    },
    "call_stack__backward_thread.json": {"backward pass"},
}


@pytest.mark.parametrize("name", sorted(REAL))
def test_real_traces_are_split_by_their_structure(name: str) -> None:
    path = SHARED_TRACES / name
    if not path.exists():
        pytest.skip(f"{path} not present (the shared test data lives beside the project)")
    events = _load(path)
    summary = summarize_traces([path])
    breakdown = summary["step_breakdown"]
    assert set(breakdown["sections_ms"]) & set(PARTS) == REAL[name]
    want, _each = _mean_reading(events, summary["steps"]["count"])
    _check_breakdown(breakdown, want, summary["steps"]["ms"])


def test_a_real_trace_without_steps_has_no_breakdown() -> None:
    name = "critical_path__alexnet__benchmark_result_2869224_1695835535_trace.json.gz"
    path = SHARED_TRACES / name
    if not path.exists():
        pytest.skip(f"{path} not present")
    summary = summarize_traces([path])
    assert summary["steps"] is None and summary["step_breakdown"] is None


def test_real_training_steps_leave_under_a_tenth_in_no_section() -> None:
    """The two real traces of whole training steps (the third is a three-op excerpt)."""
    whole = (
        "amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz",
        "timeline_analysis__sampled_rank-0.json.gz",
    )
    for name in whole:
        path = SHARED_TRACES / name
        if not path.exists():
            pytest.skip(f"{path} not present")
        breakdown = summarize_traces([path])["step_breakdown"]
        assert breakdown["no_section_ms"] < 0.1 * breakdown["step_ms"], name


# --------------------------------------------------------------------------- hand-built rules

MAIN, AUTOGRAD = CPU, {"pid": CPU["pid"], "tid": 2}


def _step(base: float, extra: list[dict] | None = None) -> list[dict]:
    """One 100 µs step: data [2, 12], forward ops [20, 30] and [33, 40] (with nested ops),
    backward on the autograd thread [45, 70] (its own op nested), optimizer [75, 90]
    holding an op; the step ends 10 µs after it."""
    at = base
    return [
        x_event(ANN, f"ProfilerStep#{int(base) // 100}", at, 100, MAIN),
        x_event(
            ANN, "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", at + 2, 10, MAIN
        ),
        x_event(OP, "aten::stack", at + 4, 5, MAIN),  # inside data: data's
        x_event(OP, "aten::linear", at + 20, 10, MAIN),
        x_event(OP, "aten::addmm", at + 21, 8, MAIN),
        x_event(OP, "aten::relu", at + 33, 7, MAIN),
        x_event(OP, "autograd::engine::evaluate_function: AddmmBackward0", at + 45, 12, AUTOGRAD),
        x_event(OP, "aten::mm", at + 46, 10, AUTOGRAD),
        x_event(OP, "autograd::engine::evaluate_function: ReluBackward0", at + 60, 10, AUTOGRAD),
        x_event(ANN, "Optimizer.step#SGD.step", at + 75, 15, MAIN),
        x_event(OP, "aten::add_", at + 76, 10, MAIN),  # inside the optimizer: its
        *(extra or []),
    ]


def test_runs_fill_their_gaps_and_the_tail_is_no_sections(tmp_path: Path) -> None:
    events = _step(0) + _step(100) + [x_event(ANN, "ProfilerStep#2", 200, 100, MAIN)]
    summary = summarize_traces([write_trace(tmp_path / "t.json", events)])
    breakdown = summary["step_breakdown"]
    assert breakdown["steps"] == 2  # the empty last step is left out
    assert breakdown["sections_ms"] == pytest.approx(
        {
            "data": 0.012,  # [0, 12]: the gap before it is the loader's call
            "forward pass": 0.028,  # [12, 40]: one run, the 3 µs between its ops included
            "backward pass": 0.030,  # [40, 70]
            "optimizer": 0.020,  # [70, 90]
        },
        abs=1e-9,
    )
    assert breakdown["no_section_ms"] == pytest.approx(0.010, abs=1e-9)  # [90, 100]
    assert breakdown["basis"] == "structure"


def test_a_users_section_takes_a_gap_over_the_fill_and_keeps_its_name(tmp_path: Path) -> None:
    user = [
        x_event(ANN, "log metrics", 62, 10, MAIN),  # in backward's run: backward's
        x_event(ANN, "optimizer", 70, 4, MAIN),  # a user's section named like a part
        x_event(ANN, "between", 14, 3, MAIN),  # in the gap before forward: its own
    ]
    summary = summarize_traces([write_trace(tmp_path / "t.json", _step(0, user))])
    parts = summary["step_breakdown"]["sections_ms"]
    assert parts["optimizer (section)"] == pytest.approx(0.004, abs=1e-9)
    assert parts["between"] == pytest.approx(0.003, abs=1e-9)
    assert parts["forward pass"] == pytest.approx(0.025, abs=1e-9)
    assert parts["optimizer"] == pytest.approx(0.016, abs=1e-9)
    assert "log metrics" not in parts
    assert "optimizer" in summary["sections"]  # the section table keeps its own name


def test_collectives_inside_backward_are_collectives(tmp_path: Path) -> None:
    comm = [x_event(ANN, "nccl:all_reduce", 62, 5, AUTOGRAD)]
    summary = summarize_traces([write_trace(tmp_path / "t.json", _step(0, comm))])
    parts = summary["step_breakdown"]["sections_ms"]
    assert parts["collectives"] == pytest.approx(0.005, abs=1e-9)
    assert parts["backward pass"] == pytest.approx(0.025, abs=1e-9)


def test_a_trace_with_engine_sections_keeps_them_and_mixed_files_say_so(tmp_path: Path) -> None:
    ours = []
    for base in (1000, 1100):
        ours += [
            x_event(ANN, f"ProfilerStep#{base // 100}", base, 100, MAIN),
            x_event(ANN, "step", base + 5, 90, MAIN),
            x_event(OP, "aten::linear", base + 10, 50, MAIN),  # ops: no part here
        ]
    sections = write_trace(tmp_path / "ours.json", ours)
    alone = summarize_traces([sections])["step_breakdown"]
    assert alone["basis"] == "sections" and alone["sections_ms"] == {"step": 0.09}
    plain = write_trace(tmp_path / "plain.json", _step(0) + _step(100))
    summary = summarize_traces([sections, plain])
    both = summary["step_breakdown"]
    assert both["basis"] == "mixed"
    assert both["steps_by_basis"] == {"sections": 2, "structure": 2}
    md = render_markdown(summary)
    assert "split by the structure of a PyTorch step" in md and "2 of 4 steps" in md


def test_ops_are_read_whatever_their_key_order(tmp_path: Path) -> None:
    """The second read cuts each op at its args, which kineto writes last; an op written
    with args first (ts, dur after them) is read whole, with the same result."""
    events = _step(0) + _step(100)
    want = summarize_traces([write_trace(tmp_path / "last.json", events)])["step_breakdown"]
    first = [{"args": {"External id": 1}, **e} if e["cat"] == OP else e for e in events]
    path = write_trace(tmp_path / "first.json", first, style="compact")
    assert '{"args":{"External id":1},"ph":"X","cat":"cpu_op"' in path.read_text()
    assert summarize_traces([path])["step_breakdown"] == want
    assert want["sections_ms"]["forward pass"] == pytest.approx(0.028, abs=1e-9)
