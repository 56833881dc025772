"""Where the weights stage reads a source from: the official files, downloaded (reusing the
datasets' resumable, locked, verified downloader), or a `path:` copy read in place."""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlparse

from accelpipe.core.errors import ConfigError, DataError
from accelpipe.core.redact import redact
from accelpipe.datasets.download import download, file_digest

PATH = "path:"
# A TF checkpoint's files beside its prefix: the index, and its one data shard.
INDEX, DATA_SHARD = ".index", ".data-00000-of-00001"


def locate(cfg: dict[str, Any], downloads: Path) -> tuple[Path, dict[str, Any]]:
    """(what the converter reads: a checkpoint prefix or folder, or an npz; facts)."""
    source = str(cfg["source"])
    if source.startswith(PATH):
        return _copy(cfg["family"], source.removeprefix(PATH))
    if "files" not in cfg:
        raise ConfigError(f"weights stage: source {source!r} is neither official nor path:")
    paths = {role: _fetch(role, spec, downloads) for role, spec in sorted(cfg["files"].items())}
    facts = {
        "source": source,
        "files": [_file_facts(paths[role], spec["url"]) for role, spec in cfg["files"].items()],
    }
    if cfg["family"] == "resnet34":
        return _checkpoint_prefix(paths), facts
    return paths["npz"], facts


def _fetch(role: str, spec: dict[str, Any], downloads: Path) -> Path:
    name = PurePosixPath(urlparse(spec["url"]).path).name
    if not name or name in (".", ".."):
        raise ConfigError(f"weights stage: the {role} URL {redact(spec['url'])} names no file")
    if spec.get("md5") and spec.get("sha256"):
        raise ConfigError(f"weights stage: the {role} file has md5 and sha256; give one")
    return download(spec["url"], downloads / name, md5=spec.get("md5"), sha256=spec.get("sha256"))


def _checkpoint_prefix(paths: dict[str, Path]) -> Path:
    """The prefix of a TF checkpoint's downloaded `index` and `data` files (one name)."""
    index, data = paths.get("index"), paths.get("data")
    if index is None or data is None or not index.name.endswith(INDEX):
        raise ConfigError("weights stage: a checkpoint needs its index (.index) and data files")
    prefix = index.with_name(index.name.removesuffix(INDEX))
    if data.name != prefix.name + DATA_SHARD:
        raise ConfigError(
            f"weights stage: the data file {data.name} is not {prefix.name}{DATA_SHARD}, the "
            f"data shard of the index {index.name}"
        )
    return prefix


def _copy(family: str, location: str) -> tuple[Path, dict[str, Any]]:
    """A `path:` source: a file, folder or checkpoint prefix that must exist."""
    path = Path(location).expanduser()
    exists = path.exists() or Path(f"{path}{INDEX}").is_file()
    if not exists:
        raise DataError(f"{path}: no such file or folder (pretrained: path:{location})")
    files = [path] if path.is_file() else _checkpoint_files(path)
    return path, {
        "source": f"{PATH}{location}",
        "files": [_file_facts(f, str(f)) for f in files],
    }


def _checkpoint_files(path: Path) -> list[Path]:
    if path.is_dir():
        return sorted(f for f in path.iterdir() if f.is_file() and not f.name.endswith(".meta"))
    return sorted(f for f in path.parent.glob(f"{path.name}.*") if not f.name.endswith(".meta"))


def _file_facts(path: Path, origin: str) -> dict[str, Any]:
    return {
        "file": path.name,
        "from": redact(origin),
        "bytes": path.stat().st_size,
        "sha256": file_digest(path, "sha256"),
    }
