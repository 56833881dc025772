"""`targets`: what `snakemake <target>` can build under a config, for a person to read.

The config is the one Snakemake would plan with: the Snakefile's `configfile:` (config.yaml
in the current directory), then each --configfile, then --config, merged by Snakemake's own
functions, and checked by `config.schema.validate` as the Snakefile checks it. The targets are those
`accelpipe.plan.targets` accepts (`targets.buildable`), the checks the rules run while planning.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any

from accelpipe.compare.runs import finished_runs
from accelpipe.config import registry
from accelpipe.config.schema import validate
from accelpipe.core.errors import ConfigError
from accelpipe.plan import targets

# The Snakefile's `configfile:` directive (tests/accelpipe/stages/test_targets_cli.py checks
# that they agree); Snakemake reads it from the working directory.
DEFAULT_CONFIGFILE = "config.yaml"


def load_config(
    configfiles: list[str], overrides: list[str], default: Path = Path(DEFAULT_CONFIGFILE)
) -> dict[str, Any]:
    """The config as Snakemake merges it, validated as the Snakefile validates it.

    Snakemake merges --configfile files (in order) and --config values (parsed as its own
    command line parses them) into one override, loads the `configfile:` file and updates it
    with that override; without the file, the override alone is the config if there are
    config files, else an error. A bad file, value or key is one ConfigError naming it.
    """
    try:  # Snakemake plans the workflow: it is installed wherever targets are made
        from snakemake.cli import parse_config
        from snakemake.common.configfile import load_configfile
        from snakemake.settings.types import ConfigSettings
        from snakemake.utils import update_config
        from snakemake_interface_common.exceptions import WorkflowError
    except ImportError as err:
        raise ConfigError(f"accelpipe targets reads the config with Snakemake: {err}") from None
    sources = [str(default)] if default.exists() else []
    sources += [*configfiles, *(["--config"] if overrides else [])]
    try:
        override = ConfigSettings(
            config=parse_config(overrides), configfiles=[Path(f) for f in configfiles]
        ).overwrite_config
        if default.exists():
            config = load_configfile(default)
            update_config(config, override)
        elif configfiles:
            config = override
        else:
            raise ConfigError(
                f"no {default} in {Path.cwd()} (the Snakefile's configfile): run in the "
                "workflow's folder or name one with --configfile"
            )
    except (WorkflowError, OSError, ValueError) as err:  # a file missing, not YAML; a bad --config
        raise ConfigError(f"config ({', '.join(sources)}): {err}") from None
    try:
        return validate(dict(config))
    except ConfigError as err:
        raise ConfigError(f"invalid config ({', '.join(sources)}): {err}") from None


def _text(found: list[targets.Target]) -> str:
    """One block per workload (its name, framework, dataset and quality metric), one target a
    line with what it is."""
    width = max(len(t.path) for t in found)
    blocks = []
    for group in dict.fromkeys(t.group for t in found):
        entry = registry.WORKLOADS.get(group)
        head = (
            f"{group} ({entry.framework}; {entry.dataset} data; quality: {entry.metric})"
            if entry
            else "every workload"
        )
        rows = [f"  {t.path:<{width}}  {t.description}" for t in found if t.group == group]
        blocks.append("\n".join([head, *rows]))
    return "\n\n".join(blocks)


def run_targets(args: argparse.Namespace) -> None:
    config = load_config(args.configfile or [], args.config or [])
    found = targets.buildable(config, len(finished_runs(Path("results"))))
    if args.json:
        print(json.dumps({"targets": [dataclasses.asdict(t) for t in found]}, indent=2))
    else:
        print(_text(found))
