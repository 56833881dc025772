"""Typed settings for tests that drive an engine or the optimizer without a config file:
the workload's schema defaults (accelpipe.config.schema.validate), then the test's overrides."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from types import MappingProxyType
from typing import Any

from accelpipe.config.schema import validate
from accelpipe.config.settings import (
    ProfileSchedule,
    ProfileSettings,
    TrainSettings,
    TrainSlice,
    view,
)
from accelpipe.config.views import train_slice
from accelpipe.plan import stage_config
from accelpipe.workloads.resnet50.declaration import ResNet50Train
from accelpipe.workloads.ssd.declaration import SSDTrain


def _train_block(workload: str, overrides: dict[str, Any]) -> dict[str, Any]:
    return validate({workload: {"train": overrides}})[workload]["train"]


# What the engine tests assume unless they say otherwise: eager fp32-or-auto AdamW at a
# constant rate, no warm-up, no evaluation inside training (resnet50's block evaluates every 4
# epochs by default), and TensorFlow without op determinism.
_PLAIN = {"epochs": 100, "batch_size": 64, "lr": 0.001, "weight_decay": 0.0001, "eval_every": 0}
_PLAIN_TORCH = _PLAIN | {"optimizer": "adamw", "scheduler": "constant", "warmup_epochs": 0}
_PLAIN_TF = _PLAIN | {"warmup_epochs": 0, "compile": False, "deterministic": False}


def torch_train(**overrides: Any) -> ResNet50Train:
    """A PyTorch train block: resnet50's (it has every key the torch engine reads), with the
    optimizer any torch workload may use (resnet50's schema offers sgd and lars; unet2d and
    swinunetr train with adamw)."""
    keys = _PLAIN_TORCH | overrides
    optimizer = keys.pop("optimizer")
    block = _train_block("resnet50", keys)
    return dataclasses.replace(view(ResNet50Train, block), optimizer=optimizer)


def tf_train(**overrides: Any) -> SSDTrain:
    """A TensorFlow train block: ssd's."""
    return view(SSDTrain, _train_block("ssd", _PLAIN_TF | overrides), where="ssd.train")


def _profile_block(workload: str, profile: dict[str, Any]) -> dict[str, Any]:
    """A profile block the schema completed; engine tests profile from their first steps, so
    no performance warm-up holds the profiler back."""
    config = validate({"performance": {"warmup_steps": 0}, workload: {"profile": profile}})
    return config[workload]["profile"]


def profile(enabled: bool = True, **schedule: int) -> ProfileSettings:
    """The profiler settings: the schema's schedule with `schedule`'s keys replaced."""
    block = _profile_block("ssd", {"enabled": enabled, "schedule": schedule})
    return view(ProfileSettings, block, where="ssd.profile")


__all__ = ["ProfileSchedule", "profile", "tf_run", "tf_train", "torch_run", "torch_train"]


def tf_run(cfg: dict[str, Any], work_dir: Path, make_job: Callable[..., Any]) -> Any:
    """tf_trainer.run_training on a hand-made train slice: its train and profile blocks
    completed as `tf_train` and the schema complete them."""
    from accelpipe.engines.tf_trainer import run_training

    train = tf_train(**cfg["train"])
    block = _profile_block("ssd", cfg.get("profile", {}))
    return run_training(hand_made_slice("ssd", cfg, train, block), train, work_dir, make_job)


def torch_run(cfg: dict[str, Any], work_dir: Path, make_job: Callable[..., Any]) -> Any:
    """torch_trainer.run_training on a hand-made train slice, completed as in `tf_run`."""
    from accelpipe.engines.torch_trainer import run_training

    train = torch_train(**cfg["train"])
    block = _profile_block("resnet50", cfg.get("profile", {}))
    return run_training(hand_made_slice("resnet50", cfg, train, block), train, work_dir, make_job)


def hand_made_slice(
    workload: str, cfg: dict[str, Any], train: TrainSettings, profile_block: dict[str, Any]
) -> TrainSlice:
    """A hand-made slice as the train stage hands it down (`TrainSlice`), with the test's
    own train settings (those of a workload offering every key the engine reads)."""
    sections = {**cfg, "profile": profile_block}
    profile = view(ProfileSettings, profile_block, where=f"{workload}.profile")
    return TrainSlice(workload, cfg["backend"], train, profile, MappingProxyType(sections))


def train_job_slice(
    config: dict[str, Any], workload: str, run: str, profiling: bool = True
) -> TrainSlice:
    """A run's train slice as its job sees it: stage_config.train plus the evaluate settings
    the workflow hands the job outside its key ($ACCELPIPE_EVAL_SETTINGS, runtime.py), read
    once as the train stage reads it, for tests that call a workload's `train` without the
    train stage; `profiling` False turns the profiler off."""
    cfg = stage_config.train(config, workload, run)
    if "evaluate" in cfg:
        cfg["evaluate"] = cfg["evaluate"] | stage_config.eval_settings(config)[workload]
    if not profiling:
        cfg["profile"] = cfg["profile"] | {"enabled": False}
    return train_slice(workload, cfg)
