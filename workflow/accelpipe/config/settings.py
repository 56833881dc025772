"""Typed views of validated config blocks: one frozen dataclass per block, built by `view`.

The schema (schemas/config.schema.yaml) is the only source of keys and defaults. These
classes declare no defaults: `view` builds one from a slice the schema has filled (Snakemake
validates the config, the CLI each stage's slice) and refuses a missing or unknown key, and
tests/accelpipe/config/test_settings.py checks every class against its schema node. A field a
workload does not offer (`field(init=False)`) is fixed in code and says why, never read from
the config.

The engines read `TrainSettings` (the keys every workload's train block has) and their own
part of it (`TorchTrain`, `TFTrain`); each workload trains with its own class, which adds the
keys only it has; a workload's own classes (train, model, evaluate) live in its declaration
(accelpipe.workloads.<name>.declaration), and accelpipe.config.views maps each workload to
them.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, Union

from accelpipe.core.errors import ConfigError

T = TypeVar("T")


def view(cls: type[T], data: Mapping[str, Any], *, where: str = "config") -> T:
    """`cls` (a frozen dataclass) built from the validated block `data`: nested dataclasses
    built the same way, lists as tuples; a key `cls` lacks, or one it needs and `data` lacks,
    is a ConfigError naming it (`where`: the block's config path)."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"config key '{where}' must be a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}  # type: ignore[arg-type]
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ConfigError(f"config key '{where}.{unknown[0]}': not a key of {cls.__name__}")
    missing = sorted(set(fields) - set(data))
    if missing:
        raise ConfigError(
            f"config key '{where}.{missing[0]}' is missing (the schema gives every key a "
            f"default: validate the config before viewing it)"
        )
    values = {name: _value(hints[name], data[name], f"{where}.{name}") for name in fields}
    return cls(**values)


def _value(hint: Any, value: Any, where: str) -> Any:
    nested = _dataclass_in(hint)
    if nested is not None and isinstance(value, Mapping):
        return view(nested, value, where=where)
    return tuple(value) if isinstance(value, list) else value


def _dataclass_in(hint: Any) -> type | None:
    """The dataclass a field's type names (alone or in `X | None`), if any."""
    if typing.get_origin(hint) in (Union, types.UnionType):
        found = [_dataclass_in(arg) for arg in typing.get_args(hint)]
        return next((cls for cls in found if cls is not None), None)
    return hint if dataclasses.is_dataclass(hint) and isinstance(hint, type) else None


# ---------------------------------------------------------------------------- profile


@dataclass(frozen=True)
class ProfileSchedule:
    wait: int
    warmup: int
    active: int
    repeat: int


@dataclass(frozen=True)
class ProfileSettings:
    enabled: bool
    schedule: ProfileSchedule


# Off, for the processes that do not write the run's files (a TF worker that is not the chief).
PROFILE_OFF = ProfileSettings(False, ProfileSchedule(wait=0, warmup=0, active=0, repeat=0))


# ------------------------------------------------------------------------------ train


@dataclass(frozen=True)
class TrainSettings:
    """The keys every workload's train block has: what the stages, launchers and both engines
    read."""

    epochs: int
    steps_per_epoch: int | None
    batch_size: int
    lr: float
    weight_decay: float
    precision: str
    seed: int
    log_every: int
    devices: int
    nodes: int
    eval_every: int  # epochs; 0: no evaluation inside training (engines.evaluations)
    stop_at_target: bool


@dataclass(frozen=True)
class TorchTrain(TrainSettings):
    """What the PyTorch engine reads besides: DataLoader workers, graph mode, memory layout,
    the optimizer (accelpipe.models.optim) and its learning-rate schedule."""

    loader_workers: int
    compile: bool
    channels_last: bool
    optimizer: str
    momentum: float
    scheduler: str
    warmup_epochs: float
    poly_power: float


@dataclass(frozen=True)
class TFTrain(TrainSettings):
    """What the TensorFlow engine reads besides: XLA and op determinism."""

    compile: bool
    deterministic: bool


TrainT = TypeVar("TrainT", bound=TrainSettings)


@dataclass(frozen=True, eq=False)
class TrainSlice(Mapping[str, Any]):
    """The train stage's config slice, parsed and checked once per process (by the CLI) and
    viewed once here: what the stage, its launch, the workload and the engine read. `backend`
    is the device family the run trains on, from the slice alone (ACCELPIPE_RUNTIME's is only
    where a stage without a backend in its slice runs); `train` is the workload's own class.
    The workload's other sections (model, transforms, evaluate, target) stay readable by key,
    for the workload's own views."""

    workload: str
    backend: str
    train: TrainSettings
    profile: ProfileSettings
    sections: Mapping[str, Any]

    def __getitem__(self, key: str) -> Any:
        return self.sections[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.sections)

    def __len__(self) -> int:
        return len(self.sections)

    def train_as(self, cls: type[TrainT]) -> TrainT:
        """`train`, as the workload's class `cls` it was viewed as (no second view)."""
        if not isinstance(self.train, cls):
            raise ConfigError(
                f"config key '{self.workload}.train' was read as {type(self.train).__name__}, "
                f"not {cls.__name__}"
            )
        return self.train


def common_train(data: Mapping[str, Any], where: str = "train") -> TrainSettings:
    """The keys every train block has, from any workload's (the launch reads only these)."""
    names = {f.name for f in dataclasses.fields(TrainSettings)}
    return view(TrainSettings, {k: v for k, v in data.items() if k in names}, where=where)
