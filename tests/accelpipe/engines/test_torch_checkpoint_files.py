"""model.pt and checkpoint.pt are read as data, never as code (issue 30 item 3).

A pickle can name any function to call while it loads: a planted model.pt or checkpoint.pt
would run it in the evaluate or resumed train job. The trainer loads both with torch's
weights-only unpickler; these tests plant files whose loading would create a canary file,
and check that what the trainer itself writes needs nothing beyond plain data.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from accelpipe.config.settings import ProfileSchedule, ProfileSettings
from accelpipe.core.errors import DataError
from accelpipe.devices.torch_device import resolve
from accelpipe.engines.torch_trainer import (
    CHECKPOINT,
    MODEL_FILE,
    Trainer,
    TrainJob,
    load_file,
    load_for_eval,
    save_file,
    seed_everything,
)
from tests.helpers.settings import torch_train

pytestmark = pytest.mark.torch

STEPS = 2
EVAL_CFG = {"backend": "cpu", "train": {"precision": "fp32"}}


class _WritesCanary:
    """Unpickling this opens (creates) the canary file: code run by loading."""

    def __init__(self, canary: Path) -> None:
        self.canary = canary

    def __reduce__(self) -> tuple[Callable[..., Any], tuple[str, str]]:
        return (open, (str(self.canary), "w"))


def _plant_zip(path: Path, canary: Path) -> None:
    """A model.pt as torch.save writes it, one value of which runs code."""
    torch.save({"state_dict": {}, "model": _WritesCanary(canary)}, path)


def _plant_pickle(path: Path, canary: Path) -> None:
    """A bare pickle (torch's legacy format) that runs code."""
    with path.open("wb") as f:
        pickle.dump({"state_dict": _WritesCanary(canary)}, f, protocol=2)


PLANTS = [_plant_zip, _plant_pickle]


def _model() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))


def _batches(epoch: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(7 + epoch)
    return [
        (torch.randn(4, 3, generator=g), torch.randint(0, 2, (4,), generator=g))
        for _ in range(STEPS)
    ]


def _trainer(work: Path, epochs: int, optimizer: str = "sgd") -> Trainer:
    seed_everything(0)
    cfg = torch_train(epochs=epochs, lr=0.01, scheduler="cosine", optimizer=optimizer)
    job = TrainJob(_model(), torch.nn.functional.cross_entropy, _batches, STEPS)
    profile = ProfileSettings(False, ProfileSchedule(wait=1, warmup=1, active=1, repeat=1))
    return Trainer(job, resolve("cpu"), cfg, profile, work)


def _plain_types(value: Any, where: str = "") -> list[str]:
    """Where `value` holds anything but tensors, dicts, lists, tuples, numbers, str, None."""
    if isinstance(value, torch.Tensor) or value is None:
        return []
    if type(value) in (bool, int, float, str):
        return []
    if isinstance(value, dict):
        keys = [f"{where}/<key {k!r}>" for k in value if type(k) not in (int, str)]
        return keys + [p for k, v in value.items() for p in _plain_types(v, f"{where}/{k}")]
    if type(value) in (list, tuple):
        return [p for i, v in enumerate(value) for p in _plain_types(v, f"{where}/{i}")]
    return [f"{where}: {type(value).__module__}.{type(value).__qualname__}"]


@pytest.mark.parametrize("plant", PLANTS)
def test_a_planted_model_pt_is_refused_and_runs_nothing(
    tmp_path: Path, plant: Callable[[Path, Path], None]
) -> None:
    canary = tmp_path / "canary"
    plant(tmp_path / MODEL_FILE, canary)
    with pytest.raises(DataError) as err:
        load_for_eval(tmp_path, EVAL_CFG, lambda checkpoint: _model())
    message = str(err.value)
    assert message.startswith(f"{tmp_path / MODEL_FILE}: refused to load") and "\n" not in message
    assert not canary.exists()


def test_the_refusal_names_what_the_file_needs(tmp_path: Path) -> None:
    plant_global = tmp_path / MODEL_FILE
    _plant_zip(plant_global, tmp_path / "canary")
    with pytest.raises(DataError, match=r"needs `(builtins|io)\.open`"):
        load_file(plant_global, "cpu")
    assert not (tmp_path / "canary").exists()


@pytest.mark.parametrize("plant", PLANTS)
def test_a_planted_checkpoint_pt_is_refused_on_resume_and_runs_nothing(
    tmp_path: Path, plant: Callable[[Path, Path], None]
) -> None:
    canary = tmp_path / "canary"
    work = tmp_path / "work"
    work.mkdir()
    plant(work / CHECKPOINT, canary)
    with pytest.raises(DataError) as err:
        _trainer(work, epochs=2).resume()
    message = str(err.value)
    assert message.startswith(f"{work / CHECKPOINT}: refused to load") and "\n" not in message
    assert not canary.exists()


@pytest.mark.parametrize("content", [b"", b"PK\x03\x04 cut short"])
def test_a_cut_short_checkpoint_is_one_error_naming_it(tmp_path: Path, content: bytes) -> None:
    (tmp_path / CHECKPOINT).write_bytes(content)
    with pytest.raises(DataError, match=f"{CHECKPOINT}") as err:
        load_file(tmp_path / CHECKPOINT, "cpu")
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("optimizer", ["sgd", "lars", "adamw"])
def test_a_real_checkpoint_holds_plain_data_and_resumes(tmp_path: Path, optimizer: str) -> None:
    first = _trainer(tmp_path, epochs=1, optimizer=optimizer)
    first.resume()
    first.fit()
    # Plain data needs no allow-list in any torch release with weights_only (>= 1.13),
    # the vendor images' 2.6 included: the walk does not depend on this venv's torch.
    state = load_file(tmp_path / CHECKPOINT, "cpu")
    assert _plain_types(state) == []
    second = _trainer(tmp_path, epochs=2, optimizer=optimizer)
    assert second.resume() and second.step == STEPS
    for name, tensor in first.model.state_dict().items():
        assert torch.equal(second.model.state_dict()[name], tensor), name


def test_a_model_pt_as_training_writes_it_loads_for_evaluation(tmp_path: Path) -> None:
    trained = _model()
    # run_training's model.pt: the weights and the workload's `job.checkpoint` (resnet50's)
    job_checkpoint = {"model": {"depth": 50, "width": 1.0, "zero_init": True}, "classes": ["a"]}
    save_file({"state_dict": trained.state_dict(), **job_checkpoint}, tmp_path / MODEL_FILE)
    built: list[dict[str, Any]] = []

    def build(checkpoint: dict[str, Any]) -> torch.nn.Module:
        built.append(checkpoint)
        return _model()

    model, _, checkpoint = load_for_eval(tmp_path, EVAL_CFG, build)
    assert _plain_types(checkpoint) == []
    assert built[0]["model"] == job_checkpoint["model"] and checkpoint["classes"] == ["a"]
    for name, tensor in trained.state_dict().items():
        assert torch.equal(model.state_dict()[name], tensor), name
