"""Compute figures: FLOPs per sample, the model TFLOP/s they give at the run's throughput,
MFU against the device's published dense peak, and the fraction of the matmul ceiling
measured on the run's own device (stage.json's `flops` and `gemm`)."""

from __future__ import annotations

from typing import Any

from accelpipe.devices import peaks
from accelpipe.performance import rounded

# What a table row shows of `compute` (benchmark rows, the compare page).
COMPUTE_COLUMNS = ("flops_per_sample", "model_tflops", "mfu", "gemm_fraction")


def compute(train: dict[str, Any], samples_per_s: float | None) -> dict[str, Any]:
    """FLOPs per sample, the model TFLOP/s they give at the run's throughput, MFU against the
    device's dense peak and the fraction of the matmul ceiling measured on the same device
    (stage.json's `flops` and `gemm`); each None with its reason where it cannot be had."""
    flops, gemm = train.get("flops") or {}, train.get("gemm") or {}
    per_sample = flops.get("flops_per_sample")
    world = train["world_size"]
    model = per_sample * samples_per_s / 1e12 if per_sample and samples_per_s else None
    tf32 = train["precision"] == "fp32" and peaks.fp32_uses_tf32(
        train["backend"], gemm.get("tf32_switches") or {}, flops.get("by_kind")
    )
    peak, peak_note = peaks.lookup(train["backend"], train["device"], train["precision"], tf32=tf32)
    ceiling = gemm.get("gemm_tflops")
    reasons = {
        "flops": None if per_sample else flops.get("reason", "no counted train step"),
        "model_tflops": None if model else "no FLOPs per sample or no measured throughput",
    }
    return {
        "flops_per_sample": per_sample,
        "flops_counted_by": flops.get("counted_by"),
        "model_tflops": rounded(model),
        "peak_tflops_per_device": peak.tflops if peak else None,
        "peak_note": peak_note,
        "mfu": rounded(model / (peak.tflops * world)) if model and peak else None,
        "gemm_tflops_per_device": rounded(ceiling),
        "gemm": gemm or None,
        "gemm_fraction": rounded(model / (ceiling * world)) if model and ceiling else None,
        "not_measured": {k: v for k, v in reasons.items() if v} or None,
    }
