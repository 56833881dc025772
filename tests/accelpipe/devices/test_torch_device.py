"""The device layer on this machine: cpu works, missing accelerator runtimes fail at once."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from accelpipe.devices import torch_device
from accelpipe.errors import BackendUnavailableError, ConfigError


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
    from accelpipe.workloads.swinunetr import AUTO_PRECISION

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
