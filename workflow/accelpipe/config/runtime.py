"""Where a stage runs: the runtime settings the workflow puts in ACCELPIPE_RUNTIME.

The Snakefile (rules/common.smk) writes, per framework, local (this environment) or docker
with the framework's image, the backend, the accelerator pool, mounts and the variables a
container may see, as JSON in the environment every job inherits (Slurm jobs re-read the
Snakefile and set it again). It is not a rule input or param: where a stage runs is not what
it makes, so switching backend, runtime or pool never re-makes the data. The stages whose
results depend on the device carry the backend (and the image) in their own params.
"""

from __future__ import annotations

import json
import os
from typing import Any

import jsonschema

from accelpipe.config.schema import EVAL_OUTSIDE_TRAIN_KEY, runtime_schema, schema
from accelpipe.core.errors import ConfigError

RUNTIME_ENV = "ACCELPIPE_RUNTIME"
LOCAL: dict[str, Any] = {"runtime": "local", "backend": "cpu"}


def read_runtime(framework: str | None) -> dict[str, Any]:
    """The settings for `framework`'s stages from ACCELPIPE_RUNTIME (unset, or no framework:
    run here, on the cpu), checked against config.schema.runtime_schema; a bad value is one error
    naming the variable and the key."""
    text = os.environ.get(RUNTIME_ENV, "").strip()
    if not text or framework is None:
        return dict(LOCAL)
    try:
        settings = json.loads(text)
    except json.JSONDecodeError as err:
        raise ConfigError(f"${RUNTIME_ENV} is not JSON ({err.msg})") from None
    if not isinstance(settings, dict) or framework not in settings:
        raise ConfigError(f"${RUNTIME_ENV} has no runtime for the {framework} stages")
    validator = jsonschema.Draft7Validator(runtime_schema())
    error = jsonschema.exceptions.best_match(validator.iter_errors(settings[framework]))
    if error is not None:
        where = ".".join(str(p) for p in error.absolute_path) or "<entry>"
        raise ConfigError(f"${RUNTIME_ENV}: {framework}.{where}: {error.message}")
    return settings[framework]


def lease_wait_s(runtime: dict[str, Any]) -> float | None:
    """Seconds a stage waits for its devices or its image's build (None: no limit): the
    workflow's `accelerators.wait_s`, else (a stage run by hand) the schema's default."""
    if "wait_s" in runtime:
        return runtime["wait_s"]
    accelerators = schema()["properties"]["accelerators"]["properties"]
    return accelerators["wait_s"]["default"]


# The evaluate settings a train slice leaves out (config.schema.EVAL_OUTSIDE_TRAIN_KEY), per
# workload, as JSON: the workflow puts them here, beside ACCELPIPE_RUNTIME, because Snakemake
# re-runs a job whose params change and these cannot change what training makes.
EVAL_SETTINGS_ENV = "ACCELPIPE_EVAL_SETTINGS"


def with_eval_settings(cfg: dict[str, Any], workload: str) -> dict[str, Any]:
    """The train slice `cfg` with the workload's evaluate settings from $ACCELPIPE_EVAL_SETTINGS
    put into its `evaluate` section (a slice without one evaluates nothing inside training).
    Unset (a stage run by hand): the slice as it is, its schema's defaults filled in."""
    text = os.environ.get(EVAL_SETTINGS_ENV, "").strip()
    if not text or "evaluate" not in cfg:
        return cfg
    try:
        settings = json.loads(text)
    except json.JSONDecodeError as err:
        raise ConfigError(f"${EVAL_SETTINGS_ENV} is not JSON ({err.msg})") from None
    own = settings.get(workload) if isinstance(settings, dict) else None
    if not isinstance(own, dict) or not set(own) <= set(EVAL_OUTSIDE_TRAIN_KEY):
        raise ConfigError(
            f"${EVAL_SETTINGS_ENV}: {workload} must map some of "
            f"{', '.join(EVAL_OUTSIDE_TRAIN_KEY)} to values, got {own!r}"
        )
    return cfg | {"evaluate": cfg["evaluate"] | own}
