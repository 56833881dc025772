"""Quality targets as data, and the verdict every run's metrics.json carries."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from accelpipe.config import recipes, registry
from accelpipe.config.quality import COMPUTED, load_targets, target_for, verdict
from accelpipe.core.errors import ConfigError


def _published() -> dict:
    """Every workload's targets (its published.yaml's) as one file holding them all."""
    files = [registry.published(name) for name in registry.WORKLOADS]
    return {"targets": [t for f in files for t in yaml.safe_load(f.read_text())["targets"]]}


def test_each_target_is_read_from_its_workload_s_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A workload's target lives in workloads/<name>/published.yaml: one that lacks it is named."""
    bare = tmp_path / "published.yaml"
    bare.write_text(yaml.safe_dump({"loader": "tf.data", "targets": [], "figures": []}))
    own = registry.published
    monkeypatch.setattr(registry, "published", lambda n: bare if n == "ssd" else own(n))
    load_targets.cache_clear()
    try:
        with pytest.raises(ConfigError, match="no target for ssd") as err:
            load_targets()
    finally:
        monkeypatch.undo()
        load_targets.cache_clear()
    assert str(bare) in str(err.value)
    assert load_targets()["ssd"].metric == registry.workload("ssd").metric


def test_every_workload_has_its_published_target_with_source_and_definition() -> None:
    targets = load_targets()
    assert set(targets) == set(registry.WORKLOADS)
    for name, target in targets.items():
        assert target.metric == registry.workload(name).metric
        assert target.source and target.definition
        assert target.value is not None or target.note  # no figure: the note says why
    # MLPerf's ResNet-50 and SSD thresholds; the figures of the recipes our defaults follow:
    # NVIDIA's nnU-Net 2D at 21.02 (2b20ca80, not 22.11's 0.7321) and rstrudel's Seg-B-Mask/16
    # (not the Gaudi seed's centre-crop 0.403)
    assert (targets["resnet50"].value, targets["ssd"].value) == (0.759, 0.23)
    assert (targets["unet2d"].value, targets["unet2d"].recipe) == (
        0.73002,
        "nvidia-nnunet-21.02@2b20ca80",
    )
    assert (targets["segmenter"].value, targets["segmenter"].recipe) == (
        0.485,
        "rstrudel-segmenter@20d1bfad",
    )
    assert targets["swinunetr"].value is None


def test_every_published_target_names_its_recipe_and_how_it_was_computed() -> None:
    for name, target in load_targets().items():
        assert target.computed in COMPUTED
        # a measured figure is of our recipe, or a benchmark's threshold, or nothing published
        assert target.recipe == recipes.recipe_id(name) or target.computed in ("threshold",)


@pytest.mark.parametrize("field", ["recipe", "computed"])
def test_the_targets_file_requires_each_figure_s_recipe_and_computation(
    tmp_path: Path, field: str
) -> None:
    for where in ("target", "other"):
        data = _published()
        entry = data["targets"][0] if where == "target" else data["targets"][0]["others"][0]
        del entry[field]
        path = tmp_path / f"{where}.yaml"
        path.write_text(yaml.safe_dump(data))
        with pytest.raises(ConfigError, match=f"'{field}' is a required property"):
            load_targets(path)


def test_a_target_of_our_recipe_scored_as_our_metrics_is_comparable() -> None:
    judged = verdict({"mIoU": 0.49}, load_targets()["segmenter"])
    assert judged["reached"] is True and judged["comparable"] is True
    assert judged["recipe"] == judged["our_recipe"] == "rstrudel-segmenter@20d1bfad"
    assert (judged["computed"], judged["differences"]) == ("final", [])
    threshold = verdict({"AP": 0.2}, load_targets()["ssd"])  # MLPerf's bar, for any recipe
    assert threshold["comparable"] is True and threshold["computed"] == "threshold"


def test_a_target_of_another_recipe_is_never_comparable() -> None:
    newer = replace(load_targets()["unet2d"], value=0.7321, recipe="nvidia-nnunet-22.11@4da7bf28")
    for computed in ("final", "best_of_grid"):
        judged = verdict({"mean_dice": 0.9}, replace(newer, computed=computed))
        assert judged["reached"] is True and judged["comparable"] is False
        assert judged["differences"][0] == (
            "the target was measured with another recipe (nvidia-nnunet-22.11@4da7bf28); "
            "this run follows nvidia-nnunet-21.02@2b20ca80"
        )


def test_a_fold_judged_by_a_five_fold_best_epoch_mean_is_indicative() -> None:
    judged = verdict({"mean_dice": 0.7}, load_targets()["unet2d"])
    assert judged["reached"] is False and judged["comparable"] is False
    assert judged["differences"] == [
        "the target is each fold's best evaluation, averaged over the folds; this run's value "
        "is one run's final model"
    ]


def test_the_config_s_own_target_is_neither_comparable_nor_indicative() -> None:
    judged = verdict({"AP": 0.06}, target_for("ssd", 0.05))
    assert judged["comparable"] is None and judged["recipe"] == "config"


def test_a_configured_target_replaces_the_published_value_and_says_so() -> None:
    target = target_for("ssd", 0.05)
    assert target.value == 0.05 and "'ssd.target'" in target.source and "0.23" in target.source
    assert target_for("ssd", None) == load_targets()["ssd"]


@pytest.mark.parametrize(
    ("value", "reached"), [(0.23, True), (0.3, True), (0.2299, False), (0.0, False)]
)
def test_reached_is_the_metric_at_or_above_the_target(value: float, reached: bool) -> None:
    result = verdict({"AP": value}, load_targets()["ssd"])
    assert result["reached"] is reached and result["not_decided"] is None
    assert (result["value"], result["target"], result["metric"]) == (value, 0.23, "AP")


def test_what_cannot_be_decided_is_null_with_the_reason() -> None:
    no_figure = verdict({"mean_dice": 0.9}, load_targets()["swinunetr"])
    assert no_figure["reached"] is None and "BTCV" in no_figure["not_decided"]
    no_value = verdict({"mIoU": None}, load_targets()["segmenter"])
    assert no_value["reached"] is None and "no value of mIoU" in no_value["not_decided"]
    nan = verdict({"mIoU": float("nan")}, load_targets()["segmenter"])
    assert nan["reached"] is None


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (lambda d: d["targets"].pop(), "no target for segmenter"),
        (lambda d: d["targets"][0].update(metric="dice"), "metric is 'mean_dice', not 'dice'"),
        (lambda d: d["targets"][0].update(value=73.21), "targets/0/value"),
        (lambda d: d["targets"].append(dict(d["targets"][0])), "unet2d is listed twice"),
    ],
)
def test_a_broken_targets_file_names_itself_and_the_problem(
    tmp_path: Path, edit, needle: str
) -> None:
    data = _published()
    edit(data)
    path = tmp_path / "quality_targets.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=needle) as err:
        load_targets(path)
    assert str(path) in str(err.value)
