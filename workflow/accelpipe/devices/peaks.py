"""The device's published dense peak at the run's precision: MFU's denominator.

The figures are data (peaks.yaml beside this module, checked against
schemas/device_peaks.schema.yaml when read), one row per device model and precision, each
with its source and a note; a row whose vendor publishes no figure has `tflops: null` and
says why. No framework here: the engines tell which model they ran on by the backend and
the device name they report, as performance.json does.

Which model: `devices.device_family` reads the GPU model or the Gaudi generation from the
name ("H100" from "NVIDIA H100 80GB HBM3", "Gaudi2" from "GAUDI2"); where one family has
models of different peaks, `VARIANTS` tells them apart by a marker in the name (the drivers'
names: "NVIDIA H100 80GB HBM3" is the SXM5 board, "NVIDIA H100 PCIe" the PCIe card,
"NVIDIA H100 NVL" the NVL card). A name that carries none of its family's markers has no
model, and so no peak: a wrong peak is worse than none.

Which precision: bf16 and fp16 runs (autocast, Keras mixed policies) run their products on
bf16/fp16 tensor cores: the bf16/fp16 rows. An fp32 run's products run in fp32, or as TF32
on the tensor cores of Ampere and later NVIDIA GPUs where the framework allows it:

- PyTorch, as devices/torch_device.py leaves it (it sets neither switch): convolutions in
  TF32 (`torch.backends.cudnn.allow_tf32`, on by default), matmuls in full fp32
  (`torch.get_float32_matmul_precision()` "highest", the default).
- TensorFlow: both in TF32 (`tf.config.experimental.tensor_float_32_execution_enabled()`,
  on by default since 2.4).

`fp32_uses_tf32` turns those switches (devices.torch_gemm.tf32_switches,
devices.tf_gemm.tf32_switches) and the run's counted FLOPs into one answer: TF32 where the
products it covers do most of the counted FLOPs (a ResNet's convolutions in PyTorch, all of
TensorFlow's), and `dense_peak(..., tf32=True)` then takes the device's tf32 row. Off cuda
the switches are not taken to mean TF32 (MIOpen and hipBLASLt on ROCm, Gaudi's MME).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from accelpipe.core.errors import DataError
from accelpipe.core.io import read_yaml
from accelpipe.devices import PRECISIONS, device_family

PEAKS_FILE = Path(__file__).with_name("peaks.yaml")
_SCHEMA = Path(__file__).parents[1] / "schemas" / "device_peaks.schema.yaml"

# family -> ((marker in the upper-cased device name, model), ...): the first marker found
# names the model; a name with none of them has no model.
VARIANTS: dict[str, tuple[tuple[str, str], ...]] = {
    "H100": (
        ("PCIE", "H100 PCIe"),  # "NVIDIA H100 PCIe"
        ("NVL", "H100 NVL"),  # "NVIDIA H100 NVL" (no row: no dense figure per card here)
        ("SXM", "H100 SXM"),
        ("HBM3", "H100 SXM"),  # "NVIDIA H100 80GB HBM3": the SXM5 board's name
    ),
    "H200": (
        ("NVL", "H200 NVL"),  # "NVIDIA H200 NVL" (no row)
        ("", "H200 SXM"),  # "NVIDIA H200": the SXM board
    ),
    "V100": (
        ("SXM2", "V100 SXM2"),  # "Tesla V100-SXM2-16GB"
        ("DGXS", "V100 SXM2"),  # DGX Station's V100s: SXM2 parts
        ("PCIE", "V100 PCIe"),  # "Tesla V100-PCIE-32GB"
    ),
}


@dataclass(frozen=True)
class Peak:
    """A published dense peak: `tflops` of one `device` for `precision`'s math."""

    device: str  # the model: "H100 SXM", "A100", "Gaudi2", ...
    precision: str  # the row's math: bf16, fp16, fp32 or tf32 (an fp32 run on TF32)
    tflops: float
    source: str
    note: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class _Row:
    device: str
    precision: str
    tflops: float | None
    source: str
    note: str


@cache
def load_peaks(path: Path = PEAKS_FILE) -> dict[tuple[str, str], _Row]:
    """The rows of `path` by (device, precision), checked against their schema; a bad or
    repeated entry fails with one DataError naming the file and the key."""
    try:
        data = read_yaml(path)
    except (OSError, yaml.YAMLError) as err:
        reason = " ".join(str(err).split())
        raise DataError(f"{path}: cannot read the device peaks ({reason})") from None
    validator = jsonschema.Draft7Validator(read_yaml(_SCHEMA))
    error = jsonschema.exceptions.best_match(validator.iter_errors(data))
    if error is not None:
        key = ".".join(str(p) for p in error.absolute_path) or "<root>"
        raise DataError(f"{path}: key '{key}': {error.message}")
    rows: dict[tuple[str, str], _Row] = {}
    for i, entry in enumerate(data["peaks"]):
        row = _Row(**entry)
        if (row.device, row.precision) in rows:
            raise DataError(
                f"{path}: key 'peaks.{i}': a second {row.precision} row for {row.device!r}"
            )
        rows[row.device, row.precision] = row
    return rows


def device_model(backend: str, device_name: str) -> str | None:
    """The model peaks.yaml names from the backend and the device name the engine reports;
    None on the cpu and where the name does not say (see VARIANTS)."""
    return _model(backend, device_name)[0]


def _model(backend: str, device_name: str) -> tuple[str | None, str]:
    family = device_family(backend, device_name)
    if family is None:
        return None, f"unknown device {device_name!r} ({backend})"
    variants = VARIANTS.get(family)
    if variants is None:
        return family, ""
    name = device_name.upper()
    for marker, model in variants:
        if marker in name:
            return model, ""
    known = ", ".join(dict.fromkeys(model for _, model in variants))
    return None, f"device {device_name!r}: the name does not say which {family} ({known})"


def lookup(
    backend: str,
    device_name: str,
    precision: str,
    *,
    tf32: bool = False,
    path: Path = PEAKS_FILE,
) -> tuple[Peak | None, str]:
    """The device's dense peak for a run at `precision` (bf16, fp16, fp32), and a sentence:
    what the peak is, or why there is none. `tf32`: the run's fp32 products run as TF32
    (`fp32_uses_tf32`); then the device's tf32 row where it has one."""
    if precision not in PRECISIONS:
        return None, f"unknown precision {precision!r} ({', '.join(PRECISIONS)})"
    if backend == "cpu":
        return None, "cpu: no published dense peak"
    model, reason = _model(backend, device_name)
    if model is None:
        return None, reason
    rows = load_peaks(path)
    if not any(device == model for device, _ in rows):
        return None, f"no dense peak for {model} in {path.name} (device {device_name!r})"
    row_math = "tf32" if precision == "fp32" and tf32 and (model, "tf32") in rows else precision
    row = rows.get((model, row_math))
    if row is None:
        return None, f"no {row_math} peak for {model} in {path.name}"
    if row.tflops is None:
        return None, f"{model} {row_math}: no published dense peak ({row.note})"
    how = {
        "tf32": "an fp32 run on TF32 tensor cores: the tf32 peak",
        "fp32": (
            "an fp32 run on TF32 tensor cores, but the device has no tf32 peak: the fp32 peak"
            if tf32
            else "an fp32 run without TF32: the fp32 peak"
        ),
    }.get(row_math, f"the {row_math} peak")
    note = f"{model}, {how}: {row.tflops:g} TFLOP/s dense ({row.note})"
    return Peak(model, row_math, float(row.tflops), row.source, row.note), note


def dense_peak(
    backend: str, device_name: str, precision: str, *, tf32: bool = False
) -> Peak | None:
    """The device's dense peak for a run at `precision`, or None (`lookup` says why)."""
    return lookup(backend, device_name, precision, tf32=tf32)[0]


def fp32_uses_tf32(
    backend: str, switches: Mapping[str, bool], by_kind: Mapping[str, float] | None = None
) -> bool:
    """Whether an fp32 run's products are mostly TF32: on cuda only, where the framework's
    switches (`{"matmul": ..., "conv": ...}`: matmuls and attention, convolutions) allow TF32
    for the products that do more than half of the counted FLOPs (`FlopCount.by_kind`);
    without a count, where both switches allow it."""
    if backend != "cuda":
        return False
    matmul, conv = bool(switches.get("matmul")), bool(switches.get("conv"))
    counts = dict(by_kind or {})
    total = sum(counts.values())
    if total <= 0:
        return matmul and conv
    on_tf32 = (counts.get("matmul", 0) + counts.get("attention", 0)) * matmul + counts.get(
        "conv", 0
    ) * conv
    return on_tf32 * 2 > total
