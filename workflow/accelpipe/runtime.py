"""Where a stage runs: the runtime file the `stage_runtime` rule writes for each framework.

Every rule passes `--runtime work/runtime/<framework>.json`: local (this environment), or
docker with the framework's image, the backend, the accelerator pool, mounts and the
variables a container may see. It is a file, not a rule param, so that the data stages
can read it without being keyed on it (their outputs do not depend on where they run).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from accelpipe.errors import ConfigError

RUNTIMES = ("local", "docker")
LOCAL: dict[str, Any] = {"runtime": "local", "backend": "cpu"}
REMAKE = "re-make it with `snakemake --forcerun stage_runtime <target>`"


def read_runtime(path: str | Path | None) -> dict[str, Any]:
    """The runtime file at `path` (None: run here, on the cpu); a bad file is one error."""
    if path is None:
        return dict(LOCAL)
    try:
        value = json.loads(Path(path).read_text())
    except OSError as err:
        raise ConfigError(f"{path}: cannot read the runtime file ({err.strerror})") from None
    except json.JSONDecodeError as err:
        raise ConfigError(f"{path}: the runtime file is not JSON ({err.msg}); {REMAKE}") from None
    if not isinstance(value, dict) or value.get("runtime") not in RUNTIMES:
        raise ConfigError(
            f"{path}: not a runtime file (`runtime` must be one of {', '.join(RUNTIMES)}); {REMAKE}"
        )
    if value["runtime"] == "docker" and not value.get("image"):
        raise ConfigError(f"{path}: runtime docker names no `image`; {REMAKE}")
    return value
