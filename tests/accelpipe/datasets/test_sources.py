"""The one raw-source dispatch every dataset uses (accelpipe.datasets.sources.make_raw)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from accelpipe import datasets
from accelpipe.config import registry
from accelpipe.config.schema import slice_schema
from accelpipe.core.errors import ConfigError
from accelpipe.datasets.sources import RawSources, make_raw

BLOCK = {"synthetic": {"seed": 1}, "download": {"url": "http://127.0.0.1/x.zip"}}


def _recorded() -> tuple[RawSources, list[tuple[Any, ...]]]:
    calls: list[tuple[Any, ...]] = []
    sources = RawSources(
        dataset="demo",
        official="mirror",
        settings="download",
        synthesize=lambda block, out, downloads: calls.append(("synthetic", block, out, downloads)),
        fetch=lambda block, out, downloads: calls.append(("mirror", block, out, downloads)),
        link=lambda location, out: calls.append(("path", location, out)),
        check=lambda out: calls.append(("check", out)) or {"items": 3},
    )
    return sources, calls


@pytest.mark.parametrize(
    ("source", "call", "kind"),
    [
        ("synthetic", ("synthetic", BLOCK["synthetic"], Path("raw"), Path("dl")), "synthetic"),
        ("mirror", ("mirror", BLOCK["download"], Path("raw"), Path("dl")), "mirror"),
        ("path:/data/demo", ("path", "/data/demo", Path("raw")), "path"),
    ],
)
def test_each_source_gets_its_block_and_the_check_gives_the_facts(
    source: str, call: tuple, kind: str
) -> None:
    sources, calls = _recorded()
    facts = make_raw(sources, {"source": source, **BLOCK}, Path("raw"), "dl")
    assert calls == [call, ("check", Path("raw"))]
    assert facts == {"source": kind, "items": 3}


def test_an_unknown_source_names_the_key_and_the_known_ones() -> None:
    sources, calls = _recorded()
    with pytest.raises(ConfigError) as err:
        make_raw(sources, {"source": "ftp", **BLOCK}, Path("raw"), Path("dl"))
    assert str(err.value) == (
        "datasets.demo.source: unknown source 'ftp' (synthetic | mirror | path:<folder>)"
    )
    assert calls == []


@pytest.mark.parametrize("name", sorted(registry.DATASETS))
def test_every_dataset_describes_the_sources_its_schema_allows(name: str) -> None:
    sources = datasets.get(name).SOURCES
    block = slice_schema("raw", dataset=name)["properties"]
    assert sources.dataset == name
    assert re.fullmatch(block["source"]["pattern"], sources.official)
    assert not re.fullmatch(block["source"]["pattern"], "ftp")
    assert {"synthetic", sources.settings} <= set(block)
