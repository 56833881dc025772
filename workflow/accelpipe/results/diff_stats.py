"""The statistics of `accelpipe diff`: an interval for the change of a figure between two runs,
and the verdict it gives (faster, slower, within noise).

Two sources of noise, each with its own interval for run B's figure minus run A's:

- per-step samples (train_log.csv's measured steps): a percentile bootstrap of the difference
  of the figure, each run's steps resampled with replacement, `resamples` times from a fixed
  seed (BOOTSTRAP_SEED), so the same two runs always give the same interval;
- per-instance summaries (summary.json keeps a figure's count, mean, min and max, not the
  instances): the normal interval of the difference of means with each run's variance at its
  largest possible value for values in [min, max] with that mean (the Bhatia-Davis bound,
  (max - mean) x (mean - min)): never narrower than the interval the instances would give.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

BOOTSTRAP_SEED = 20240611  # fixed: a diff of the same two runs is the same every time
FASTER, SLOWER, WITHIN_NOISE = "faster", "slower", "within noise"
NOT_COMPARED = "not compared"  # a run with fewer than two steps or instances: no spread

# (resamples, steps, columns) -> (resamples,): a figure of each resample of a run's steps
Statistic = Callable[[np.ndarray], np.ndarray]


def bootstrap_difference(
    a: np.ndarray,
    b: np.ndarray,
    statistic: Statistic,
    resamples: int,
    confidence: float,
) -> tuple[float, float] | None:
    """The percentile interval of statistic(B) - statistic(A) over `resamples` bootstrap
    resamples of each run's rows (`a`, `b`: steps x columns); None where a run has fewer than
    two steps (one step has no spread to resample)."""
    if len(a) < 2 or len(b) < 2:
        return None
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    draws = [x[rng.integers(0, len(x), size=(resamples, len(x)))] for x in (a, b)]
    differences = statistic(draws[1]) - statistic(draws[0])
    tail = (1 - confidence) / 2
    low, high = np.quantile(differences, [tail, 1 - tail])
    return float(low), float(high)


@dataclass(frozen=True)
class Spread:
    """A figure's instances as a summary keeps them: how many, their mean, min and max."""

    count: int
    mean: float
    low: float
    high: float

    def variance_bound(self) -> float:
        """The largest variance values in [low, high] with this mean can have."""
        return max(self.high - self.mean, 0.0) * max(self.mean - self.low, 0.0)


def bound_difference(a: Spread, b: Spread, confidence: float) -> tuple[float, float] | None:
    """The normal interval of B's mean minus A's with each variance at its bound; None where
    a run has fewer than two instances (one instance says nothing of the spread)."""
    if a.count < 2 or b.count < 2:
        return None
    z = NormalDist().inv_cdf((1 + confidence) / 2)
    error = math.sqrt(a.variance_bound() / a.count + b.variance_bound() / b.count)
    change = b.mean - a.mean
    return change - z * error, change + z * error


def relative_change(a: float, b: float) -> float | None:
    """(B - A) / A; None where A is 0."""
    return (b - a) / abs(a) if a else None


def verdict(
    a: float,
    b: float,
    interval: tuple[float, float] | None,
    higher_is_faster: bool,
    min_change: float,
) -> str:
    """faster or slower where the interval leaves out 0 and the change is at least
    `min_change` of A's value; else within noise; not compared without an interval."""
    if interval is None:
        return NOT_COMPARED
    change = relative_change(a, b)
    if change is not None and abs(change) < min_change:
        return WITHIN_NOISE
    low, high = interval
    if low <= 0 <= high:
        return WITHIN_NOISE
    up = low > 0
    return FASTER if up == higher_is_faster else SLOWER
