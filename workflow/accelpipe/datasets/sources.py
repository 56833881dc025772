"""Raw sources: how a dataset's raw layout is made from its configured `source`.

Every dataset has three sources: `synthetic` (a small learnable dataset drawn in the real
layout, deterministic by seed), its official one (a download, or for ImageNet an import of
the user's own archives) and `path:<folder>` (an existing copy, linked after its layout is
checked). A dataset module describes its own as `SOURCES`, a `RawSources`; `make_raw` picks
the configured one, runs it and checks what it made. The config reaches it validated, with
the schema's defaults filled in, so the handlers read their keys directly.

Two workflows that share a data_root may run the raw job of one dataset at once. `raw_lock`
lets one make the folder while the other waits; the other then finds it `made_from` the
same config and keeps it, where replacing it (or failing, which makes its Snakemake delete
the output) would pull the folder from under the first workflow's next stages.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accelpipe.core.errors import ConfigError, DataError
from accelpipe.core.io import read_json
from accelpipe.core.provenance import STAGE_FILE
from accelpipe.core.redact import redact_data
from accelpipe.datasets.download import configured_watch, exclusive

# (a source's config block, the raw folder to create, the downloads folder)
Handler = Callable[[dict[str, Any], Path, Path], None]


@dataclass(frozen=True)
class RawSources:
    """One dataset's raw sources and the check of what they make."""

    dataset: str  # its key under `datasets:` in the config
    official: str  # the name of its official source (`msd`, `tcia`, `import`, ...)
    settings: str  # the config block of the official source
    synthesize: Handler  # gets the `synthetic` block
    fetch: Handler  # gets the `settings` block
    link: Callable[[str, Path], None]  # (the location after `path:`, the raw folder)
    # checks the raw folder's layout (a DataError naming what is wrong); returns its facts
    check: Callable[[Path], dict[str, Any]]


def make_raw(
    sources: RawSources, cfg: dict[str, Any], out: Path, downloads: str | Path
) -> dict[str, Any]:
    """Create the raw layout in `out` from the source `cfg` names; return the facts the raw
    stage records in its provenance: the kind of source and the check's counts."""
    source, out, downloads = cfg["source"], Path(out), Path(downloads)
    if source == "synthetic":
        sources.synthesize(cfg["synthetic"], out, downloads)
    elif source == sources.official:
        sources.fetch(cfg[sources.settings], out, downloads)
    elif source.startswith("path:"):
        sources.link(source.removeprefix("path:"), out)
    else:
        raise ConfigError(
            f"datasets.{sources.dataset}.source: unknown source {source!r} "
            f"(synthetic | {sources.official} | path:<folder>)"
        )
    return {"source": source.split(":", 1)[0], **sources.check(out)}


def existing_copy(location: str, folder: str, dataset: str) -> Path:
    """A `path:` source: the dataset's `folder` itself, or a folder that contains it."""
    path = Path(location).expanduser()
    if not path.is_dir():
        raise DataError(f"{path}: dataset path given by datasets.{dataset}.source does not exist")
    return path / folder if (path / folder).is_dir() else path


# The key of a raw folder's stage.json that says which config slice made it.
MADE_FROM = "config_sha256"


def config_key(cfg: dict[str, Any]) -> str:
    """sha256 of a raw config slice, credentials redacted (a new signature of one URL makes
    the same data; the record must not carry a hash a password could be guessed from)."""
    text = json.dumps(redact_data(cfg), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def made_from(out: Path, cfg: dict[str, Any]) -> bool:
    """True if `out` is a finished raw folder (its stage.json is written last, inside the
    folder renamed into place) made from the config slice `cfg`."""
    if not (out / STAGE_FILE).is_file():
        return False
    try:
        record = read_json(out / STAGE_FILE)
    except DataError:
        return False
    return isinstance(record, dict) and record.get(MADE_FROM) == config_key(cfg)


@contextlib.contextmanager
def raw_lock(dataset: str, downloads: Path) -> Iterator[None]:
    """Hold `<downloads>/raw.lock` while the raw folder of `dataset` is made."""
    downloads.mkdir(parents=True, exist_ok=True)
    wait_s = configured_watch().lock_wait_s
    with exclusive(downloads / "raw", wait_s=wait_s, job=f"raw:{dataset}"):
        yield
