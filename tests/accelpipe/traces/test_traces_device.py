"""The device side (traces.device): hand-made traces with answers worked out by hand, and
agreement with HTA (HolisticTraceAnalysis, the oracle) on the four real GPU traces of
../shared/traces and on the hand-made one, rank by rank.

HTA is a dev requirement (requirements/dev.txt). Without it the agreement tests skip, saying
why, unless ACCELPIPE_REQUIRE_HTA=1: then they fail.
"""

from __future__ import annotations

import gzip
import json
import logging
import math
import os
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest

from accelpipe.cli import build_parser
from accelpipe.stages.trace import run_summarize_trace
from accelpipe.traces import classify, render_markdown, summarize_traces
from tests.helpers.chrome_traces import SHARED_TRACES, write_trace, x_event

REAL = sorted(p.name for p in SHARED_TRACES.glob("*.json*")) if SHARED_TRACES.is_dir() else []
HOST = {"pid": 100, "tid": 1}


def _stream(s: int) -> dict:
    return {"pid": 0, "tid": s}


def _launch(name: str, ts: float, corr: int) -> dict:
    return x_event("cuda_runtime", name, ts, 4, HOST, correlation=corr)


def _op(cat: str, name: str, ts: float, dur: float, stream: int, corr: int) -> dict:
    return x_event(cat, name, ts, dur, _stream(stream), correlation=corr, stream=stream, device=0)


NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"


def known_events() -> list[dict]:
    """Stream 7: gemm at 100-150 (launched at 90), 160-170 (at 95: a 10 µs gap, launched
    before the previous ended: kernel wait), 300-305 (at 250, after it ended: host wait 130),
    340-345 (at 260, before: a 35 µs gap, other). Stream 20: NCCL at 120-220 (at 110), a
    memcpy at 400-410 (cudaMemcpyAsync at 300: host wait 180)."""
    return [
        _launch("cudaLaunchKernel", 90, 1),
        _launch("cudaLaunchKernel", 95, 2),
        _launch("cudaLaunchKernel", 110, 3),
        _launch("cudaLaunchKernel", 250, 4),
        _launch("cudaLaunchKernel", 260, 5),
        _launch("cudaMemcpyAsync", 300, 6),
        _op("kernel", "gemm", 100, 50, 7, 1),
        _op("kernel", "gemm", 160, 10, 7, 2),
        _op("kernel", NCCL, 120, 100, 20, 3),
        _op("kernel", "gemm", 300, 5, 7, 4),
        _op("kernel", "gemm", 340, 5, 7, 5),
        _op("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", 400, 10, 20, 6),
    ]


def test_known_answers(tmp_path: Path) -> None:
    """Window 100-410 (310 µs); busy = [100, 220] + 5 + 5 + 10 = 140, idle 170; compute =
    50 + 10 + 5 + 5 = 70; non-compute = 310 - 70 - 170 = 70 (NCCL alone 60, memcpy 10);
    NCCL overlaps gemm for 30 + 10 = 40 of its 100 µs."""
    dev = summarize_traces(write_trace(tmp_path / "t.json", known_events()))["device_ranks"]
    assert list(dev) == ["0"]
    r = dev["0"]
    kinds = r["kernel_breakdown"]
    assert kinds["computation"] == {"count": 4, "total_ms": 0.07, "share": round(70 / 180, 6)}
    assert kinds["communication"] == {"count": 1, "total_ms": 0.1, "share": round(100 / 180, 6)}
    assert kinds["memory"] == {"count": 1, "total_ms": 0.01, "share": round(10 / 180, 6)}
    assert r["kernel_type_ms"] == {
        "computation": 0.03,
        "communication": 0.06,
        "computation overlapping communication": 0.04,
        "memory": 0.01,
    }
    assert r["top_kernels"]["computation"] == [
        {
            "name": "gemm",
            "count": 4,
            "total_ms": 0.07,
            "mean_ms": 0.0175,
            "min_ms": 0.005,
            "max_ms": 0.05,
        }
    ]
    assert r["top_kernels"]["communication"][0]["name"] == NCCL
    assert r["temporal_breakdown"] == {
        "kernel_time_ms": 0.31,
        "idle_time_ms": 0.17,
        "compute_time_ms": 0.07,
        "non_compute_time_ms": 0.07,
        "idle_time_share": round(170 / 310, 6),
        "compute_time_share": round(70 / 310, 6),
    }
    assert r["idle_time_breakdown"] == {
        "20": {"host_wait_ms": 0.18, "kernel_wait_ms": 0.0, "other_ms": 0.0},
        "7": {"host_wait_ms": 0.13, "kernel_wait_ms": 0.01, "other_ms": 0.035},
    }
    assert r["comp_comm_overlap_ratio"] == 0.4
    # Kernel launches only (not the cudaMemcpyAsync): 10, 65, 10, 50, 80 µs.
    delays = [10, 65, 10, 50, 80]
    p50, p90, p99 = np.percentile(delays, [50, 90, 99]).tolist()
    launches = r["kernel_launches"]
    assert launches["launch_delay_us"] == {
        "count": 5,
        "p50": round(p50, 3),
        "p90": round(p90, 3),
        "p99": round(p99, 3),
        "max": 80,
    }
    assert launches["short_kernels"] == {
        "threshold_us": 10.0,  # the 10 µs gemm is not under it
        "count": 2,
        "count_share": 0.4,
        "total_ms": 0.01,
        "time_share": round(10 / 170, 6),
    }


def test_short_kernel_threshold_and_ranks(tmp_path: Path) -> None:
    """A rank per distributedInfo.rank; files of one rank add up (windows summed, so the
    time between two profiler cycles is never idle); the threshold is a parameter."""
    a = write_trace(tmp_path / "a.json", known_events())
    b = write_trace(tmp_path / "b.json", known_events())
    doc = json.loads(b.read_text())
    doc["distributedInfo"]["rank"] = 1
    b.write_text(json.dumps(doc))
    c = tmp_path / "c.json"
    c.write_text(a.read_text())
    dev = summarize_traces([a, b, c], short_kernel_us=11)["device_ranks"]
    assert sorted(dev) == ["0", "1"]
    assert dev["0"]["temporal_breakdown"]["kernel_time_ms"] == 0.62
    assert dev["0"]["temporal_breakdown"]["idle_time_ms"] == 0.34
    assert dev["1"]["temporal_breakdown"]["kernel_time_ms"] == 0.31
    assert dev["0"]["kernel_launches"]["launch_delay_us"]["count"] == 10
    assert dev["1"]["kernel_launches"]["short_kernels"]["count"] == 3  # 10 µs < 11


def test_no_device_ops(tmp_path: Path) -> None:
    events = [x_event("user_annotation", "forward", 0, 10, HOST)]
    assert summarize_traces(write_trace(tmp_path / "t.json", events))["device_ranks"] is None


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("ncclKernel_AllGather_RING_LL_Sum_int8_t", classify.COMMUNICATION),
        ("ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)", classify.COMMUNICATION),
        ("rcclGenericKernel", classify.COMMUNICATION),  # HTA: computation
        ("Memcpy DtoH (Device -> Pinned)", classify.MEMORY),
        ("Memset (Device)", classify.MEMORY),
        ("Stream Sync", classify.OTHER_KIND),
        ("void at::native::vectorized_elementwise_kernel<4>", classify.COMPUTATION),
    ],
)
def test_op_kind(name: str, kind: str) -> None:
    assert classify.op_kind(name) == kind


def test_kernel_launch_names() -> None:
    for name in ("cudaLaunchKernel", "cudaLaunchKernelExC", "hipLaunchKernel", "cuLaunchKernel"):
        assert classify.is_kernel_launch(name)
    for name in ("cudaGraphLaunch", "cudaMemcpyAsync", "hipMemcpyWithStream", None):
        assert not classify.is_kernel_launch(name)


# --------------------------------------------------------------------------- HTA agreement


def _hta():  # type: ignore[no-untyped-def]
    try:
        from hta.trace_analysis import TraceAnalysis
    except ImportError as err:
        reason = (
            f"HolisticTraceAnalysis is not installed ({err}); pip install -r requirements/dev.txt"
        )
        if os.environ.get("ACCELPIPE_REQUIRE_HTA") == "1":
            pytest.fail(f"ACCELPIPE_REQUIRE_HTA=1 but {reason}")
        pytest.skip(reason)
    return TraceAnalysis


def hta_figures(
    paths: list[Path],
    work: Path,
    *,
    drop_sync: bool = True,
    ns_rounding: bool = False,
    include_last: bool = True,
) -> dict[int, dict]:
    """HTA's figures per rank (one trace file each), in µs. By default: the whole trace
    (HTA's ``include_last_profiler_step=True``), without HTA's two definitions that differ
    from ours (cuda_sync rows as device time; ns timestamps shrunk to whole µs)."""
    analysis = _hta()
    folder = work / f"hta{len(list(work.glob('hta*')))}"
    folder.mkdir()
    for path in paths:
        shutil.copy(path, folder / path.name)
    old = os.environ.get("HTA_DISABLE_NS_ROUNDING")
    os.environ["HTA_DISABLE_NS_ROUNDING"] = "0" if ns_rounding else "1"
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ta = analysis(trace_dir=str(folder), include_last_profiler_step=include_last)
            ranks = dict(ta.t.traces)
            out = {}
            for rank, df in ranks.items():  # one rank at a time: HTA pools kernel types
                ta.t.traces = {rank: df}
                out[int(rank)] = _read_hta(ta, rank, drop_sync)
            return out
    finally:
        logging.disable(logging.NOTSET)
        if old is None:
            os.environ.pop("HTA_DISABLE_NS_ROUNDING")
        else:
            os.environ["HTA_DISABLE_NS_ROUNDING"] = old


def _read_hta(ta, rank: int, drop_sync: bool) -> dict:  # type: ignore[no-untyped-def]
    ids = ta.t.symbol_table.get_sym_id_map()
    names = ta.t.symbol_table.get_sym_table()
    if drop_sync:
        df = ta.t.traces[rank]
        ta.t.traces[rank] = df[df["cat"] != ids.get("cuda_sync", -1000)]
    df = ta.t.traces[rank]
    tb = ta.get_temporal_breakdown(visualize=False).iloc[0]
    kt, _ = ta.get_gpu_kernel_breakdown(visualize=False, include_memory_kernels=True)
    overlap = ta.get_comm_comp_overlap(visualize=False)["comp_comm_overlap_pctg"].iloc[0]
    idle, _ = ta.get_idle_time_breakdown(ranks=[rank], visualize=False)
    # Launch delay by HTA's correlation join, measured start to start (see docs/traces.md).
    host = df[df["stream"].eq(-1) & df["correlation"].gt(0)]
    host = host[[classify.is_kernel_launch(names[n]) for n in host["name"]]]
    kern = df[df["stream"].ne(-1) & df["cat"].eq(ids.get("kernel", -1000))]
    joined = kern.merge(host, on="correlation", suffixes=("_k", "_h"))
    return {
        "window": float(tb["kernel_time(us)"]),
        "idle": float(tb["idle_time(us)"]),
        "compute": float(tb["compute_time(us)"]),
        "non_compute": float(tb["non_compute_time(us)"]),
        "classes": {r.kernel_type.lower(): float(r["sum"]) for _, r in kt.iterrows()},
        "overlap": None if math.isnan(overlap) else float(overlap) / 100,
        "idle_by_stream": {
            (str(r.stream), r.idle_category): float(r.idle_time) for _, r in idle.iterrows()
        },
        "delays": (joined["ts_k"] - joined["ts_h"]).to_numpy(float),
    }


def _agree(ours: dict, hta: dict, path: str) -> dict[str, float]:
    """Each figure within 0.1% of the window or 1 µs; returns the deviations (µs)."""
    tol = max(1e-3 * hta["window"], 1.0)
    tb = ours["temporal_breakdown"]
    dev = {
        "window": abs(tb["kernel_time_ms"] * 1e3 - hta["window"]),
        "idle": abs(tb["idle_time_ms"] * 1e3 - hta["idle"]),
        "compute": abs(tb["compute_time_ms"] * 1e3 - hta["compute"]),
        "non_compute": abs(tb["non_compute_time_ms"] * 1e3 - hta["non_compute"]),
    }
    classes = {k: v * 1e3 for k, v in ours["kernel_type_ms"].items()}
    assert set(classes) == {k for k, v in hta["classes"].items() if v > 0}, path
    dev["kernel_type"] = max(abs(classes[k] - hta["classes"][k]) for k in classes)
    idle = {
        (s, c.removesuffix("_ms")): v * 1e3
        for s, row in ours["idle_time_breakdown"].items()
        for c, v in row.items()
    }
    dev["idle_breakdown"] = max(
        abs(idle.get(k, 0.0) - v) for k, v in hta["idle_by_stream"].items() if not math.isnan(v)
    )
    if hta["overlap"] is None:
        assert ours["comp_comm_overlap_ratio"] is None, path
    else:  # a share of the communication time: its deviation in µs of that time
        comm = sum(v for k, v in classes.items() if "communication" in k)
        dev["overlap"] = abs(ours["comp_comm_overlap_ratio"] - hta["overlap"]) * comm
    launches = ours["kernel_launches"]["launch_delay_us"]
    delays = hta["delays"]
    assert launches["count"] == len(delays), path
    want = dict(zip(("p50", "p90", "p99"), np.percentile(delays, [50, 90, 99]), strict=True))
    dev["launch_delay"] = max(
        abs(launches["max"] - delays.max()), *(abs(launches[k] - v) for k, v in want.items())
    )
    for figure, deviation in dev.items():
        assert deviation <= tol, f"{path}: {figure} off by {deviation:.3f} µs (tolerance {tol})"
    return dev


@pytest.mark.parametrize("name", REAL)
def test_agrees_with_hta_on_real_traces(name: str, tmp_path: Path) -> None:
    path = SHARED_TRACES / name
    ours = summarize_traces(path)["device_ranks"]["0"]
    _agree(ours, hta_figures([path], tmp_path)[0], name)


def test_agrees_with_hta_on_a_made_trace(tmp_path: Path) -> None:
    path = write_trace(tmp_path / "made.json", known_events())
    ours = summarize_traces(path)["device_ranks"]["0"]
    dev = _agree(ours, hta_figures([path], tmp_path)[0], "made")
    assert max(dev.values()) == 0


def _shifted(events: list[dict], by: float, longer: float) -> list[dict]:
    """The events ``by`` µs later, the first gemm ``longer`` µs longer."""
    out = [{**e, "ts": e["ts"] + by} for e in events]
    first = next(e for e in out if e["name"] == "gemm")
    first["dur"] += longer
    return out


def test_agrees_with_hta_rank_by_rank(tmp_path: Path) -> None:
    """Two ranks, one file each: every figure of each rank is HTA's for that rank."""
    a = write_trace(tmp_path / "rank0.json", known_events())
    b = write_trace(tmp_path / "rank1.json", _shifted(known_events(), 1000, 25))
    doc = json.loads(b.read_text())
    doc["distributedInfo"]["rank"] = 1
    b.write_text(json.dumps(doc))
    ours = summarize_traces([a, b])["device_ranks"]
    hta = hta_figures([a, b], tmp_path)
    assert sorted(hta) == [0, 1] and sorted(ours) == ["0", "1"]
    assert ours["0"]["temporal_breakdown"] != ours["1"]["temporal_breakdown"]
    for rank in (0, 1):
        assert max(_agree(ours[str(rank)], hta[rank], f"rank {rank}").values()) == 0


def _rewritten(src: Path, dst: Path, edit) -> Path:  # type: ignore[no-untyped-def]
    opener = gzip.open if src.suffix == ".gz" else open
    with opener(src, "rt") as f:
        doc = json.load(f)
    doc["traceEvents"] = [edit(e) for e in doc["traceEvents"]]
    dst.write_text(json.dumps(doc))
    return dst


def test_hta_rounding_is_the_difference(tmp_path: Path) -> None:
    """HTA shrinks ns-resolution ops to whole µs (start rounded up, end down); on the ROCm
    trace that moves compute time by ~15 µs, beyond the tolerance. Rounded the same way, the
    trace gives our figures HTA's own."""
    name = "amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz"
    path = SHARED_TRACES / name
    if not path.is_file():
        pytest.skip(f"{path} not found")
    hta = hta_figures([path], tmp_path, ns_rounding=True)[0]
    ours = summarize_traces(path)["device_ranks"]["0"]["temporal_breakdown"]
    assert abs(ours["compute_time_ms"] * 1e3 - hta["compute"]) > 1e-3 * hta["window"]

    def whole_us(e: dict) -> dict:
        if isinstance(e.get("ts"), float) and isinstance(e.get("dur"), (int, float)):
            end = math.floor(e["ts"] + e["dur"])
            e["ts"] = math.ceil(e["ts"])
            e["dur"] = end - e["ts"]
        return e

    rounded = _rewritten(path, tmp_path / "rounded.json", whole_us)
    ours = summarize_traces(rounded)["device_ranks"]["0"]
    _agree(ours, hta, name)


def test_hta_cuda_sync_is_the_difference(tmp_path: Path) -> None:
    """HTA counts cuda_sync rows (Stream Sync, Stream Wait Event, ...) as device time; we do
    not. Taken as device ops (renamed kernels), the AlexNet trace gives HTA's own window."""
    name = "critical_path__alexnet__benchmark_result_2869224_1695835535_trace.json.gz"
    path = SHARED_TRACES / name
    if not path.is_file():
        pytest.skip(f"{path} not found")
    hta = hta_figures([path], tmp_path, drop_sync=False)[0]
    ours = summarize_traces(path)["device_ranks"]["0"]["temporal_breakdown"]
    assert abs(ours["kernel_time_ms"] * 1e3 - hta["window"]) > 1e-3 * hta["window"]

    def sync_as_kernel(e: dict) -> dict:
        return {**e, "cat": "kernel"} if e.get("cat") == "cuda_sync" else e

    as_ops = summarize_traces(_rewritten(path, tmp_path / "s.json", sync_as_kernel))
    tb = as_ops["device_ranks"]["0"]["temporal_breakdown"]
    for ours_key, hta_key in (
        ("kernel_time_ms", "window"),
        ("idle_time_ms", "idle"),
        ("compute_time_ms", "compute"),
        ("non_compute_time_ms", "non_compute"),
    ):
        assert abs(tb[ours_key] * 1e3 - hta[hta_key]) <= max(1e-3 * hta["window"], 1.0)


def test_markdown_device_tables(tmp_path: Path) -> None:
    """summary.md: one row per rank with the figures worked out in test_known_answers."""
    text = render_markdown(summarize_traces(write_trace(tmp_path / "t.json", known_events())))
    assert "## Device time (per rank)" in text
    row = next(line for line in text.splitlines() if line.startswith("| 0 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1:9] == ["0.310", "54.8", "22.6", "22.6", "0.070", "0.100", "0.010", "40.0"]
    assert cells[9] == "0.310 / 0.010 / 0.035"
    assert cells[10] == "50.0 / 79.4"
    assert cells[11] == "2 under 10 µs (5.9)"
    assert "| computation | gemm | 4 | 0.070 | 0.018 | 0.005 | 0.050 |" in text


def test_cli_short_kernel_threshold(tmp_path: Path) -> None:
    """summarize-trace --short-kernel-us reaches summary.json; without it, the default."""
    traces = tmp_path / "traces"
    traces.mkdir()
    write_trace(traces / "t.json", known_events())
    for flag, threshold, count in (([], 10.0, 2), (["--short-kernel-us", "11"], 11.0, 3)):
        out = tmp_path / f"out{threshold}"
        args = build_parser().parse_args(
            ["summarize-trace", "--traces", str(traces), "--out", str(out), *flag]
        )
        run_summarize_trace(args)
        short = json.loads((out / "summary.json").read_text())["device_ranks"]["0"]
        assert short["kernel_launches"]["short_kernels"]["threshold_us"] == threshold
        assert short["kernel_launches"]["short_kernels"]["count"] == count


def test_hta_last_step_is_the_difference(tmp_path: Path) -> None:
    """By default HTA leaves out device ops launched in the last ProfilerStep (and those
    with no launch); the sampled trace without them gives our figures HTA's default ones."""
    name = "timeline_analysis__sampled_rank-0.json.gz"
    path = SHARED_TRACES / name
    if not path.is_file():
        pytest.skip(f"{path} not found")
    hta = hta_figures([path], tmp_path, include_last=False)[0]
    ours = summarize_traces(path)["device_ranks"]["0"]["temporal_breakdown"]
    assert abs(ours["kernel_time_ms"] * 1e3 - hta["window"]) > 1e-3 * hta["window"]
    with gzip.open(path, "rt") as f:
        events = json.load(f)["traceEvents"]
    last = max(
        e["ts"]
        for e in events
        if e.get("cat") == "user_annotation" and str(e.get("name")).startswith("ProfilerStep#")
    )
    launched = {
        e["args"]["correlation"]: e["ts"]
        for e in events
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})
    }

    def before_last(e: dict) -> bool:
        if e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset"):
            return True
        return launched.get(e.get("args", {}).get("correlation"), last) < last

    kept = write_trace(tmp_path / "kept.json", [e for e in events if before_last(e)])
    _agree(summarize_traces(kept)["device_ranks"]["0"], hta, name)


def _tf_trace(events: list[dict]) -> dict:
    """``known_events`` as xprof's trace viewer JSON writes a GPU host (the shape of
    test_traces_tensorflow's hand-built trace): string correlation_ids, launches on a host
    thread, ops on "Stream #N" lines of the /device:GPU:0 process."""
    host, gpu = 701, 1
    out: list[dict] = [
        {"ph": "M", "name": "process_name", "pid": host, "args": {"name": "/host:CPU"}},
        {"ph": "M", "name": "process_name", "pid": gpu, "args": {"name": "/device:GPU:0"}},
        {"ph": "M", "name": "thread_name", "pid": host, "tid": 10, "args": {"name": "python"}},
    ]
    for s in (7, 20):
        meta = {"ph": "M", "name": "thread_name", "pid": gpu, "tid": s}
        out.append(meta | {"args": {"name": f"Stream #{s}(Kernel)"}})
    step = {"ph": "X", "name": "train 1", "pid": host, "tid": 10, "ts": 0, "dur": 500}
    out.append(step | {"args": {"group_id": "1", "step_num": "1"}})
    for e in events:
        where = {"pid": host, "tid": 10} if e["pid"] == HOST["pid"] else {"pid": gpu}
        args = {"correlation_id": str(e["args"]["correlation"]), "group_id": "1"}
        out.append({**e, **where, "args": args})  # device ops keep their tid: the stream
    for e in out:
        e.pop("cat", None)
    return {"displayTimeUnit": "ns", "metadata": {"highres-ticks": True}, "traceEvents": out}


def test_tf_trace_device_side(tmp_path: Path) -> None:
    """The TF trace viewer form of the known trace gives the same figures, streams named by
    their lines."""
    path = tmp_path / "trace_step000001.json"
    path.write_text(json.dumps(_tf_trace(known_events())))
    summary = summarize_traces(path)
    assert summary["format"] == "tf-trace-viewer"
    tf = summary["device_ranks"]["0"]
    kineto = summarize_traces(write_trace(tmp_path / "k.json", known_events()))["device_ranks"]
    want = kineto["0"]
    want["idle_time_breakdown"] = {
        f"Stream #{s}": row for s, row in want["idle_time_breakdown"].items()
    }
    assert tf["idle_time_breakdown"] == {
        "Stream #20": {"host_wait_ms": 0.18, "kernel_wait_ms": 0.0, "other_ms": 0.0},
        "Stream #7": {"host_wait_ms": 0.13, "kernel_wait_ms": 0.01, "other_ms": 0.035},
    }
    assert tf == want
