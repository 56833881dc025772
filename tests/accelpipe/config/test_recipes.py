"""Each workload's reference recipe as data (workloads/<workload>/recipe.yaml): the schema's
defaults are held to it, every difference says why, and docs/<workload>.md shows exactly it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from accelpipe.config import recipes, registry
from accelpipe.config.schema import validate
from accelpipe.core.errors import ConfigError

REPO = Path(__file__).resolve().parents[3]
REGENERATE = ".venv/bin/python -m accelpipe.config.recipes docs"
DEFAULTS = validate({})


@pytest.mark.parametrize("workload", list(registry.WORKLOADS))
def test_the_schema_defaults_are_the_recipe_or_say_why_not(workload: str) -> None:
    recipe = recipes.load(workload)
    assert recipe.settings and all(
        s.source.split(":")[0] in recipe.sources for s in recipe.settings
    )
    assert recipes.default_mismatches(workload, DEFAULTS[workload]) == [], (
        f"the schema's defaults moved away from {recipes.recipe_path(workload).name}: fix the "
        "default, or update the row's `ours` and say why it differs (deviation)"
    )


@pytest.mark.parametrize("workload", list(registry.WORKLOADS))
def test_docs_show_the_recipe_table_of_the_data(workload: str) -> None:
    page = (REPO / "docs" / f"{workload}.md").read_text()
    assert recipes.render(workload) in page, (
        f"docs/{workload}.md's recipe table is out of date: regenerate it with `{REGENERATE}`"
    )
    assert recipes.with_table(page, workload) == page


def test_a_changed_default_is_caught() -> None:
    changed = validate({"unet2d": {"train": {"lr": 0.003}}})["unet2d"]
    assert recipes.default_mismatches("unet2d", changed) == [
        "unet2d.train.lr (learning rate): the table says ours is 0.001, the schema's default is "
        "0.003"
    ]


def _broken(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, edit) -> None:
    data = yaml.safe_load(recipes.recipe_path("unet2d").read_text())
    edit(data)
    (tmp_path / "unet2d").mkdir()
    (tmp_path / "unet2d" / "recipe.yaml").write_text(yaml.safe_dump(data))
    monkeypatch.setattr(recipes, "RECIPES_DIR", tmp_path)
    recipes.load.cache_clear()


def _row(data: dict, setting: str) -> dict:
    return next(r for r in data["settings"] if r["setting"] == setting)


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        # a difference without its reason
        (lambda d: _row(d, "optimizer").pop("deviation"), "give exactly one of deviation"),
        # a reason on a row that does not differ
        (lambda d: _row(d, "batch").update(deviation="x"), "equal, yet it has a deviation"),
        (lambda d: _row(d, "batch").update(source="intel:x.py"), "names no entry of sources"),
        (lambda d: _row(d, "batch").pop("source"), "'source' is a required property"),
        (lambda d: d["sources"]["nvidia"].update(commit="main"), "sources.nvidia.commit"),
    ],
)
def test_a_broken_recipe_names_the_file_and_the_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, edit, needle: str
) -> None:
    _broken(tmp_path, monkeypatch, edit)
    try:
        with pytest.raises(ConfigError, match=needle) as err:
            recipes.load("unet2d")
        assert "unet2d/recipe.yaml" in str(err.value)
    finally:
        recipes.load.cache_clear()


def test_the_deep_supervision_normaliser_is_21_02_s() -> None:
    """NVIDIA's 21.02 compute_loss divides by 2 - 2^-3 = 1.875 for three outputs (21.11 on: the
    weights' sum, 1.75): our loss is that recipe's, and the table says so."""
    row = next(r for r in recipes.load("unet2d").settings if "loss weights" in r.setting)
    assert row.source == "nvidia:models/nn_unet.py" and "1.875" in row.ours
    assert not row.differs
