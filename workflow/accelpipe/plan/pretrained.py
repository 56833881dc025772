"""Starting weights as the workflow plans them: which folder of converted weights a run's
model starts from, and the weights stage's config slice for it. No framework: Snakemake reads
it while planning (the stage itself is accelpipe.weights).

A workload that starts from a pretrained network names the source in
`<workload>.model.pretrained`: its family's official files (`weights.<family>.<official>`),
`path:<location>` (a copy, for sites without internet) or `none` (random init); its family
is in its declaration (`Workload.pretrained`). Each source, with the model setting that picks
the file (a ViT encoder's size), is one folder
`<data_root>/weights/<name>/`, made once by the weights stage and shared by every run (and
every workflow on the same data_root) that starts from it:

- `resnet34-mlperf`, `resnet34-path-<hash>`: a ResNet-34 backbone;
- `vit-<encoder>-augreg`, `vit-<encoder>-path-<hash>`: a ViT encoder.

`<hash>` is the first 12 hex digits of the sha256 of the location, so two copies never share
a folder and a run name stays free of the path.
"""

from __future__ import annotations

import hashlib
from typing import Any

from accelpipe.config import registry
from accelpipe.config.declare import Pretrained
from accelpipe.config.schema import run_model, run_names
from accelpipe.core.errors import ConfigError

NONE = "none"
PATH = "path:"


# The workloads whose model starts from a pretrained network, and its family (each declares it).
FAMILIES: dict[str, Pretrained] = {
    name: w.pretrained for name, w in registry.WORKLOADS.items() if w.pretrained is not None
}


def family(workload: str) -> Pretrained | None:
    return FAMILIES.get(workload)


def weights_name(workload: str, model: dict[str, Any]) -> str | None:
    """The weights folder a model starts from (None: random init, or a workload without
    pretrained weights). A model the official files cannot fit is a ConfigError."""
    fam = FAMILIES.get(workload)
    source = model.get("pretrained", NONE)
    if fam is None or source == NONE:
        return None
    stem = fam.family if fam.picked_by is None else f"{fam.family}-{model[fam.picked_by]}"
    if source.startswith(PATH):
        digest = hashlib.sha256(source.removeprefix(PATH).encode()).hexdigest()[:12]
        return f"{stem}-path-{digest}"
    for key, value in fam.needs:
        if model.get(key) != value:
            raise ConfigError(
                f"config key '{workload}.model.pretrained': {source} weights fit "
                f"{workload}.model.{key} {value}, not {model.get(key)}; set pretrained to none "
                "or to path:<weights of that shape>"
            )
    return f"{stem}-{source}"


def run_weights(config: dict[str, Any], workload: str, run: str) -> str | None:
    """The weights folder name a run of `workload` starts from, or None."""
    if workload not in FAMILIES:
        return None
    return weights_name(workload, run_model(config[workload], workload, run))


def base_weights(config: dict[str, Any], workload: str) -> str | None:
    """The weights folder name of `<workload>.model` itself (a benchmark row's model)."""
    if workload not in FAMILIES:
        return None
    return weights_name(workload, config[workload].get("model", {}))


def _models(config: dict[str, Any]) -> dict[str, tuple[str, dict[str, Any]]]:
    """Every weights folder this config's runs start from -> (workload, a model using it)."""
    found: dict[str, tuple[str, dict[str, Any]]] = {}
    for workload in FAMILIES:
        block = config[workload]
        models = [block.get("model", {})]
        models += [run_model(block, workload, run) for run in run_names(block, workload)]
        for model in models:
            name = weights_name(workload, model)
            if name is not None:
                found.setdefault(name, (workload, model))
    return found


def framework(config: dict[str, Any], name: str) -> str:
    """The framework whose image converts the weights: their workload's."""
    workload, _ = _lookup(config, name)
    return registry.workload(workload).framework


def _lookup(config: dict[str, Any], name: str) -> tuple[str, dict[str, Any]]:
    models = _models(config)
    if name not in models:
        known = ", ".join(sorted(models)) or "none (every model starts from random init)"
        raise ConfigError(f"no run of this config starts from weights {name!r} (known: {known})")
    return models[name]


def weights_slice(config: dict[str, Any], name: str) -> dict[str, Any]:
    """The weights stage's config slice: the family, the source and, for the official
    source, its files (role -> url, md5, sha256) alone, so editing another source's URL
    re-makes nothing."""
    workload, model = _lookup(config, name)
    fam = FAMILIES[workload]
    source = model["pretrained"]
    slice_: dict[str, Any] = {"family": fam.family, "source": source}
    if fam.picked_by is not None:
        slice_[fam.picked_by] = model[fam.picked_by]
    if source == fam.official:
        slice_["files"] = _official_files(config, workload, fam, model)
    return slice_


def _official_files(
    config: dict[str, Any], workload: str, fam: Pretrained, model: dict[str, Any]
) -> dict:
    files = config["weights"][fam.family][fam.official]
    if fam.picked_by is None:
        return dict(files)
    pick = model[fam.picked_by]
    one = files[pick]
    if one["url"] is None:
        raise ConfigError(
            f"config key 'weights.{fam.family}.{fam.official}.{pick}.url': no {fam.official} "
            f"weights are published for {workload}.model.{fam.picked_by} {pick}; set "
            f"{workload}.model.pretrained to path:<file> or none, or give the url"
        )
    return {"npz": one}


def host_paths(config: dict[str, Any]) -> list[str]:
    """The `path:` locations of the weights this config's runs start from (a container must
    see them)."""
    return sorted(
        {
            model["pretrained"].removeprefix(PATH)
            for _, model in _models(config).values()
            if model["pretrained"].startswith(PATH)
        }
    )
