"""The volume cache's plan: sizes from NIfTI headers, the budget, how many volumes fit and
how many builder threads, and what the run records of it."""

from __future__ import annotations

from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from accelpipe.core.errors import DataError
from accelpipe.core.resources import Limit
from accelpipe.inputs import volume_cache
from accelpipe.inputs.volume_cache import BUILD_TRANSIENT, CachePlan, plan

NIBABEL_DATA = Path(nib.__file__).parent / "tests" / "data"
MB = 10**6


def test_cached_bytes_from_the_header_resampled_to_the_spacing(tmp_path: Path) -> None:
    # nibabel's own test image: 33x41x25 voxels of 2 mm -> 66x82x50 at 1 mm, float32 x 2
    anatomical = str(NIBABEL_DATA / "anatomical.nii")
    assert volume_cache.cached_bytes(anatomical, (1.0, 1.0, 1.0)) == 66 * 82 * 50 * 8
    # a CT-like header (int16, 0.98 mm in-plane, 3 mm slices) at the recipe's (1, 1, 3)
    ct = tmp_path / "ct.nii.gz"
    image = np.zeros((100, 100, 10), np.int16)
    nib.save(nib.Nifti1Image(image, np.diag([0.98, 0.98, 3.0, 1.0])), ct)
    assert volume_cache.cached_bytes(str(ct), (1.0, 1.0, 3.0)) == 98 * 98 * 10 * 8


def test_only_the_volumes_that_fit_the_budget_are_cached() -> None:
    sizes = [100 * MB] * 5
    # each volume 100 MB; a builder's transient 10 x 100 MB: 3 volumes + 1 builder = 1.3 GB
    cache = plan(sizes, 1.0, Limit(1350 * MB, "test budget"), cpus=8)
    assert (cache.volumes, cache.asked, cache.total, cache.builders) == (3, 5, 5, 1)
    assert cache.cached_bytes == 300 * MB
    assert "cache_rate 1 asks 5" in cache.reason and "3 fit the budget 1.35 GB (test budget)" in (
        cache.reason
    )
    assert "swinunetr.train.cache_memory_gb" in cache.reason
    # room for all five and three builders (500 MB + 3 x 1 GB), capped by the CPUs
    roomy = plan(sizes, 1.0, Limit(3600 * MB, "test budget"), cpus=2)
    assert (roomy.volumes, roomy.builders) == (5, 2)
    assert roomy.reason.startswith("all 5 that cache_rate 1 asks fit")
    # cache_rate still caps the count, rounded as CacheDataset rounds
    assert plan(sizes, 0.5, Limit(10**12, "b"), cpus=2).volumes == 2
    # not even one volume and its builder: nothing cached, one builder
    none = plan(sizes, 1.0, Limit(BUILD_TRANSIENT * 100 * MB, "b"), cpus=4)
    assert (none.volumes, none.builders) == (0, 1)


def test_full_nsclc_by_the_arithmetic() -> None:
    """Issue 33's figures: 338 training volumes of ~248 MB. With a 64 GB machine's default
    budget (half, 32 GB), 119 fit beside one builder thread (29.5 + 2.5 GB); the rest load
    each epoch (the cache asked ~84 GB before)."""
    cache = plan([248 * MB] * 338, 1.0, volume_cache.budget(None, 1, Limit(64 * 10**9, "m")), 16)
    assert (cache.volumes, cache.builders) == (119, 1)
    assert cache.cached_bytes + BUILD_TRANSIENT * 248 * MB <= 32 * 10**9


def test_the_budget_from_config_or_a_share_of_the_limit() -> None:
    assert volume_cache.budget(2.5, 4) == Limit(2_500_000_000, "swinunetr.train.cache_memory_gb")
    shared = volume_cache.budget(None, 2, Limit(64 * 10**9, "MemAvailable"))
    assert shared.bytes == 16 * 10**9 and "/ 2 processes" in shared.source
    assert "MemAvailable" in shared.source


def test_the_record() -> None:
    cache = CachePlan(2, 3, 3, 1, 2 * MB, Limit(5 * MB, "b"), "why")
    assert cache.facts() == {
        "volumes": 2,
        "asked": 3,
        "of": 3,
        "builders": 1,
        "cached_bytes": 2 * MB,
        "budget_bytes": 5 * MB,
        "budget_source": "b",
        "reason": "why",
    }
    assert cache.line() == "volume cache: 2 of 3 volumes cached; why"


@pytest.mark.parametrize(("rate", "cached"), [(0.67, 2), (0.0, 0)])
def test_plan_for_reads_only_the_asked_headers(tmp_path: Path, rate: float, cached: int) -> None:
    items = [{"image": str(NIBABEL_DATA / "anatomical.nii")}] * 2
    items.append({"image": str(tmp_path / "never-read.nii.gz")})
    cache = volume_cache.plan_for(items, (2.0, 2.0, 2.0), rate, 1.0, 1)
    assert cache.volumes == cached and cache.total == 3


def test_a_volume_that_is_not_nifti_is_named() -> None:
    minc = str(NIBABEL_DATA / "minc1_1_scale.mnc")
    with pytest.raises(DataError, match=r"minc1_1_scale\.mnc: not a NIfTI volume"):
        volume_cache.cached_bytes(minc, (1.0, 1.0, 1.0))
