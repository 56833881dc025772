"""Typed views of config blocks: each class is its schema node's keys, with no defaults."""

from __future__ import annotations

import dataclasses
import typing

import pytest

from accelpipe.config import registry
from accelpipe.config.schema import _resolve, schema, validate
from accelpipe.config.settings import ProfileSettings, TorchTrain, common_train, view
from accelpipe.config.views import EVALUATE_VIEWS, MODEL_VIEWS, TRAIN_VIEWS, train_view
from accelpipe.core.errors import ConfigError
from accelpipe.workloads.segmenter.declaration import SegmenterTrain
from accelpipe.workloads.unet2d.declaration import UNet2DTrain

_JSON_TYPES = {int: "integer", float: "number", bool: "boolean", str: "string", tuple: "array"}


def _properties(workload: str, block: str) -> dict[str, dict]:
    node = _resolve(schema()["properties"][workload])["properties"][block]
    return {k: _resolve(v) for k, v in _resolve(node)["properties"].items()}


def _json_types(hint: object) -> set[str]:
    """The schema types a field's annotation allows (`int | None` -> integer, null)."""
    args = (
        typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, type(int | None)) else ()
    )
    found = set()
    for arg in args or (hint,):
        origin = typing.get_origin(arg) or arg
        found.add("null" if arg is type(None) else _JSON_TYPES[origin])
    return found


@pytest.mark.parametrize(
    ("block", "views"),
    [("train", TRAIN_VIEWS), ("model", MODEL_VIEWS), ("evaluate", EVALUATE_VIEWS)],
)
@pytest.mark.parametrize("workload", sorted(registry.WORKLOADS))
def test_each_view_is_its_schema_blocks_keys_and_types(workload: str, block: str, views) -> None:
    cls = views[workload]
    properties = _properties(workload, block)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    assert set(fields) == set(properties)
    hints = typing.get_type_hints(cls)
    for name in fields:
        declared = properties[name]["type"]
        declared = {declared} if isinstance(declared, str) else set(declared)
        allowed = _json_types(hints[name])
        # a JSON "number" may hold an integer; an annotation of float takes both
        assert declared <= allowed | ({"integer"} if "number" in allowed else set()), name
    # no view gives a default to a key the config has: the schema is the one source
    assert all(f.default is dataclasses.MISSING for f in fields.values())


@pytest.mark.parametrize("workload", sorted(registry.WORKLOADS))
def test_the_schema_defaults_make_every_workloads_views(workload: str) -> None:
    config = validate({})
    train = train_view(workload, config[workload]["train"])
    assert isinstance(train, TRAIN_VIEWS[workload])
    assert train.batch_size == config[workload]["train"]["batch_size"]
    for block, views in (("model", MODEL_VIEWS), ("evaluate", EVALUATE_VIEWS)):
        built = view(views[workload], config[workload][block])
        assert all(not isinstance(v, list) for v in dataclasses.asdict(built).values())
    profile = view(ProfileSettings, config[workload]["profile"])
    assert profile.schedule.wait == config[workload]["profile"]["schedule"]["wait"]


def test_what_a_workload_does_not_offer_is_fixed_in_code_not_read() -> None:
    train = train_view("unet2d", validate({})["unet2d"]["train"])
    assert isinstance(train, UNet2DTrain) and isinstance(train, TorchTrain)
    assert (train.optimizer, train.compile, train.warmup_epochs) == ("adamw", False, 0.0)
    with pytest.raises(ConfigError, match=r"'unet2d\.train\.optimizer': not a key of UNet2DTrain"):
        train_view("unet2d", {**validate({})["unet2d"]["train"], "optimizer": "sgd"})


def test_a_missing_or_unknown_key_is_named() -> None:
    block = validate({})["segmenter"]["train"]
    with pytest.raises(ConfigError, match=r"'segmenter\.train\.min_lr' is missing"):
        train_view("segmenter", {k: v for k, v in block.items() if k != "min_lr"})
    with pytest.raises(ConfigError, match=r"'segmenter\.train\.oversampling': not a key"):
        train_view("segmenter", {**block, "oversampling": 0.3})
    with pytest.raises(ConfigError, match="unknown workload 'yolo'"):
        train_view("yolo", block)


def test_lists_become_tuples_and_blocks_nest() -> None:
    train = train_view("segmenter", validate({})["segmenter"]["train"])
    assert isinstance(train, SegmenterTrain) and isinstance(train.scale_range, tuple)
    profile = view(
        ProfileSettings,
        {"enabled": True, "schedule": {"wait": 2, "warmup": 1, "active": 5, "repeat": 1}},
    )
    assert profile.schedule.active == 5


def test_the_launch_reads_the_keys_every_train_block_has() -> None:
    for workload in registry.WORKLOADS:
        common = common_train(validate({})[workload]["train"])
        assert (common.devices, common.nodes) == (1, 1)
