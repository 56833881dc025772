"""resnet50's epoch batches (workloads/resnet50/workload.py)."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from accelpipe.core.errors import DataError
from accelpipe.workloads.resnet50.workload import _epoch_batches

pytestmark = pytest.mark.torch


def _loader(images: int, batch: int) -> DataLoader:
    data = TensorDataset(torch.zeros(images, 3), torch.zeros(images, dtype=torch.long))
    return DataLoader(data, batch_size=batch, drop_last=True)


def test_an_epoch_repeats_passes_until_it_has_its_steps() -> None:
    assert len(list(_epoch_batches(_loader(10, 4), None, 0, steps=5))) == 5


def test_a_training_set_without_a_full_batch_is_one_error_not_an_endless_epoch() -> None:
    with pytest.raises(DataError, match=r"\(24 images\) holds no full batch of 256"):
        next(_epoch_batches(_loader(24, 256), None, 0, steps=3))
