"""Archive limits as the config gives them: the schema's defaults, or tighter ones for tests."""

from __future__ import annotations

from typing import Any

from accelpipe.config.schema import schema
from accelpipe.datasets.archives import ArchiveLimits


def limits_block(**overrides: float) -> dict[str, Any]:
    """An `archive` config block (definitions.archive_limits): defaults, then `overrides`."""
    properties = schema()["definitions"]["archive_limits"]["properties"]
    return {key: node["default"] for key, node in properties.items()} | overrides


def schema_limits(**overrides: float) -> ArchiveLimits:
    """ArchiveLimits of `limits_block(**overrides)`, as set at `datasets.test.archive`."""
    return ArchiveLimits.from_config(limits_block(**overrides), "datasets.test.archive")
