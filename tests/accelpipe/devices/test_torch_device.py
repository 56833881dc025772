"""The device layer on this machine: cpu works, missing accelerator runtimes fail at once."""

from __future__ import annotations

import importlib
import importlib.util
import json
import types
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

from accelpipe.config import registry
from accelpipe.config.schema import validate
from accelpipe.core.errors import BackendUnavailableError, ConfigError
from accelpipe.devices import BACKENDS, resolve_precision, torch_device, workload_precision
from accelpipe.plan import preflight
from tests.helpers.settings import train_job_slice

pytestmark = pytest.mark.torch


def test_cpu_defaults_to_fp32_without_autocast() -> None:
    device = torch_device.resolve("cpu")
    assert device.torch_device == torch.device("cpu")
    assert device.precision == "fp32" and device.autocast_dtype is None
    assert device.name.startswith("cpu (")
    assert not device.lazy_mode
    device.mark_step()  # a no-op off Gaudi


def test_cpu_bf16_autocast_runs_matmuls_in_bf16() -> None:
    device = torch_device.resolve("cpu", precision="bf16")
    with device.autocast():
        out = torch.nn.Linear(4, 4)(torch.randn(2, 4))
    assert out.dtype == torch.bfloat16


def test_channels_last_applies_to_models_and_image_batches() -> None:
    device = torch_device.resolve("cpu", channels_last=True)
    model = device.prepare_model(torch.nn.Conv2d(4, 8, 3))
    assert model.weight.is_contiguous(memory_format=torch.channels_last)
    image = device.to_device(torch.randn(2, 4, 8, 8), image=True)
    assert image.is_contiguous(memory_format=torch.channels_last)
    label = device.to_device(torch.zeros(2, 1, 8, 8))
    assert label.is_contiguous()


def test_adamw_on_cpu_is_torch_adamw() -> None:
    params = [torch.nn.Parameter(torch.zeros(2))]
    assert type(torch_device.resolve("cpu").adamw(params, 1e-3, 0.0)) is torch.optim.AdamW


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
@pytest.mark.parametrize(("backend", "needs"), [("cuda", "CUDA"), ("rocm", "ROCm/HIP")])
def test_missing_gpu_runtime_fails_with_a_clear_message(backend: str, needs: str) -> None:
    with pytest.raises(BackendUnavailableError, match=f"backend '{backend}'") as err:
        torch_device.resolve(backend)
    assert needs in str(err.value)


@pytest.mark.skipif(importlib.util.find_spec("habana_frameworks") is not None, reason="Gaudi stack")
def test_missing_habana_stack_fails_with_a_clear_message() -> None:
    with pytest.raises(BackendUnavailableError, match="habana_frameworks"):
        torch_device.resolve("gaudi")


def test_unknown_backend_and_precision_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="'backend'"):
        torch_device.resolve("tpu")
    with pytest.raises(ConfigError, match="'precision'"):
        torch_device.resolve("cpu", precision="fp8")


def test_profiler_activities_follow_the_backend() -> None:
    assert torch_device.resolve("cpu").profiler_activities() == [
        torch.profiler.ProfilerActivity.CPU
    ]


def test_a_workload_may_redefine_auto_precision_per_backend() -> None:
    from accelpipe.workloads.swinunetr.workload import AUTO_PRECISION

    assert AUTO_PRECISION == {"rocm": "fp16"}  # the seed measured bf16 slower on MI300X
    assert torch_device.resolve("cpu", "auto", auto={"cpu": "bf16"}).precision == "bf16"
    assert torch_device.resolve("cpu", "auto", auto=AUTO_PRECISION).precision == "fp32"
    assert (
        torch_device.resolve("cpu", "fp16", auto={"cpu": "bf16"}).precision == "fp16"
    )  # explicit wins


def test_loss_scaling_only_for_fp16() -> None:
    assert torch_device.resolve("cpu", "fp16").grad_scaler().is_enabled()
    assert not torch_device.resolve("cpu", "bf16").grad_scaler().is_enabled()
    assert not torch_device.resolve("cpu", "fp32").grad_scaler().is_enabled()


def _fake_gpu(backend: str) -> torch_device.Device:
    """A device of `backend` as far as the profiler settings go (no GPU here)."""
    return torch_device.Device(backend, torch.device("cpu"), f"fake {backend}", "fp32")


def test_profiler_table_sorts_by_device_time_where_the_device_is_profiled() -> None:
    assert torch_device.resolve("cpu").profiler_sort_key() == "self_cpu_time_total"
    for backend in ("cuda", "rocm"):
        assert _fake_gpu(backend).profiler_sort_key() == "self_device_time_total"


def test_a_gaudi_profile_records_the_hpu_where_this_torch_has_its_activity() -> None:
    """torch_device.profiler_device_activity: ProfilerActivity.HPU is in some supported torch
    releases and not others (make test-torch26 runs this without it). Either way the gaudi
    device's activities start a profiler that records the host, and the table sorts by
    device time only where the device is in them."""
    gaudi = _fake_gpu("gaudi")
    hpu = getattr(torch.profiler.ProfilerActivity, "HPU", None)
    assert torch_device.profiler_device_activity("gaudi") is hpu
    assert torch_device.profiler_device_activity("cpu") is None
    assert gaudi.profiler_activities() == [torch.profiler.ProfilerActivity.CPU] + (
        [hpu] if hpu is not None else []
    )
    sort_key = gaudi.profiler_sort_key()
    assert sort_key == ("self_cpu_time_total" if hpu is None else "self_device_time_total")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "HPU is not available")  # no Gaudi here
        with (
            torch.profiler.profile(activities=gaudi.profiler_activities()) as prof,
            torch.profiler.record_function("forward"),
        ):
            torch.ones(8, 8) @ torch.ones(8, 8)
    assert "forward" in prof.key_averages().table(sort_by=sort_key, row_limit=5)


def _record_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    """torch.cuda.memory's recorder and dump, faked: the calls, in order."""
    calls: list[tuple] = []

    def record(enabled: str | None = "all", **kwargs: object) -> None:
        calls.append(("record", enabled, kwargs))

    def dump(filename: str) -> None:
        calls.append(("dump", filename))
        Path(filename).write_bytes(b"snapshot")

    monkeypatch.setattr(torch.cuda.memory, "_record_memory_history", record)
    monkeypatch.setattr(torch.cuda.memory, "_dump_snapshot", dump)
    return calls


def test_memory_history_is_a_no_op_on_cpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _record_calls(monkeypatch)
    with torch_device.resolve("cpu").memory_history() as history:
        assert not history.recording
        assert history.dump(tmp_path / "snapshot.pickle") is False
    assert calls == [] and not (tmp_path / "snapshot.pickle").exists()


@pytest.mark.parametrize("backend", ["cuda", "rocm"])
def test_memory_history_records_until_the_dump(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    """The calls PyTorch's memory-snapshot page prescribes, in its order (fakes: no GPU)."""
    calls = _record_calls(monkeypatch)
    path = tmp_path / "snapshot.pickle"
    with _fake_gpu(backend).memory_history(max_entries=7) as history:
        assert history.recording and calls == [("record", "all", {"max_entries": 7})]
        assert history.dump(path) is True
        assert history.dump(tmp_path / "again.pickle") is False  # once: recording stopped
    assert calls[1:] == [("dump", str(path)), ("record", None, {})]
    assert path.exists() and not (tmp_path / "again.pickle").exists()


def test_memory_history_stops_when_left_without_a_dump(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _record_calls(monkeypatch)
    with pytest.raises(RuntimeError), _fake_gpu("cuda").memory_history():
        raise RuntimeError("training failed")
    assert [c[:2] for c in calls] == [("record", "all"), ("record", None)]


def test_peak_memory_is_none_on_cpu_and_the_allocators_peak_elsewhere(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """cuda and rocm read torch.cuda's allocator, gaudi Habana's torch.hpu (faked here)."""
    assert torch_device.resolve("cpu").peak_memory() == (None, None)
    asked: list[torch.device] = []

    def peak(device: torch.device) -> int:
        asked.append(device)
        return 1234

    monkeypatch.setattr(torch.cuda, "max_memory_allocated", peak)
    monkeypatch.setattr(
        torch, "hpu", types.SimpleNamespace(max_memory_allocated=peak), raising=False
    )
    for backend, api in (("cuda", "cuda"), ("rocm", "cuda"), ("gaudi", "hpu")):
        device = torch_device.Device(backend, torch.device("cuda", 1), "fake", "bf16")
        assert device.peak_memory() == (1234, f"torch.{api}.max_memory_allocated")
    assert asked == [torch.device("cuda", 1)] * 3


def test_a_torch_outside_the_supported_range_is_refused_before_the_device(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(torch, "__version__", "2.5.1+cpu")
    with pytest.raises(BackendUnavailableError, match=r"torch 2\.5\.1\+cpu in .* outside"):
        torch_device.resolve("cpu")


# The prepared files a torch workload's `train` reads before it hands its job to the engine.
_PREPARED = {
    "config.json": {},
    "folds.json": {"n_folds": 5, "folds": [{"train": [], "val": []}] * 5},
    "datalist.json": {"training": [{"image": "i.nii.gz", "label": "l.nii.gz"}], "label": "GTV"},
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "workload", [w.name for w in registry.WORKLOADS.values() if w.framework == "pytorch"]
)
def test_the_preflight_checks_the_precision_the_trainer_trains_in(
    workload: str, backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An "auto" run's precision as the workload hands it to its engine (its run_training's
    `auto_precision`, resolved by the device layer) is one the preflight checks (issue 32
    item 4: swinunetr on rocm trained fp16 while the preflight checked bf16)."""
    module = importlib.import_module(f"accelpipe.workloads.{workload}.workload")
    handed: list[str] = []

    def run_training(cfg: dict, train: Any, work: Path, make_job: Any, auto: Any = None) -> None:
        handed.append(resolve_precision(cfg["backend"], train.precision, auto))

    monkeypatch.setattr(module, "run_training", run_training)
    for name, data in _PREPARED.items():
        (tmp_path / name).write_text(json.dumps(data))
    for volume in ("i.nii.gz", "l.nii.gz"):  # listed, never read: no job is built
        (tmp_path / volume).touch()
    block: dict[str, Any] = {"train": {"precision": "auto"}}
    if workload == "unet2d":
        run = "fold0"  # its default run trains as its folds
    else:
        block["runs"] = {"auto": {"precision": "auto"}}  # the shipped runs name theirs
        run = "auto"
    config = validate({"backend": backend, workload: block})
    module.train(tmp_path, run, train_job_slice(config, workload, run), tmp_path / "work")
    assert handed == [workload_precision(backend, "auto", workload)]
    assert handed[0] in preflight.precisions(config, "pytorch")[workload]
