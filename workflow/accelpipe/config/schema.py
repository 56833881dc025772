"""The config schema, validation with defaults, and typed views of config slices.

The schema (schemas/config.schema.yaml, with each workload's block from its folder:
workloads/<name>/schema.yaml) is the single source of keys and defaults. Snakemake
validates the whole config with `validate`; each rule then hands its own slice to the CLI as
JSON, checked here against that stage's slice schema, and stages read it through the typed
views of `accelpipe.config.settings`.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import re
from functools import cache
from pathlib import Path
from typing import Any, cast

import jsonschema

from accelpipe.config import grid, registry, seeds
from accelpipe.core.errors import ConfigError
from accelpipe.core.io import read_yaml

SCHEMA_PATH = Path(__file__).parents[1] / "schemas" / "config.schema.yaml"
FIGURES_SCHEMA_PATH = SCHEMA_PATH.parent / "reference_figures.schema.yaml"


# A workload's part of the schema, in its folder (workloads/<name>/schema.yaml): its block
# under `properties` and its definitions (`<name>_train`), merged in registry order.
WORKLOAD_SCHEMA = "schema.yaml"


def load(path: Path = SCHEMA_PATH) -> dict[str, Any]:
    """The config schema: `path`'s shared keys and definitions, with every registered
    workload's part added; a part that adds anything else, or a key already there, is a
    ConfigError naming its file."""
    root: dict[str, Any] = read_yaml(path)
    for name in registry.WORKLOADS:
        part_path = registry.folder(name) / WORKLOAD_SCHEMA
        part = read_yaml(part_path) or {}
        extra = sorted(set(part) - {"definitions", "properties"})
        if extra:
            raise ConfigError(f"{part_path}: only definitions and properties, not {extra[0]!r}")
        for section, entries in part.items():
            taken = sorted(set(entries) & set(root[section]))
            if taken:
                raise ConfigError(f"{part_path}: {section}.{taken[0]} is already in the schema")
            root[section].update(entries)
    return root


@cache
def schema() -> dict[str, Any]:
    return load()


def _resolve(node: dict[str, Any]) -> dict[str, Any]:
    """Follow a local `#/definitions/<name>` reference."""
    ref = node.get("$ref")
    if ref is None:
        return node
    found: dict[str, Any] = schema()["definitions"][ref.rsplit("/", 1)[-1]]
    return found


def _fill_defaults(instance: dict[str, Any], node: dict[str, Any]) -> None:
    for key, sub in node.get("properties", {}).items():
        sub_resolved = _resolve(sub)
        if key not in instance:
            if "default" not in sub and "default" not in sub_resolved:
                continue
            instance[key] = copy.deepcopy(sub.get("default", sub_resolved.get("default")))
        if isinstance(instance[key], dict) and "properties" in sub_resolved:
            _fill_defaults(instance[key], sub_resolved)


_BOOLEANS = {"true": True, "false": False, "yes": True, "no": False}


def _coerce_scalar(value: str, types: list[str]) -> Any:
    """Parse a string into the schema's scalar type; leave it unchanged if it does not parse."""
    text = value.strip()
    if "null" in types and text.lower() in ("null", "none", "~"):
        return None
    if "boolean" in types and text.lower() in _BOOLEANS:
        return _BOOLEANS[text.lower()]
    for kind, parse in (("integer", int), ("number", float)):
        if kind in types:
            try:
                return parse(text)
            except ValueError:
                pass
    return value


def _coerce(instance: Any, node: dict[str, Any]) -> Any:
    """Snakemake's `--config key={...}` delivers nested values as strings: type them per schema."""
    node = _resolve(node)
    types = node.get("type", [])
    types = [types] if isinstance(types, str) else types
    if isinstance(instance, str) and "string" not in types:
        return _coerce_scalar(instance, types)
    if isinstance(instance, dict):
        props = node.get("properties", {})
        extra = node.get("additionalProperties")  # e.g. named runs: name -> train overrides
        return {
            k: _coerce(v, props[k])
            if k in props
            else (_coerce(v, extra) if isinstance(extra, dict) else v)
            for k, v in instance.items()
        }
    if isinstance(instance, list) and isinstance(node.get("items"), dict):
        return [_coerce(v, node["items"]) for v in instance]
    return instance


def _describe(error: jsonschema.ValidationError) -> str:
    path = ".".join(str(p) for p in error.absolute_path)
    if error.validator == "additionalProperties":
        node = cast(dict[str, Any], error.schema)
        allowed = set(node.get("properties", {}))
        unknown = sorted(set(cast(dict[str, Any], error.instance)) - allowed)
        keys = ", ".join(f"'{'.'.join(filter(None, [path, k]))}'" for k in unknown)
        return f"unknown config key {keys} (allowed here: {', '.join(sorted(allowed))})"
    return f"config key '{path or '<root>'}': {error.message}"


def validate(config: dict[str, Any]) -> dict[str, Any]:
    """Return a copy of `config` with defaults filled in; raise ConfigError naming a bad key."""
    if not isinstance(config, dict):
        raise ConfigError(f"config must be a mapping, got {type(config).__name__}")
    root = schema()
    filled: dict[str, Any] = _coerce(copy.deepcopy(config), root)
    _check_finite(filled)
    validator = jsonschema.Draft7Validator(root)
    # Check unknown keys before filling defaults so the message names the user's key.
    errors = sorted(validator.iter_errors(filled), key=lambda e: list(e.absolute_path))
    if errors:
        raise ConfigError(_describe(jsonschema.exceptions.best_match(errors)))
    _fill_defaults(filled, root)
    error = jsonschema.exceptions.best_match(validator.iter_errors(filled))
    if error is not None:
        raise ConfigError(_describe(error))
    for workload, block in filled.items():
        if isinstance(block, dict) and block.get("grid"):
            _check_grid(block, workload, root["properties"][workload])
        if isinstance(block, dict) and block.get("seeds", {}).get("values"):
            _check_names(block, workload)
        if isinstance(block, dict) and block.get("profile", {}).get("enabled"):
            _check_profile_after_warmup(block, workload, filled["performance"]["warmup_steps"])
    return filled


def _check_finite(value: Any, path: str = "") -> None:
    """Every number is finite: NaN fails no comparison, so `minimum` and friends let it
    through (and YAML's .nan / .inf, --config's nan and JSON's NaN all parse)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"config key '{path}': {value} is not a finite number")
    if isinstance(value, dict):
        for key, item in value.items():
            _check_finite(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_finite(item, f"{path}[{index}]")


def _check_profile_after_warmup(block: dict[str, Any], workload: str, warmup: int) -> None:
    """The profiler's steps come after the performance warm-up: profiled steps inside it
    would be timed while the run still warms up, and disagree with the measured steps."""
    wait = block["profile"]["schedule"]["wait"]
    if wait < warmup:
        raise ConfigError(
            f"config key '{workload}.profile.schedule.wait': {wait} is less than "
            f"performance.warmup_steps ({warmup}): the profiler would record warm-up steps; "
            f"set wait to {warmup} or more"
        )


def _check_names(block: dict[str, Any], workload: str) -> None:
    """No seed run shares a name with a run of `<workload>.runs` or of its grid."""
    named = set(block["runs"]) | set(grid.expand(block, workload))
    clash = sorted(set(seeds.expand(block, workload)) & named)
    if clash:
        raise ConfigError(
            f"config key '{workload}.runs': {', '.join(clash)} is also a run of "
            f"'{workload}.seeds'; rename it"
        )


def _check_grid(block: dict[str, Any], workload: str, node: dict[str, Any]) -> None:
    """Every grid key names a real `model` / `train` key and every value fits its schema;
    no grid run shares a name with a run of `<workload>.runs`."""
    for key, values in block["grid"].items():
        section, name = grid.split_key(key)
        props = _resolve(node["properties"][section]).get("properties", {})
        if name not in props:
            raise ConfigError(
                f"config key '{workload}.grid.{key}': {section} has no key {name!r} "
                f"(known: {', '.join(sorted(props))})"
            )
        # Snakemake's --config reads nested values with YAML's BaseLoader: every item a
        # string. Type each as the schema types the key it varies.
        values = block["grid"][key] = [_coerce(value, props[name]) for value in values]
        _check_finite(values, f"{workload}.grid.{key}")
        validator = jsonschema.Draft7Validator(_resolve(props[name]))
        for value in values:
            error = jsonschema.exceptions.best_match(validator.iter_errors(value))
            if error is not None:
                raise ConfigError(
                    f"config key '{workload}.grid.{key}': {error.message} (the type of "
                    f"'{workload}.{section}.{name}', the key it varies)"
                )
    clash = sorted(set(grid.expand(block, workload)) & set(block["runs"]))
    if clash:
        raise ConfigError(
            f"config key '{workload}.runs': {', '.join(clash)} is also a run of "
            f"'{workload}.grid'; rename it"
        )


def run_names(block: dict[str, Any], workload: str) -> list[str]:
    """The named runs of a workload: `<workload>.runs`, the runs of `<workload>.grid` and
    those of `<workload>.seeds`."""
    made = list(grid.expand(block, workload)) + list(seeds.expand(block, workload))
    return sorted(block["runs"]) + made


# A cross-validated workload (one with `folds`) trains each named run once per fold: the run
# `<name>/fold<k>` (results/<workload>/<name>/fold<k>), and for the run named DEFAULT_RUN just
# `fold<k>` (results/<workload>/fold<k>).
DEFAULT_RUN = "default"
_FOLD_RUN = re.compile(r"(?:(?P<name>[A-Za-z0-9_-]+)/)?fold(?P<fold>0|[1-9][0-9]*)")


def split_fold(run: str) -> tuple[str, int] | None:
    """`fold3` -> ("default", 3); `lr/fold3` -> ("lr", 3); None where `run` names no fold."""
    match = _FOLD_RUN.fullmatch(run)
    if match is None:
        return None
    return match["name"] or DEFAULT_RUN, int(match["fold"])


def fold_run(name: str, fold: int) -> str:
    """The run of fold `fold` of the named run `name` (split_fold's inverse)."""
    return f"fold{fold}" if name == DEFAULT_RUN else f"{name}/fold{fold}"


def run_name(block: dict[str, Any], run: str) -> str:
    """The named run a run trains: a cross-validated workload's fold `[<name>/]fold<k>` trains
    `<name>`; a name is itself."""
    parts = split_fold(run) if "folds" in block else None
    return run if parts is None else parts[0]


def _run_overrides(block: dict[str, Any], workload: str, run: str) -> dict[str, dict[str, Any]]:
    name = run_name(block, run)
    if name in block["runs"]:
        return {"train": block["runs"][name], "model": {}}
    grid_runs = grid.expand(block, workload)
    if name in grid_runs:
        return grid_runs[name]
    seed_runs = seeds.expand(block, workload)
    if name in seed_runs:
        base, seed = seed_runs[name]
        return {"train": {**block["runs"][base], "seed": seed}, "model": {}}
    known = ", ".join(run_names(block, workload)) or "none"
    raise ConfigError(f"config key '{workload}.runs' has no run {name!r} (known: {known})")


def run_train(block: dict[str, Any], workload: str, run: str) -> dict[str, Any]:
    """The train settings of a run: `<workload>.train` overridden by `<workload>.runs.<name>`
    or by the `train.*` values of a grid run (a fold trains its named run's settings)."""
    return {**block["train"], **_run_overrides(block, workload, run)["train"]}


def run_model(block: dict[str, Any], workload: str, run: str) -> dict[str, Any]:
    """The model settings of a run: `<workload>.model` with a grid run's `model.*` values."""
    return {**block.get("model", {}), **_run_overrides(block, workload, run)["model"]}


def stage_slice(args: argparse.Namespace) -> dict[str, Any]:
    """The stage's config slice as the CLI parsed and checked it, once per process
    (`args.config`, set by cli.check_config_json); parsed here, once, only where a stage's
    code is called without the CLI (tests, a script)."""
    parsed: dict[str, Any] | None = getattr(args, "config", None)
    if parsed is None:
        parsed = args.config = load_slice(args.config_json)
    return parsed


def load_slice(text: str) -> dict[str, Any]:
    """Parse the JSON config slice a rule passes to the CLI (`stage_slice`: the parsed one)."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise ConfigError(f"--config-json is not valid JSON: {err}") from None
    if not isinstance(value, dict):
        raise ConfigError("--config-json must be a JSON object")
    return value


# ------------------------------------------------------------------------------ stage slices
# The --config-json of each stage is a slice of the validated config (accelpipe.plan.stage_config
# builds them; the rules pass them). Its schema is made of the config schema's own nodes, so
# a slice has the config's keys, types and defaults: its sections (the slice's top-level
# keys, which a rule always passes) are required, the keys inside them default as in
# config.yaml. The CLI checks every slice against it before the stage runs.

# the workload sections of a train slice (those the workload's schema has)
TRAIN_SECTIONS = ("model", "train", "profile", "transforms")
# what a train slice adds where the run evaluates inside training (train.eval_every)
EVAL_IN_TRAINING_SECTIONS = ("evaluate", "target")
# keys of an `evaluate` block that cannot change what the train stage makes: how many samples
# or windows one forward pass holds (eval mode: no batch statistics), the loader's processes,
# the predictions only the evaluate stage draws. A train slice leaves them out, so changing
# them never retrains; the train job reads them from $ACCELPIPE_EVAL_SETTINGS (runtime.py).
EVAL_OUTSIDE_TRAIN_KEY = ("batch_size", "sw_batch_size", "loader_workers", "prediction_images")
# workload settings that make other runs: not part of any one run's slices
NOT_RUN_SETTINGS = ("runs", "grid", "seeds", "benchmark")
# a config hash (provenance.config_hash): sha256 in hex
_HASH = {"type": "string", "pattern": "^[0-9a-f]{64}$"}


def _sections(properties: dict[str, Any], required: bool = True) -> dict[str, Any]:
    return {
        "type": "object",
        "additionalProperties": False,
        "properties": properties,
        "required": sorted(properties) if required else [],
    }


def _undefaulted(node: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in _resolve(node).items() if k != "default"}


def _block(name: str) -> dict[str, Any]:
    properties: dict[str, Any] = _resolve(schema()["properties"][name])["properties"]
    return properties


@cache
def _figure_schema() -> dict[str, Any]:
    properties = read_yaml(FIGURES_SCHEMA_PATH)["properties"]
    figures: dict[str, Any] = properties["figures"]
    return figures


def _run_stage_schema(stage: str, workload: str) -> dict[str, Any]:
    """The train, evaluate and publish slices: sections of the workload's block."""
    root = schema()["properties"]
    own = _block(registry.workload(workload).name)
    if stage == "train":  # a run's, or a benchmark row's
        sections = {"backend": root["backend"]} | {k: own[k] for k in TRAIN_SECTIONS if k in own}
        # present only where the run evaluates inside training: never filled in
        evaluating = {k: _undefaulted(own[k]) for k in EVAL_IN_TRAINING_SECTIONS if k in own}
        return _sections(sections | evaluating) | {"required": sorted(sections)}
    if stage == "evaluate":
        train = _resolve(own["train"])["properties"]
        precision = {k: train[k] for k in ("precision", "channels_last") if k in train}
        return _sections(
            {
                "backend": root["backend"],
                "evaluate": own["evaluate"],
                "train": _sections(precision, required=False),
                "target": own["target"],
            }
        )
    data = registry.workload(workload).dataset
    run = {k: v for k, v in own.items() if k not in NOT_RUN_SETTINGS}
    sections = {
        "backend": root["backend"],
        "runtime": root["runtime"],
        "datasets": _sections({data: _block("datasets")[data]}),
        "performance": root["performance"],
        "reference_figures": _figure_schema(),
        workload: _sections(run, required=False),
    }
    # stage_config.run_config_hash, which provenance.json records (a publish run by hand: none)
    return _sections(sections | {"config_hash": _HASH}) | {"required": sorted(sections)}


def runtime_schema() -> dict[str, Any]:
    """One framework's entry of $ACCELPIPE_RUNTIME (rules/common.smk, accelpipe.config.runtime): no
    defaults, the docker keys only (and all of them) for runtime docker."""
    root, containers = schema()["properties"], _block("containers")
    docker = {
        "image": {"type": "string", "minLength": 1},
        "mounts": {"type": "array", "items": {"type": "string"}},
        "env": _undefaulted(containers["env"]),
        "docker_host": _undefaulted(containers["docker_host"]),
        "build": _sections({k: _undefaulted(containers[k]) for k in ("base_image", "offline")}),
    }
    local = {
        "runtime": {"enum": ["local", "docker"]},
        "backend": _undefaulted(root["backend"]),
        "pool": _undefaulted(_block("accelerators")["pool"]),
    }
    # optional: a stage run by hand (no workflow) waits the schema's default
    waits = {"wait_s": _undefaulted(_block("accelerators")["wait_s"])}
    return _sections(local | waits | docker, required=False) | {
        "required": sorted(local),
        "if": {"properties": {"runtime": {"const": "docker"}}, "required": ["runtime"]},
        "then": {"required": sorted(docker)},
    }


def slice_schema(
    stage: str,
    *,
    dataset: str | None = None,
    variant: str | None = None,
    workload: str | None = None,
) -> dict[str, Any] | None:
    """The JSON schema of the config slice `stage` takes (None: it takes none); an unknown
    dataset, variant or workload is a ConfigError naming it."""
    root = schema()["properties"]
    if stage == "raw":  # the dataset's block itself
        block: dict[str, Any] = _block("datasets")[registry.dataset(str(dataset)).name]
        return block
    if stage == "prepare":
        owner = _block(registry.variant_owner(str(dataset), str(variant)).name)
        no_options = {"type": "object", "additionalProperties": False}
        folds = {"folds": owner["folds"]} if "folds" in owner else {}
        return _sections({"prepare": owner.get("prepare", no_options), **folds})
    if stage in ("train", "evaluate", "publish"):
        return _run_stage_schema(stage, str(workload))
    if stage == "grid":
        return _sections({"keys": {"type": "array", "items": {"type": "string"}}})
    if stage == "benchmark":
        benchmark = _resolve(schema()["definitions"]["benchmark"])["properties"]
        return _sections({"warmup_steps": benchmark["warmup_steps"]})
    if stage == "compare":
        # each run's config hash under the current config (stage_config.current_hashes),
        # null for a run it cannot make; absent (compare run by hand): staleness unchecked
        hashes = {"type": "object", "additionalProperties": {"oneOf": [_HASH, {"type": "null"}]}}
        return _sections({"cost": root["cost"], "config_hashes": hashes}) | {"required": ["cost"]}
    if stage == "diff":
        return _sections({"diff": root["diff"]})
    return None


def _describe_slice(error: jsonschema.ValidationError, node: dict[str, Any]) -> str:
    path = ".".join(str(p) for p in error.absolute_path)
    if error.validator != "required":
        return _describe(error)
    required = cast(list[str], error.validator_value)
    missing = [k for k in required if k not in cast(dict[str, Any], error.instance)]
    keys = ", ".join(f"'{'.'.join(filter(None, [path, k]))}'" for k in missing)
    text = f"missing key{'s' if len(missing) > 1 else ''} {keys}"
    sections = node.get("required", [])
    if path or len(missing) == len(sections) or not set(missing) <= set(sections):
        return text
    return f"{text} (the slice's sections: {', '.join(sections)})"


def validate_slice(value: dict[str, Any], node: dict[str, Any], stage: str) -> dict[str, Any]:
    """`value` checked against a slice schema (`slice_schema`), defaults filled in; a missing,
    unknown or invalid key is one ConfigError naming it."""
    full = {"definitions": schema()["definitions"], **node}
    validator = jsonschema.Draft7Validator(full)
    filled = copy.deepcopy(value)
    try:
        _check_finite(filled)
    except ConfigError as err:
        raise ConfigError(f"--config-json of the {stage} stage: {err}") from None
    # Unknown keys first, so the message names the key as given, not a default beside it.
    error = jsonschema.exceptions.best_match(validator.iter_errors(filled))
    if error is None:
        _fill_defaults(filled, full)
        error = jsonschema.exceptions.best_match(validator.iter_errors(filled))
    if error is not None:
        raise ConfigError(f"--config-json of the {stage} stage: {_describe_slice(error, node)}")
    return filled
