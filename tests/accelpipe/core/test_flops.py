"""The framework-free FLOP records: per-sample arithmetic, kinds, and the matmul rate."""

from __future__ import annotations

import math

import pytest

from accelpipe.core.flops import (
    KINDS,
    MIN_PROBE_SIZE,
    FlopCount,
    GemmResult,
    flop_count,
    gemm_flops,
    gemm_tflops,
    probe_plan,
    smaller_probe,
)


def test_flop_count_sums_the_kinds_and_divides_by_the_batch() -> None:
    count = flop_count({"conv": 300, "matmul": 30}, batch=3, counted_by="a counter")
    assert count.total_flops == 330 and count.flops_per_sample == 110
    assert dict(count.by_kind) == {"matmul": 30, "conv": 300, "attention": 0}
    assert tuple(count.by_kind) == KINDS
    assert count.as_dict() == {
        "flops_per_sample": 110,
        "total_flops": 330,
        "batch": 3,
        "counted_by": "a counter",
        "notes": [],
        "by_kind": {"matmul": 30, "conv": 300, "attention": 0},
    }


def test_flop_count_refuses_an_empty_batch_and_unknown_kinds() -> None:
    with pytest.raises(ValueError, match="batch must be at least 1"):
        flop_count({"conv": 1}, batch=0, counted_by="x")
    with pytest.raises(ValueError, match="unknown kind of FLOPs softmax"):
        flop_count({"softmax": 1}, batch=1, counted_by="x")


def test_flop_count_is_frozen() -> None:
    count = flop_count({}, batch=1, counted_by="x")
    assert isinstance(count, FlopCount) and count.total_flops == 0
    with pytest.raises(AttributeError):
        count.batch = 2  # type: ignore[misc]


def test_gemm_rate_is_two_n_cubed_per_product_over_the_time() -> None:
    assert gemm_flops(1000) == 2_000_000_000
    # 10 products of 2 GFLOP in 4 s: 5 GFLOP/s
    assert gemm_tflops(1000, 10, 4.0) == pytest.approx(0.005)
    assert gemm_tflops(8192, 20, 0.028) == pytest.approx(2 * 8192**3 * 20 / 0.028 / 1e12)


@pytest.mark.parametrize("seconds", [0.0, -1.0, math.inf, math.nan])
def test_gemm_rate_needs_a_positive_finite_time(seconds: float) -> None:
    with pytest.raises(ValueError, match="no rate"):
        gemm_tflops(64, 1, seconds)


def test_gemm_rate_needs_a_size_and_repeats() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        gemm_tflops(0, 1, 1.0)
    with pytest.raises(ValueError, match="at least 1"):
        gemm_tflops(64, 0, 1.0)


def test_gemm_result_as_dict_keeps_every_field() -> None:
    result = GemmResult(1.5, 64, 3, 0.25, "bfloat16", "bf16", False, "torch.matmul")
    assert result.as_dict() == {
        "gemm_tflops": 1.5,
        "size": 64,
        "repeats": 3,
        "seconds": 0.25,
        "dtype": "bfloat16",
        "precision": "bf16",
        "tf32": False,
        "measured_by": "torch.matmul",
    }


def test_a_probe_halves_while_its_timed_products_would_overrun_the_budget() -> None:
    # 4 products of 0.3 s overrun 1 s: half the size; 4 of 0.2 s fit
    assert smaller_probe(1024, 4, 0.3, 1.0) == 512
    assert smaller_probe(1024, 4, 0.2, 1.0) is None
    # never below the floor
    assert smaller_probe(2 * MIN_PROBE_SIZE, 4, 10.0, 1.0) == MIN_PROBE_SIZE
    assert smaller_probe(MIN_PROBE_SIZE, 4, 10.0, 1.0) is None


def test_the_probe_plans_are_bounded() -> None:
    for backend in ("cpu", "cuda", "rocm", "gaudi"):
        plan = probe_plan(backend)
        assert plan.size >= MIN_PROBE_SIZE and 1 <= plan.repeats <= 50 and plan.budget_s <= 10
    assert probe_plan("cuda").size == 8192
