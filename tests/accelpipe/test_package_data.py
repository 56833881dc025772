"""Every data file the package reads ships with it: an installed accelpipe (an image, an
offline wheelhouse) has only what pyproject's package-data names."""

from __future__ import annotations

import tomllib

from accelpipe.core.codegraph import PACKAGE_DIR

REPO = PACKAGE_DIR.parents[1]


def test_every_yaml_of_the_package_is_package_data() -> None:
    patterns = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"
    ]["accelpipe"]
    shipped = {path for pattern in patterns for path in PACKAGE_DIR.glob(pattern)}
    data = {path for path in PACKAGE_DIR.rglob("*") if path.suffix in (".yaml", ".yml", ".json")}
    assert data, "no data files found: is PACKAGE_DIR the package?"
    assert sorted(str(p.relative_to(PACKAGE_DIR)) for p in data - shipped) == []
