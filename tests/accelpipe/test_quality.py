"""Quality targets as data, and the verdict every run's metrics.json carries."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from accelpipe import registry
from accelpipe.errors import ConfigError
from accelpipe.quality import QUALITY_TARGETS, load_targets, target_for, verdict


def test_every_workload_has_its_published_target_with_source_and_definition() -> None:
    targets = load_targets()
    assert set(targets) == set(registry.WORKLOADS)
    for name, target in targets.items():
        assert target.metric == registry.workload(name).metric
        assert target.source and target.definition
        assert target.value is not None or target.note  # no figure: the note says why
    # the figures REFERENCE.md gives: MLPerf's ResNet-50 and SSD targets, NVIDIA's nnU-Net 2D
    assert (targets["resnet50"].value, targets["ssd"].value) == (0.759, 0.23)
    assert targets["unet2d"].value == 0.7321
    assert targets["swinunetr"].value is None


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
    data = yaml.safe_load(QUALITY_TARGETS.read_text())
    edit(data)
    path = tmp_path / "quality_targets.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=needle) as err:
        load_targets(path)
    assert str(path) in str(err.value)
