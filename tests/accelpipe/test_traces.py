"""Tests for the streaming chrome-trace summarizer (accelpipe.traces)."""

from __future__ import annotations

import copy
import gzip
import json
import random
import re
import zipfile
from contextlib import AbstractContextManager
from pathlib import Path

import pytest

from accelpipe import traces
from accelpipe.errors import DataError
from accelpipe.traces import render_markdown, summarize_traces, write_summary
from tests.helpers.chrome_traces import assert_close, stats
from tests.helpers.chrome_traces import x_event as _x

SECTION_NAMES = ("forward", "loss", "backward", "optimizer_step")
WEIRD = 'odd {"} name }{ \\'  # braces, an escaped quote and a final escaped backslash
CPU, GPU = {"pid": 100, "tid": 1}, {"pid": 0, "tid": 7}


# --------------------------------------------------------------------------- writers


def _dump(doc: dict, style: str) -> str:
    """Serialize a trace document the ways producers do."""
    if style == "compact":
        return json.dumps(doc, separators=(",", ":"))
    if style == "wide":  # gaps between events longer than the vectorised check handles
        return json.dumps(doc, indent=10)
    if style == "kineto":  # one key per line, "dur" then a lone comma line, like libkineto
        lines = []
        for ev in doc["traceEvents"]:
            body = json.dumps(ev, indent=4).replace(',\n    "args"', '\n    ,\n    "args"', 1)
            lines.append("  " + body.replace("\n", "\n  "))
        head = {k: v for k, v in doc.items() if k not in ("traceEvents", "traceName")}
        text = json.dumps(head, indent=2)[:-2] + ',\n  "traceEvents": [\n'
        return text + ",\n".join(lines) + f'\n  ],"traceName": {json.dumps(doc["traceName"])} }}'
    return json.dumps(doc, indent=2)


def _write(path: Path, events: list[dict], style: str = "kineto") -> Path:
    doc = {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "Some Accelerator {0}"}],
        "traceEvents": events,
        "traceName": str(path),
        "distributedInfo": {"backend": "nccl", "rank": 0},
    }
    path.write_text(_dump(doc, style))
    return path


def _filler() -> list[dict]:
    """Bulk events that must be skipped without confusing the scanner."""
    return [
        {"ph": "M", "name": "process_name", "pid": 100, "tid": 0, "args": {"name": "python"}},
        _x("cpu_op", "aten::mm", 1105, 5, CPU, **{"Input Dims": [[2, 3], [3, 4]]}),
        _x("cpu_op", 'aten::weird}, {"x', 1140, 2, CPU, **{"Concrete Inputs": ["[1, 2]", "{"]}),
        _x("cpu_op", "aten::nested", 1510, 3, CPU, items=[{"a": 1}, {"b": "}"}], cat="kernel"),
        _x("python_function", "nn.Module: Linear_0", 1101, 50, CPU, **{"Python id": 3}),
        _x("python_function", "C:\\torch\\{nn}\\", 1102, 1, CPU, note='say "}" \\'),
        {"ph": "s", "id": 1, "pid": 100, "tid": 1, "ts": 1130, "cat": "ac2g", "name": "ac2g"},
        {"ph": "f", "id": 1, "pid": 0, "tid": 7, "ts": 1200, "cat": "ac2g", "bp": "e"},
        {"ph": "i", "s": "g", "name": "Record Window End", "pid": "", "tid": "", "ts": 2900},
        _x("Trace", "PyTorch Profiler (0)", 900, 2100, {"pid": "Spans", "tid": "PyTorch Profiler"}),
        {},
    ]


def _cuda_events() -> list[dict]:
    """A two-step CUDA trace whose kernel attribution is worked out by hand below."""
    ann, gpu_ann, rt = "user_annotation", "gpu_user_annotation", "cuda_runtime"
    events = [
        _x(ann, "ProfilerStep#5", 1000, 1000, CPU),
        _x(ann, "ProfilerStep#6", 2000, 800, CPU),
        _x(ann, "forward", 1100, 300, CPU),
        _x(ann, "forward", 2100, 200, CPU),
        _x(ann, "backward", 1500, 400, CPU),
        _x(ann, "backward", 2400, 300, CPU),
        _x(ann, WEIRD, 1120, 50, CPU),  # nested inside the first forward
        # GPU mirrors of the annotations: never sections.
        _x(gpu_ann, "forward", 1150, 400, GPU),
        _x(gpu_ann, "backward", 1600, 300, GPU),
        _x(gpu_ann, "ProfilerStep#5", 1150, 900, GPU),
        # Launches on the CPU thread, kernels on the GPU stream, joined by correlation.
        _x(rt, "cudaLaunchKernel", 1130, 4, CPU, correlation=1),
        _x("kernel", "void k1<{lambda()#1}>()", 1200, 10, GPU, correlation=1),
        _x(rt, "cudaLaunchKernel", 1300, 4, CPU, correlation=2),
        _x("kernel", "k2", 1220, 30, GPU, correlation=2),
        _x(rt, "cudaLaunchKernel", 1600, 4, CPU, correlation=3),
        _x("kernel", "k3", 1700, 50, GPU, correlation=3),
        _x("kernel", "k3b", 1790, 5, GPU, correlation=3),  # two kernels, one launch
        _x(rt, "cudaLaunchKernelExC", 1700, 4, CPU, correlation=4),
        _x("kernel", "k4", 1760, 20, GPU, correlation=4),
        _x(rt, "cudaLaunchKernel", 2100, 4, CPU, correlation=5),  # at the section start
        _x("kernel", "k5", 2200, 5, GPU, correlation=5),
        _x(rt, "cudaSomeFutureLaunch", 2450, 4, CPU, correlation=6),  # unknown name
        _x("kernel", "k6", 2500, 40, GPU, correlation=6),
        _x(rt, "cudaMemcpyAsync", 1310, 4, CPU, correlation=7),
        _x("gpu_memcpy", "Memcpy HtoD", 1250, 100, GPU, correlation=7),
        _x(rt, "cudaLaunchKernel", 1200, 4, {"pid": 100, "tid": 2}, correlation=8),
        _x("kernel", "k8 other thread", 1300, 1000, GPU, correlation=8),
        _x("kernel", "k9 no launch", 1400, 7, GPU, correlation=9),
        _x("cuda_driver", "cuLaunchKernel", 2420, 4, CPU, correlation=10),
        _x("kernel", "k10", 2600, 10, GPU, correlation=10),
        _x(rt, "cudaMemsetAsync", 2110, 4, CPU, correlation=12),
        _x("gpu_memset", "Memset", 2000, 3, GPU, correlation=12),
    ]
    return events + _filler()


CUDA_SECTIONS = {
    "forward": {
        "count": 2,
        "cpu_ms": stats([0.3, 0.2]),
        "kernel_ms": stats([0.040, 0.005]),  # k1 + k2 | k5 (memcpy not a kernel)
        "kernel_span_ms": stats([0.050, 0.005]),  # 1200..1250 | 2200..2205
        # Kernels on any stream inside 1100..1400 (k1, k2, k8 from 1300) | 2100..2300 (k8).
        "device_busy_ms": stats([0.140, 0.200]),
    },
    "backward": {
        "count": 2,
        "cpu_ms": stats([0.4, 0.3]),
        "kernel_ms": stats([0.075, 0.050]),  # k3 + k3b + k4 | k6 + k10
        "kernel_span_ms": stats([0.095, 0.110]),  # 1700..1795 | 2500..2610
        "device_busy_ms": stats([0.400, 0.050]),  # all k8 | k6 + k10
    },
    WEIRD: {
        "count": 1,
        "cpu_ms": stats([0.05]),
        "kernel_ms": stats([0.010]),  # k1: its launch at 1130 is inside 1120..1170
        "kernel_span_ms": stats([0.010]),
        "device_busy_ms": None,  # k1 runs after 1120..1170 ends
    },
}


def _names(filename: str) -> AbstractContextManager:
    """Expect a DataError whose message names the file."""
    return pytest.raises(DataError, match=re.escape(filename))


def _without_paths(summary: dict) -> dict:
    return {k: v for k, v in summary.items() if k != "traces"}


# --------------------------------------------------------------------------- hand-built traces


@pytest.mark.parametrize("style", ["kineto", "compact", "indent", "wide"])
def test_cuda_trace_attributes_kernels_to_sections(tmp_path: Path, style: str) -> None:
    path = _write(tmp_path / "cuda.json", _cuda_events(), style)
    summary = summarize_traces([path])
    assert_close(summary["sections"], CUDA_SECTIONS)
    assert_close(summary["steps"], {"count": 2, "ms": stats([1.0, 0.8])})
    assert summary["device"] == "cuda"
    assert summary["events"] == len(_cuda_events())
    assert summary["bytes"] == path.stat().st_size
    assert summary["traces"] == [str(path)]
    assert_close(
        summary["device_activity"],
        {
            "kernel": {"count": 10, "total_ms": 1.177},
            "gpu_memcpy": {"count": 1, "total_ms": 0.1},
            "gpu_memset": {"count": 1, "total_ms": 0.003},
            "kernels_without_launch": 1,
        },
    )
    json.dumps(summary)  # JSON-serializable


def test_shuffled_events_give_the_same_summary(tmp_path: Path) -> None:
    events = _cuda_events()
    base = summarize_traces([_write(tmp_path / "a.json", events)])
    for seed in range(3):
        shuffled = copy.deepcopy(events)
        random.Random(seed).shuffle(shuffled)
        again = summarize_traces([_write(tmp_path / f"s{seed}.json", shuffled, "compact")])
        assert _without_paths(again) | {"bytes": 0} == _without_paths(base) | {"bytes": 0}


@pytest.mark.parametrize("chunk", [1, 7, 64, 1000])
def test_tiny_read_chunks_give_the_same_summary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    """Events, strings, escapes and the array end straddle every chunk boundary."""
    paths = [_write(tmp_path / f"{s}.json", _cuda_events(), s) for s in ("kineto", "compact")]
    want = [summarize_traces([p]) for p in paths]
    monkeypatch.setattr(traces, "CHUNK_BYTES", chunk)
    assert [summarize_traces([p]) for p in paths] == want


def test_rocm_launch_names_join_and_infer_rocm(tmp_path: Path) -> None:
    events = [
        _x("user_annotation", "forward", 0, 100, CPU),
        _x("cuda_runtime", "hipLaunchKernel", 10, 2, CPU, correlation=1),
        _x("kernel", "Cijk_Ailk_Bljk_SB_MT64x64", 20, 5, GPU, correlation=1),
        _x("hip_runtime", "hipExtModuleLaunchKernel", 30, 2, CPU, correlation=2),
        _x("kernel", "triton_poi_fused_0", 40, 7, GPU, correlation=2),
        _x("cuda_runtime", "hipModuleLaunchKernel", 50, 2, CPU, correlation=3),
        _x("kernel", "void at::native::elementwise<{lambda}>", 60, 3, GPU, correlation=3),
        _x("cuda_runtime", "hipLaunchKernel", 150, 2, CPU, correlation=4),  # outside forward
        _x("kernel", "late", 160, 50, GPU, correlation=4),
    ]
    summary = summarize_traces([_write(tmp_path / "rocm.json", events, "compact")])
    assert summary["device"] == "rocm"
    assert summary["steps"] is None
    assert_close(
        summary["sections"],
        {
            "forward": {
                "count": 1,
                "cpu_ms": stats([0.1]),
                "kernel_ms": stats([0.015]),
                "kernel_span_ms": stats([0.043]),  # 20 .. 63
                "device_busy_ms": stats([0.015]),  # the late kernel is outside 0..100
            }
        },
    )


def test_traces_are_joined_per_file_and_pooled(tmp_path: Path) -> None:
    """Correlation ids restart in every file; instances from all files are pooled."""
    a = _write(tmp_path / "a.json", _cuda_events())
    b = _write(tmp_path / "b.json", _cuda_events(), "compact")
    both = summarize_traces([a, b])
    assert both["traces"] == [str(a), str(b)]
    assert both["events"] == 2 * len(_cuda_events())
    assert both["steps"]["count"] == 4
    forward = both["sections"]["forward"]
    assert forward["count"] == 4
    assert forward["kernel_ms"]["total"] == pytest.approx(2 * 0.045, abs=2e-6)
    assert forward["kernel_span_ms"]["max"] == pytest.approx(0.05, abs=2e-6)


def test_cpu_only_trace_has_no_kernel_stats(tmp_path: Path) -> None:
    events = [_x("user_annotation", "load", 0, 10, CPU), *_filler()]
    summary = summarize_traces([_write(tmp_path / "cpu.json", events)])
    assert summary["device"] == "cpu"
    assert summary["steps"] is None
    assert summary["sections"]["load"]["kernel_ms"] is None
    assert summary["sections"]["load"]["kernel_span_ms"] is None


def test_nan_in_an_event_falls_back_to_the_stdlib_decoder(tmp_path: Path) -> None:
    # Python's json writes NaN (as torch's exporter may); orjson rejects it, the stdlib accepts it.
    events = [_x("user_annotation", "load", 0, 10, CPU, value=float("nan")), *_filler()]
    path = _write(tmp_path / "nan.json", events, style="compact")
    assert b"NaN" in path.read_bytes()
    summary = summarize_traces([path])
    assert summary["sections"]["load"]["count"] == 1
    assert summary["sections"]["load"]["cpu_ms"]["total"] == pytest.approx(0.010)


def test_bare_event_array_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "bare.json"
    path.write_text(json.dumps(_cuda_events()))
    assert_close(summarize_traces([path])["sections"], CUDA_SECTIONS)


# --------------------------------------------------------------------------- compressed forms


def _gzip(src: Path) -> Path:
    dst = src.with_suffix(".json.gz")
    dst.write_bytes(gzip.compress(src.read_bytes()))
    return dst


def _zip(src: Path) -> Path:
    dst = src.with_suffix(".zip")
    with zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.write(src, "trace/" + src.name)
    return dst


def test_gzip_and_zip_forms_match_json(tmp_path: Path) -> None:
    src = _write(tmp_path / "cuda.json", _cuda_events())
    want = _without_paths(summarize_traces([src]))
    for packed in (_gzip(src), _zip(src)):
        assert _without_paths(summarize_traces([packed])) == want


# --------------------------------------------------------------------------- errors


@pytest.fixture
def valid_json(tmp_path: Path) -> Path:
    return _write(tmp_path / "ok.json", _cuda_events(), "compact")


@pytest.mark.parametrize("fraction", [0.0, 0.05, 0.5, 0.97])
def test_truncated_json_raises_data_error_naming_file(valid_json: Path, fraction: float) -> None:
    data = valid_json.read_bytes()
    bad = valid_json.with_name("cut.json")
    bad.write_bytes(data[: int(len(data) * fraction)])
    with _names("cut.json"):
        summarize_traces([bad])


def test_json_cut_after_an_event_or_before_last_brace_raises(valid_json: Path) -> None:
    data = valid_json.read_bytes()
    end_of_event = data.index(b"},{") + 1
    for i, cut in enumerate((end_of_event, data.rindex(b"]") + 1, len(data) - 1)):
        bad = valid_json.with_name(f"cut{i}.json")
        bad.write_bytes(data[:cut])
        with _names(f"cut{i}.json"):
            summarize_traces([bad])


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (b"},{", b"},x{"),  # garbage between events
        (b"},{", b"}{"),  # missing comma
        (b"},{", b"}},{"),  # unbalanced brace
        (b'"traceEvents":[', b'"traceEvents":[,'),  # leading comma
        (b'],"traceName"', b',],"traceName"'),  # trailing comma
        (b'],"traceName"', b'] "traceName"'),  # missing comma between keys
        (b'"traceEvents"', b'"otherEvents"'),  # no traceEvents at all
        (b'"ph":"X"', b'"ph":X'),  # a decoded (annotation) event is invalid JSON
    ],
)
def test_malformed_json_raises_data_error(valid_json: Path, old: bytes, new: bytes) -> None:
    data = valid_json.read_bytes()
    assert old in data
    bad = valid_json.with_name("bad.json")
    bad.write_bytes(data.replace(old, new, 1))
    with _names("bad.json"):
        summarize_traces([bad])


@pytest.mark.parametrize("content", [b"", b"   ", b"hello", b'{"traceEvents": []} x', b"[1, 2]"])
def test_non_trace_content_raises(tmp_path: Path, content: bytes) -> None:
    bad = tmp_path / "odd.json"
    bad.write_bytes(content)
    with _names("odd.json"):
        summarize_traces([bad])


def test_truncated_gzip_raises_data_error(valid_json: Path) -> None:
    data = _gzip(valid_json).read_bytes()
    bad = valid_json.with_name("cut.json.gz")
    bad.write_bytes(data[: len(data) // 2])
    with _names("cut.json.gz"):
        summarize_traces([bad])


def test_truncated_or_ambiguous_zip_raises_data_error(valid_json: Path) -> None:
    data = _zip(valid_json).read_bytes()
    cut = valid_json.with_name("cut.zip")
    cut.write_bytes(data[: len(data) // 2])
    with _names("cut.zip"):
        summarize_traces([cut])
    two = valid_json.with_name("two.zip")
    with zipfile.ZipFile(two, "w") as zf:
        zf.write(valid_json, "a.json")
        zf.write(valid_json, "b.json")
    with _names("two.zip"):
        summarize_traces([two])


def test_missing_file_raises_data_error(tmp_path: Path) -> None:
    with _names("nope.json"):
        summarize_traces([tmp_path / "nope.json"])


def test_empty_path_list_is_a_programming_error() -> None:
    with pytest.raises(ValueError):
        summarize_traces([])


# --------------------------------------------------------------------------- outputs


def test_write_summary_writes_json_markdown_and_png(tmp_path: Path) -> None:
    src = _write(tmp_path / "cuda.json", _cuda_events())
    out = tmp_path / "out"
    summary = write_summary([src], out)
    assert sorted(p.name for p in out.iterdir()) == [
        "step_breakdown.png",
        "summary.json",
        "summary.md",
    ]
    assert json.loads((out / "summary.json").read_text()) == summary
    png = (out / "step_breakdown.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 1000
    markdown = (out / "summary.md").read_text()
    assert "| forward | 2 | 0.250 | 0.500 | 0.02" in markdown
    assert 'odd {"} name }{' in markdown


def test_markdown_escapes_table_cells_and_handles_no_sections() -> None:
    base = {"traces": ["t.json"], "bytes": 10, "events": 1, "device": "cpu", "steps": None}
    one = stats([1.0])
    none = {"kernel_ms": None, "kernel_span_ms": None, "device_busy_ms": None}
    sections = {"a|b": {"count": 1, "cpu_ms": one, **none}}
    text = render_markdown(base | {"sections": sections})
    assert "| a\\|b | 1 | 1.000 | 1.000 | – | – | – |\n" in text
    assert "No `record_function` sections" in render_markdown(base | {"sections": {}})


def test_plot_without_steps_or_sections_is_still_a_png(tmp_path: Path) -> None:
    summary = {"traces": [], "bytes": 0, "events": 0, "device": "cpu", "steps": None}
    png = tmp_path / "empty.png"
    traces.plot_step_breakdown(summary | {"sections": {}}, png)
    assert png.read_bytes().startswith(b"\x89PNG")


def test_plot_takes_dollar_signs_in_names_literally(tmp_path: Path) -> None:
    """A name like `cost $x_$` is a mathtext parse error unless the dollars are escaped."""
    one = stats([1.0])
    section = {"count": 1, "cpu_ms": one, "kernel_ms": one, "kernel_span_ms": one}
    summary = {"traces": [], "bytes": 0, "events": 1, "device": "cuda"}
    summary |= {"steps": {"count": 1, "ms": one}, "sections": {"cost $x_$": section}}
    png = tmp_path / "dollar.png"
    traces.plot_step_breakdown(summary, png)
    assert png.read_bytes().startswith(b"\x89PNG")


# --------------------------------------------------------------------------- a real profile


@pytest.fixture(scope="module")
def real_profile(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, dict[str, tuple[int, float]]]:
    """Profile a tiny model for 3 active steps; return the chrome trace written by
    tensorboard_trace_handler and (count, cpu_time_total µs) per name."""
    torch = pytest.importorskip("torch")
    tmp_path = tmp_path_factory.mktemp("profile")
    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    trace_dir = tmp_path / "tb"
    # tensorboard_trace_handler calls export_chrome_trace into trace_dir/*.pt.trace.json.
    on_ready = torch.profiler.tensorboard_trace_handler(str(trace_dir))

    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=1, warmup=1, active=3, repeat=1),
        on_trace_ready=on_ready,
    ) as prof:
        for _ in range(6):
            x = torch.randn(8, 16)
            with record_function("forward"):
                y = model(x)
            with record_function("loss"):
                loss = y.pow(2).mean()
            with record_function("backward"):
                loss.backward()
            with record_function("optimizer_step"):
                opt.step()
                opt.zero_grad()
            prof.step()
    averages = {e.key: (e.count, e.cpu_time_total) for e in prof.key_averages()}
    (chrome,) = trace_dir.glob("*.pt.trace.json")
    return chrome, averages


def test_real_profile_matches_key_averages(real_profile: tuple) -> None:
    chrome, averages = real_profile
    summary = summarize_traces([chrome])
    assert summary["device"] == "cpu"
    # The trace stores µs with 3 decimals and we round ms to 6 decimals: both are 1 ns, so
    # totals may differ from key_averages' ns sums by about 1 ns per instance.
    for name in SECTION_NAMES:
        count, cpu_us = averages[name]
        section = summary["sections"][name]
        assert section["count"] == count == 3
        assert section["cpu_ms"]["total"] * 1000 == pytest.approx(cpu_us, abs=0.001 * count + 0.001)
        assert section["kernel_ms"] is None
    step_count, step_us = averages["ProfilerStep*"]
    assert summary["steps"]["count"] == step_count == 3
    assert summary["steps"]["ms"]["total"] * 1000 == pytest.approx(step_us, abs=0.004)


def test_real_profile_json_gz_zip_agree(real_profile: tuple) -> None:
    chrome = real_profile[0]
    want = _without_paths(summarize_traces([chrome]))
    assert want["events"] > 100 and want["sections"]
    for packed in (_gzip(chrome), _zip(chrome)):
        assert _without_paths(summarize_traces([packed])) == want
