"""The trace summarizer on the event names and categories each backend's profiler writes.

Hand-built traces follow what kineto writes for CUDA (CUPTI) and ROCm (roctracer /
rocprofiler-sdk), and what the Gaudi PyTorch bridge's kineto plugin writes for
``ProfilerActivity.HPU`` (read from its source: device ops are ``kernel`` events on the device
pid with recipe args and no correlation; Synapse and bridge rows are ``hpu_op`` and
``privateuse1_runtime``). A real CPU trace comes from torch.profiler on a tiny SwinUNETR.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from accelpipe import traces
from accelpipe.traces import reader, summarize_traces
from tests.helpers.chrome_traces import assert_close, section, stats, step_stats
from tests.helpers.chrome_traces import x_event as _x

HOST = {"pid": 4242, "tid": 4242}
# PyTorch's autograd engine runs backward (and launches its kernels) on a worker thread.
AUTOGRAD = {"pid": 4242, "tid": 4250}
NVIDIA = [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85045379072}]
AMD = [{"id": 0, "name": "AMD Instinct MI300X", "gcnArchName": "gfx942:sramecc+:xnack-"}]


def _flow(corr: int, src: dict, dst: dict, ts: float, dst_ts: float) -> list[dict]:
    """The ac2g arrow kineto draws from a launch to its kernel (bulk: skipped)."""
    base = {"id": corr, "cat": "ac2g", "name": "ac2g"}
    return [
        {"ph": "s", **base, **src, "ts": ts},
        {"ph": "f", **base, **dst, "ts": dst_ts, "bp": "e"},
    ]


def _cpu_ops(where: dict, start: float, n: int = 3) -> list[dict]:
    ops = [
        _x("cpu_op", f"aten::op{i}", start + i, 0.5, where, **{"External id": i}) for i in range(n)
    ]
    return [
        *ops,
        _x("python_function", "torch/nn/modules/module.py(1): _call_impl", start, 3, where),
    ]


def _write(
    path: Path, events: list[dict], props: list | None = None, indent: int | None = 1
) -> Path:
    doc: dict = {"schemaVersion": 1}
    if props is not None:
        doc["deviceProperties"] = props
    doc |= {"traceEvents": events, "traceName": str(path)}
    path.write_text(json.dumps(doc, indent=indent))
    return path


def _activity(kernels: int, kernel_ms: float, memcpy=(0, 0.0), orphans: int = 0) -> dict:
    return {
        "kernel": {"count": kernels, "total_ms": kernel_ms},
        "gpu_memcpy": {"count": memcpy[0], "total_ms": memcpy[1]},
        "gpu_memset": {"count": 0, "total_ms": 0.0},
        "kernels_without_launch": orphans,
    }


# --------------------------------------------------------------------------- CUDA

GPU, GPU_B = {"pid": 0, "tid": 7}, {"pid": 0, "tid": 20}


def _cuda_events() -> list[dict]:
    """One step; each launch name CUPTI reports launches exactly one section's kernels."""
    ann, rt, drv, mirror = "user_annotation", "cuda_runtime", "cuda_driver", "gpu_user_annotation"
    ev = [
        _x(ann, "ProfilerStep#10", 0, 1000, HOST),
        _x(ann, "step", 10, 980, HOST),
        _x(ann, "forward", 20, 280, HOST),
        _x(ann, "loss", 310, 90, HOST),
        _x(ann, "backward", 410, 490, HOST),
        # forward: four launch flavours, kernels back to back on stream 7 (100..185)
        _x(rt, "cudaLaunchKernel", 30, 5, HOST, cbid=211, correlation=1),
        _x("kernel", "vectorized_elementwise_kernel<4>", 100, 40, GPU, stream=7, correlation=1),
        _x(rt, "cudaLaunchKernelExC", 40, 5, HOST, cbid=430, correlation=2),
        _x("kernel", "sm90_xmma_gemm_bf16bf16_bf16f32", 140, 10, GPU, correlation=2),
        _x(drv, "cuLaunchKernel", 50, 5, HOST, cbid=307, correlation=3),
        _x("kernel", "triton_poi_fused_add_0", 150, 30, GPU, correlation=3),
        _x(rt, "cudaLaunchKernel_ptsz", 60, 5, HOST, correlation=4),
        _x("kernel", "k_ptsz", 180, 5, GPU, correlation=4),
        # loss: its kernels only start when loss's CPU interval has ended (400..425)
        _x(rt, "cudaLaunchCooperativeKernel", 320, 5, HOST, correlation=5),
        _x("kernel", "cooperative_reduce", 400, 20, GPU, correlation=5),
        _x(drv, "cuLaunchKernelEx", 330, 5, HOST, correlation=6),
        _x("kernel", "triton_red_fused_mean_1", 420, 5, GPU, correlation=6),
        # backward: a CUDA graph (three kernels share the cudaGraphLaunch correlation; launched
        # from the autograd thread), a copy, a stream sync (a device row, not a kernel) and
        # one kernel that runs after the step.
        _x(rt, "cudaGraphLaunch", 420, 8, AUTOGRAD, correlation=7),
        _x("kernel", "graph_k0", 500, 50, GPU_B, correlation=7),
        _x("kernel", "graph_k1", 560, 40, GPU_B, correlation=7),
        _x("kernel", "graph_k2", 600, 10, GPU_B, correlation=7),
        _x(rt, "cudaMemcpyAsync", 430, 5, HOST, correlation=8),
        _x("gpu_memcpy", "Memcpy DtoH (Device -> Pinned)", 610, 40, GPU, correlation=8),
        _x(rt, "cudaStreamSynchronize", 440, 200, HOST, correlation=9),
        _x("cuda_sync", "Stream Sync", 640, 10, {"pid": 0, "tid": 1000007}, correlation=9),
        _x(rt, "cudaLaunchKernel", 800, 5, HOST, correlation=10),
        _x("kernel", "late_kernel", 950, 50, GPU, correlation=10),
        # GPU mirrors of the annotations
        _x(mirror, "ProfilerStep#10", 99, 902, GPU),
        _x(mirror, "step", 99, 902, GPU),
        _x(mirror, "forward", 99, 87, GPU),
        _x(mirror, "loss", 399, 27, GPU),
        _x(mirror, "backward", 499, 112, GPU_B),
        _x(mirror, "backward", 949, 52, GPU),
    ]
    for corr, src, at, kernel_ts in ((1, HOST, 30, 100), (7, AUTOGRAD, 420, 500)):
        ev += _flow(corr, src, GPU, at, kernel_ts)
    ev += _flow(10, HOST, GPU, 800, 950)
    return ev + _cpu_ops(HOST, 21) + _cpu_ops(HOST, 411)


CUDA_SECTIONS = {
    "step": section(1, [0.98], [0.26], [0.9], [0.25]),  # busy: 85 + 25 + 100 + 40 (to 990)
    "backward": section(1, [0.49], [0.15], [0.5], [0.115]),  # busy: 15 (loss's) + 100
    "forward": section(1, [0.28], [0.085], [0.085], [0.085]),
    "loss": section(1, [0.09], [0.025], [0.025], None),  # its kernels ran after it
}


def test_cuda_every_launch_name_joins_its_kernels(tmp_path: Path) -> None:
    summary = summarize_traces([_write(tmp_path / "cuda.json", _cuda_events(), NVIDIA)])
    assert summary["device"] == "cuda"
    assert list(summary["sections"]) == ["step", "backward", "forward", "loss"]
    assert_close(summary["sections"], CUDA_SECTIONS)
    assert_close(summary["steps"], step_stats([1.0]))
    assert_close(summary["device_activity"], _activity(10, 0.26, memcpy=(1, 0.04)))


def test_cuda_is_inferred_from_launch_names_despite_amd_properties(tmp_path: Path) -> None:
    summary = summarize_traces([_write(tmp_path / "cuda.json", _cuda_events(), AMD)])
    assert summary["device"] == "cuda"  # names beat a (wrong) deviceProperties entry


# --------------------------------------------------------------------------- ROCm

ROCM_GPU = {"pid": 2, "tid": 1}  # kineto on ROCm: pid = device index, tid = stream


def _rocm_events(runtime_cat: str) -> list[dict]:
    ann, mirror = "user_annotation", "gpu_user_annotation"
    return [
        _x(ann, "ProfilerStep#3", 0, 500, HOST),
        _x(ann, "forward", 10, 190, HOST),
        _x(ann, "backward", 210, 240, HOST),
        _x(runtime_cat, "hipLaunchKernel", 20, 4, HOST, correlation=11),
        _x("kernel", "Cijk_Ailk_Bljk_BBS_BH", 50, 30, ROCM_GPU, device=2, correlation=11),
        _x(runtime_cat, "hipExtModuleLaunchKernel", 30, 4, HOST, correlation=12),
        _x("kernel", "triton_poi_fused_relu_0", 80, 15, ROCM_GPU, correlation=12),
        _x(runtime_cat, "hipMemcpyWithStream", 40, 30, HOST, correlation=13),
        _x("gpu_memcpy", "Memcpy HostToDevice (Host -> Device)", 95, 25, ROCM_GPU, correlation=13),
        # backward's launches come from the autograd thread (as in the MI250 trace)
        _x(runtime_cat, "hipModuleLaunchKernel", 220, 4, AUTOGRAD, correlation=14),
        _x("kernel", "elementwise_kernel<512, 1>", 250, 50, ROCM_GPU, correlation=14),
        _x(runtime_cat, "hipExtModuleLaunchKernel", 230, 4, AUTOGRAD, correlation=15),
        _x("kernel", "triton_red_fused_1", 300, 10, ROCM_GPU, correlation=15),
        _x(runtime_cat, "hipLaunchKernel", 240, 4, HOST, correlation=16),
        _x("kernel", "late_kernel", 460, 20, ROCM_GPU, correlation=16),
        _x(mirror, "forward", 49, 47, ROCM_GPU),
        _x(mirror, "backward", 249, 232, ROCM_GPU),
        *_flow(11, HOST, ROCM_GPU, 20, 50),
        *_cpu_ops(HOST, 11),
    ]


@pytest.mark.parametrize("props", [AMD, NVIDIA, None], ids=["amd-props", "wrong-props", "none"])
@pytest.mark.parametrize("runtime_cat", ["cuda_runtime", "hip_runtime"])
def test_rocm_hip_launches_join_and_infer_rocm(
    tmp_path: Path, runtime_cat: str, props: list | None
) -> None:
    summary = summarize_traces([_write(tmp_path / "rocm.json", _rocm_events(runtime_cat), props)])
    assert summary["device"] == "rocm"
    assert_close(
        summary["sections"],
        {
            "backward": section(1, [0.24], [0.08], [0.23], [0.06]),  # span 250..480
            "forward": section(1, [0.19], [0.045], [0.045], [0.045]),
        },
    )
    assert_close(summary["steps"], step_stats([0.5]))
    assert_close(summary["device_activity"], _activity(5, 0.125, memcpy=(1, 0.025)))


# --------------------------------------------------------------------------- CPU only


def test_cpu_only_trace_on_a_gpu_machine(tmp_path: Path) -> None:
    """deviceProperties lists the machine's GPUs even when only the CPU was profiled."""
    ann = "user_annotation"
    events = [
        _x(ann, "ProfilerStep#1", 0, 100, HOST),
        _x(ann, "ProfilerStep#2", 100, 300, HOST),
        _x(ann, "loader_first", 1, 9, HOST),
        _x(ann, "step", 10, 80, HOST),
        _x(ann, "loader_next", 101, 19, HOST),
        _x(ann, "step", 120, 270, HOST),
        *_cpu_ops(HOST, 11),
        {"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", **HOST, "ts": 5},
    ]
    summary = summarize_traces([_write(tmp_path / "cpu.json", events, NVIDIA)])
    assert summary["device"] == "cpu"
    assert_close(
        summary["sections"],
        {
            "step": section(2, [0.08, 0.27]),
            "loader_next": section(1, [0.019]),
            "loader_first": section(1, [0.009]),
        },
    )
    assert_close(summary["steps"], step_stats([0.1, 0.3]))
    assert_close(summary["device_activity"], _activity(0, 0.0))


# --------------------------------------------------------------------------- Gaudi (HPU)

HPU_DEVICE = 1
TPC, TPC_B, MME, EDMA = ({"pid": HPU_DEVICE, "tid": t} for t in (7000, 7001, 6000, 4000))
SYNAPSE_HOST = {"pid": 3, "tid": 1}  # the bridge puts Synapse host API rows on their own pid
BRIDGE = {"pid": 4242 + 100, "tid": 4250}  # bridge logs: getpid() + offset, real thread id
RECIPE = {"device": HPU_DEVICE, "dataType": "bf16", "recipeId": 7, "recipeName": "graph_7"}
RECIPE |= {"streamHandle": "0x5", "eventHandle": "0x0", "hidden": "1"}


def _hpu_step(base: float, n: int) -> list[dict]:
    """One lazy-mode step: the graph runs on the device while backward's mark_step waits."""
    ann = "user_annotation"
    return [
        _x(ann, f"ProfilerStep#{n}", base, 1000, HOST),
        _x(ann, "step", base + 10, 890, HOST),
        _x(ann, "forward", base + 20, 180, HOST),
        _x(ann, "loss", base + 210, 50, HOST),
        _x(ann, "backward", base + 270, 530, HOST),
        _x("privateuse1_runtime", "LaunchRecipeTask", base + 700, 60, BRIDGE, index="3"),
        _x("hpu_op", "enqueueWithExternalEventsExt", base + 720, 20, SYNAPSE_HOST, **RECIPE),
        _x("kernel", "add_fwd_bf16", base + 300, 100, TPC, **RECIPE),
        _x("kernel", "gemm", base + 350, 150, MME, **RECIPE),
        _x("kernel", "mul_bwd_bf16", base + 600, 50, TPC_B, **RECIPE),
        _x("kernel", "gemm_dw", base + 780, 70, MME, **RECIPE),
        _x("gpu_memcpy", "memcpy host to device", base + 280, 10, EDMA, **RECIPE),
        _x("hpu_op", "edma_transpose_prep", base + 290, 5, {"pid": HPU_DEVICE, "tid": 4001}),
        *_cpu_ops(HOST, base + 21),
        {"ph": "s", "id": n, "cat": "ac2g", "name": "enqueue", **SYNAPSE_HOST, "ts": base + 720},
        {"ph": "f", "id": n, "cat": "ac2g", "name": "enqueue", **TPC, "ts": base + 300, "bp": "e"},
    ]


def _hpu_events() -> list[dict]:
    meta = [
        {"name": "process_name", "ph": "M", "pid": HPU_DEVICE, "tid": 0, "args": {"name": "HPU"}},
        {"name": "thread_name", "ph": "M", **TPC, "args": {"name": "TPC 0"}},
    ]
    late = _x("kernel", "reduce_fwd", 950, 30, TPC, **RECIPE)  # outside "step"
    return meta + _hpu_step(0, 3) + _hpu_step(1000, 4) + [late]


# Device busy per step: union of 300..500, 600..650, 780..850 = 320 µs; backward (270..800)
# sees 200 + 50 + 20. forward and loss overlap no device work (lazy mode).
HPU_SECTIONS = {
    "step": section(2, [0.89, 0.89], busy=[0.32, 0.32]),
    "backward": section(2, [0.53, 0.53], busy=[0.27, 0.27]),
    "forward": section(2, [0.18, 0.18]),
    "loss": section(2, [0.05, 0.05]),
}


def test_hpu_trace_counts_device_ops_and_attributes_them_by_overlap(tmp_path: Path) -> None:
    summary = summarize_traces([_write(tmp_path / "hpu.json", _hpu_events(), [])])
    assert summary["device"] == "hpu"
    assert_close(summary["sections"], HPU_SECTIONS)
    assert_close(summary["steps"], step_stats([1.0, 1.0]))
    # 4 ops per step + 1; none carries a correlation, so none joins a launch.
    assert_close(summary["device_activity"], _activity(9, 0.77, memcpy=(2, 0.02), orphans=9))
    markdown = traces.render_markdown(summary)
    assert "Kernels not joined to a launch (no correlation): 9 of 9" in markdown
    assert "| step | 2 | 0.890 | 1.780 | 0.890 | – | – | 0.320 |" in markdown


@pytest.mark.parametrize(
    ("kernel_args", "extra", "props"),
    [
        (RECIPE, [], None),  # recipe args on device ops
        ({"device": 1}, [_x("hpu_op", "run", 0, 1, SYNAPSE_HOST)], None),  # an hpu_op row
        ({"device": 1}, [_x("privateuse1_runtime", "launch", 0, 1, BRIDGE)], None),
        ({"device": 1}, [], [{"name": "GAUDI2", "id": 0}]),  # deviceProperties
    ],
    ids=["recipe-args", "hpu_op", "privateuse1", "props"],
)
def test_hpu_is_inferred_from_any_one_hint(
    tmp_path: Path, kernel_args: dict, extra: list, props: list | None
) -> None:
    events = [_x("user_annotation", "step", 0, 100, HOST)]
    events += [_x("kernel", "tpc_op", 10, 20, TPC, **kernel_args), *extra]
    assert summarize_traces([_write(tmp_path / "h.json", events, props)])["device"] == "hpu"


def test_device_events_without_any_hint_are_taken_for_cuda(tmp_path: Path) -> None:
    """The documented fallback: kernels with no telling name, category, args or properties."""
    events = [_x("user_annotation", "step", 0, 100, HOST), _x("kernel", "k", 10, 20, TPC, device=1)]
    summary = summarize_traces([_write(tmp_path / "p.json", events, [{"name": "?"}])])
    assert summary["device"] == "cuda"
    assert_close(summary["sections"], {"step": section(1, [0.1], busy=[0.02])})
    assert summary["device_activity"]["kernels_without_launch"] == 1


def test_hpu_ops_with_a_correlation_join_like_cuda_kernels(tmp_path: Path) -> None:
    """Should a bridge write correlations, a host hpu_op with the id is the launch."""
    events = [
        _x("user_annotation", "forward", 0, 100, HOST),
        _x("hpu_op", "LaunchRecipeTask", 10, 5, HOST, correlation=5),
        _x("kernel", "add_fwd_bf16", 150, 20, TPC, correlation=5, **RECIPE),
        _x("kernel", "gemm", 160, 40, MME, correlation=5, **RECIPE),
    ]
    summary = summarize_traces([_write(tmp_path / "hpu.json", events)])
    assert summary["device"] == "hpu"
    # The kernels ran after forward's CPU interval: kernel time, but no busy overlap.
    assert_close(summary["sections"], {"forward": section(1, [0.1], [0.06], [0.05])})
    assert summary["device_activity"]["kernels_without_launch"] == 0


# --------------------------------------------------------------------------- counted once


@pytest.mark.parametrize(
    ("mirror_cat", "row"),
    [
        ("gpu_user_annotation", GPU),  # CUDA / ROCm
        ("gpu_user_annotation", GPU_B),  # a second stream's mirror of the same annotation
        ("hpu_user_annotation", TPC),  # a device mirror under another prefix
        ("user_annotation", TPC),  # a mirror with the CPU category, on a device row
    ],
)
def test_sections_are_counted_once_despite_device_mirrors(
    tmp_path: Path, mirror_cat: str, row: dict
) -> None:
    events = []
    for i, base in enumerate((0, 1000, 2000)):
        events += [
            _x("user_annotation", "forward", base, 100 + i, HOST),
            _x(mirror_cat, "forward", base + 200, 50, row),  # device-side copy: never a section
            _x("kernel", "k", base + 200, 50, row),
        ]
    summary = summarize_traces([_write(tmp_path / "m.json", events)])
    assert summary["sections"]["forward"]["count"] == 3
    assert_close(summary["sections"]["forward"]["host_busy_ms"], stats([0.1, 0.101, 0.102]))
    assert list(summary["sections"]) == ["forward"]


def test_a_host_row_with_a_device_rows_ids_keeps_its_sections(tmp_path: Path) -> None:
    """Python as pid 1 in a container, device 1's stream 1: the same pid/tid. Its launches
    show it is a host row, so its annotations stay sections."""
    row = {"pid": 1, "tid": 1}
    events = [
        _x("user_annotation", "forward", 0, 100, row),
        _x("cuda_runtime", "cudaLaunchKernel", 10, 5, row, correlation=1),
        _x("kernel", "k", 50, 20, row, correlation=1),
        _x("gpu_user_annotation", "forward", 49, 22, row),
    ]
    summary = summarize_traces([_write(tmp_path / "pid1.json", events)])
    assert_close(summary["sections"], {"forward": section(1, [0.1], [0.02], [0.02], [0.02])})


# --------------------------------------------------------------------------- streaming


@pytest.mark.parametrize("chunk", [1, 13, 97])
def test_vendor_traces_give_the_same_summary_in_tiny_chunks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    paths = [
        _write(tmp_path / "cuda.json", _cuda_events(), NVIDIA, indent=None),
        _write(tmp_path / "rocm.json", _rocm_events("hip_runtime"), AMD),
        _write(tmp_path / "hpu.json", _hpu_events(), [], indent=None),
    ]
    want = [summarize_traces([p]) for p in paths]
    monkeypatch.setattr(reader, "CHUNK_BYTES", chunk)
    assert [summarize_traces([p]) for p in paths] == want


# --------------------------------------------------------------------------- a real CPU trace


@pytest.fixture(scope="module")
def swinunetr_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two epochs of two steps of a tiny SwinUNETR, profiled with wait 1, warmup 1, active 2:
    the active steps are the second epoch's, so the trace holds one loader_first, one
    loader_next and two of each other section (the sections torch_trainer records). Returns
    the json.gz export_chrome_trace wrote. (key_averages is not asked for: it costs seconds,
    and test_traces checks the times against it.)
    """
    torch = pytest.importorskip("torch")
    nets = pytest.importorskip("monai.networks.nets")
    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    torch.manual_seed(0)
    # 32^3 leaves 1x1x1 voxels at the bottleneck, which instance norm rejects (the workload
    # keeps instance norm and a side >= 64); group norm keeps this profile small and fast.
    model = nets.SwinUNETR(
        in_channels=1,
        out_channels=1,
        feature_size=12,
        spatial_dims=3,
        depths=(1, 1, 1, 1),
        norm_name=("group", {"num_groups": 4}),
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    images, labels = torch.randn(2, 1, 32, 32, 32), torch.rand(2, 1, 32, 32, 32)
    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(images, labels), batch_size=1
    )
    path = tmp_path_factory.mktemp("swin") / "trace.json.gz"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # steadier (and on a busy machine faster) than competing threads
    try:
        with profile(
            activities=[ProfilerActivity.CPU],
            schedule=schedule(wait=1, warmup=1, active=2, repeat=1),
            on_trace_ready=lambda prof: prof.export_chrome_trace(str(path)),
        ) as prof:
            for _epoch in range(2):
                batches = iter(loader)
                for i in range(len(loader)):
                    with record_function("loader_first" if i == 0 else "loader_next"):
                        image, label = next(batches)
                    with record_function("step"):
                        opt.zero_grad(set_to_none=True)
                        with record_function("forward"):
                            pred = model(image)
                        with record_function("loss"):
                            loss = torch.nn.functional.mse_loss(pred, label)
                        with record_function("backward"):
                            loss.backward()
                        with record_function("optimizer_step"):
                            opt.step()
                    prof.step()
    finally:
        torch.set_num_threads(threads)
    return path


def test_real_swinunetr_cpu_trace(swinunetr_trace: Path) -> None:
    path = swinunetr_trace
    assert path.read_bytes()[:2] == b"\x1f\x8b"
    summary = summarize_traces([path])
    assert summary["device"] == "cpu"
    assert summary["bytes"] > path.stat().st_size and summary["events"] > 1000
    sections = summary["sections"]
    counts = {"loader_first": 1, "loader_next": 1, "step": 2, "forward": 2, "loss": 2}
    counts |= {"backward": 2, "optimizer_step": 2}
    for name, count in counts.items():
        section = sections[name]
        assert section["count"] == count, name
        assert section["host_busy_ms"]["min"] > 0, name
        assert section["kernel_ms"] is None and section["kernel_span_ms"] is None
        assert section["device_busy_ms"] is None
    # forward, loss, backward and optimizer_step are nested in step; step and the loader in
    # ProfilerStep#N.
    nested = sum(
        sections[n]["host_busy_ms"]["total"]
        for n in ("forward", "loss", "backward", "optimizer_step")
    )
    assert sections["step"]["host_busy_ms"]["total"] > nested
    assert sections["backward"]["host_busy_ms"]["max"] < sections["step"]["host_busy_ms"]["max"]
    steps = summary["steps"]
    assert steps["count"] == 2 and steps["ms"]["min"] > 0
    loaders = (
        sections["loader_first"]["host_busy_ms"]["total"]
        + sections["loader_next"]["host_busy_ms"]["total"]
    )
    assert steps["ms"]["total"] > sections["step"]["host_busy_ms"]["total"] + loaders
    # The breakdown: one thread, so the engine's sections (disjoint, all inside the steps)
    # keep their whole time; zero_grad (in step, outside its parts) its own; step the rest
    # of itself; and the parts add up to the step.
    breakdown = summary["step_breakdown"]
    shares = breakdown["sections_ms"]
    assert breakdown["steps"] == 2
    for name in counts.keys() - {"step"}:
        assert shares[name] == pytest.approx(sections[name]["host_busy_ms"]["total"] / 2, abs=2e-6)
    zero_grad = "Optimizer.zero_grad#SGD.zero_grad"
    assert shares[zero_grad] == pytest.approx(sections[zero_grad]["host_busy_ms"]["mean"], abs=2e-6)
    inside = sum(shares[n] for n in ("forward", "loss", "backward", "optimizer_step", zero_grad))
    step_alone = sections["step"]["host_busy_ms"]["mean"] - inside
    assert shares["step"] == pytest.approx(step_alone, abs=1e-5)
    total = sum(shares.values()) + breakdown["no_section_ms"]
    assert total == pytest.approx(steps["ms"]["mean"], abs=1e-9)
    assert summary["device_activity"]["kernel"]["count"] == 0
    assert summary["device_activity"]["kernels_without_launch"] == 0
