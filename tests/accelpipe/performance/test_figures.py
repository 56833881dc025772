"""The published figures: their catalogue (each workload's published.yaml) and a run's ratio to the
one that matches it."""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path

import pytest
import yaml

from accelpipe.config import recipes, registry
from accelpipe.core.errors import DataError
from accelpipe.devices import device_family
from accelpipe.performance.figures import (
    _SCHEMA,
    COMPUTED,
    Figure,
    figure_loader,
    load_figures,
    reference,
    run_data,
)
from tests.helpers.performance_runs import FIGURES, TRAIN


@pytest.mark.parametrize(
    ("backend", "device", "family"),
    [
        ("cuda", "NVIDIA A100-SXM4-80GB", "A100"),
        ("cuda", "Tesla V100-SXM2-16GB", "V100"),
        ("cuda", "NVIDIA H100 80GB HBM3", "H100"),
        ("rocm", "AMD Instinct MI300X", "MI300X"),
        ("gaudi", "GAUDI", "Gaudi"),
        ("gaudi", "GAUDI2", "Gaudi2"),
        ("gaudi", "Gaudi HPU (TensorFlow)", None),  # TF fallback: no card type
        ("cuda", "NVIDIA GeForce RTX 4090", None),
        ("cpu", "cpu (x86_64, 2 threads)", None),
    ],
)
def test_device_family_from_backend_and_name(backend: str, device: str, family: str) -> None:
    assert device_family(backend, device) == family


def test_reference_compares_per_card_with_the_nearest_card_count() -> None:
    rates = 1600.0
    published, note = reference("ssd", TRAIN, rates, FIGURES, "real")
    assert published == {
        "samples_per_s": 3200.0,
        "precision": "bf16",
        "device": "Gaudi",
        "batch": 128,
        "cards": 8,
        "data": "real",
        "loader": "tf.data",
        "computed": "samples_over_time",
        "software": "x",
        "recipe": recipes.recipe_id("ssd"),
        "our_recipe": recipes.recipe_id("ssd"),
        "source": "eight cards",
        "note": "",
        "comparable": True,
        "differences": [],
        "ratio": pytest.approx((1600 / 8) / (3200 / 8), rel=1e-3),
    }
    assert "per card" in note and "8 cards" in note and "comparable" in note
    two_cards = TRAIN | {"world_size": 2, "global_batch": 256}
    published, note = reference("ssd", two_cards, rates, FIGURES, "real")
    assert published["cards"] == 1 and published["ratio"] == pytest.approx(
        (1600 / 2) / 400, rel=1e-3
    )
    assert published["comparable"] is False
    assert published["differences"] == [
        "this run on 2 cards, the figure on 1 card (a per-card rate still depends on the "
        "communication between the cards)"
    ]
    assert note.endswith("indicative, not like for like: " + published["differences"][0])


def test_reference_without_a_measured_step_has_no_ratio() -> None:
    published, note = reference("ssd", TRAIN, None, FIGURES, "real")
    assert published["ratio"] is None and "no measured step" in note


def _figure(**changes: object) -> Figure:
    """The 8-card ssd figure, measured as TRAIN is (comparable), with `changes`."""
    return Figure(**asdict(FIGURES[1]) | changes)


@pytest.mark.parametrize(
    ("changes", "difference"),
    [
        ({"cards": 4}, "this run on 8 cards, the figure on 4 cards"),
        ({"batch": 64}, "batch 128 per card vs the figure's 64"),
        (
            {"computed": "mean_of_step_rates"},
            "the figure is the mean of single steps' rates, ours samples over the wall time "
            "of the measured steps",
        ),
        ({"computed": "best_epoch"}, "the figure is the fastest epoch's rate, ours samples"),
        ({"computed": "unknown"}, "the figure is computed in a way its source does not say"),
        ({"data": "synthetic"}, "the figure on synthetic data"),
        ({"data": "unknown"}, "the source does not say whether the figure ran on real"),
        ({"loader": "DALI"}, "the figure's input pipeline is DALI, ours tf.data"),
        ({"loader": "unknown"}, "the source does not name the figure's input pipeline"),
    ],
)
def test_a_figure_is_comparable_only_where_every_condition_matches(
    changes: dict, difference: str
) -> None:
    published, note = reference("ssd", TRAIN, 1600.0, [_figure()], "real")
    assert published["comparable"] is True and published["differences"] == []
    published, note = reference("ssd", TRAIN, 1600.0, [_figure(**changes)], "real")
    assert published["comparable"] is False
    assert len(published["differences"]) == 1
    assert published["differences"][0].startswith(difference)
    per_card = published["samples_per_s"] / published["cards"]
    assert published["ratio"] == pytest.approx(1600 / 8 / per_card)  # still given
    assert "indicative" in note and published["differences"][0] in note


def test_every_difference_is_listed() -> None:
    figure = _figure(cards=1, batch=64, computed="best_epoch", data="unknown", loader="DALI")
    published, note = reference("ssd", TRAIN, 1600.0, [figure], "synthetic")
    assert published["comparable"] is False
    assert [d.split(" ")[:3] for d in published["differences"]] == [
        ["this", "run", "on"],  # 8 cards vs 1
        ["batch", "128", "per"],
        ["the", "figure", "is"],  # the best epoch
        ["this", "run", "on"],  # synthetic data
        ["the", "source", "does"],  # the figure's data
        ["the", "figure's", "input"],  # DALI
    ]
    assert "this run on synthetic data" in published["differences"][3]
    assert all(d in note for d in published["differences"])


def test_a_best_epoch_figure_is_never_comparable_with_ours() -> None:
    """Everything else alike, any run and any data: the best epoch is not samples over time."""
    best = _figure(computed="best_epoch")
    for train in (TRAIN, TRAIN | {"world_size": 1, "global_batch": 128}):
        for data in ("real", "synthetic", "unknown"):
            published, _ = reference("ssd", train, 1600.0, [best], data)
            assert published["comparable"] is False
            assert any("fastest epoch" in d for d in published["differences"])


@pytest.mark.parametrize(
    ("data", "said"),
    [
        ("synthetic", "this run on synthetic data"),
        ("unknown", "whether this run's data was real or synthetic is not recorded"),
    ],
)
def test_a_run_on_synthetic_or_unrecorded_data_is_indicative(data: str, said: str) -> None:
    published, _ = reference("ssd", TRAIN, 1600.0, [_figure()], data)
    assert published["comparable"] is False and published["differences"][0].startswith(said)


@pytest.mark.parametrize(
    ("source", "data"),
    [("synthetic", "synthetic"), ("coco", "real"), ("path:/data/coco", "real")],
)
def test_the_run_data_comes_from_the_publish_slice_dataset_source(source: str, data: str) -> None:
    assert run_data({"datasets": {"coco": {"source": source}}}, "ssd") == data
    assert run_data({}, "ssd") == "unknown"  # a slice without its dataset


def test_among_equally_near_figures_the_one_with_fewer_differences_wins() -> None:
    worse = _figure(computed="mean_of_step_rates", source="worse")
    better = _figure(source="better")
    for figures in ([worse, better], [better, worse]):
        published, _ = reference("ssd", TRAIN, 1600.0, figures, "real")
        assert published["source"] == "better" and published["comparable"] is True
    first, second = _figure(source="first"), _figure(source="second")
    published, _ = reference("ssd", TRAIN, 1600.0, [first, second], "real")
    assert published["source"] == "first"


A100_FP32 = {
    "backend": "cuda",
    "device": "NVIDIA A100-SXM4-80GB",
    "precision": "fp32",
    "world_size": 1,
    "global_batch": 64,
}
UNET_FP32 = Figure(
    "unet2d", 800.0, "slices/s", "fp32", "A100", 1, 64, "TF32 figure",
    data="real", loader="torch DataLoader", computed="samples_over_time", software="x",
    recipe=recipes.recipe_id("unet2d"),
)  # fmt: skip


@pytest.mark.parametrize(
    ("switches", "difference"),
    [
        ({"matmul": True, "conv": True}, None),
        ({"matmul": False, "conv": False}, "this run's products ran mostly in full fp32"),
        (None, "whether this run's was is not recorded"),
    ],
)
def test_an_fp32_figure_on_an_a100_is_tf32(switches: dict | None, difference: str | None) -> None:
    train = A100_FP32 | {"gemm": {"tf32_switches": switches} if switches else None}
    published, _ = reference("unet2d", train, 700.0, [UNET_FP32], "real")
    if difference is None:
        assert published["comparable"] is True
    else:
        assert published["differences"] == [f"the figure's fp32 is TF32; {difference}"]


@pytest.mark.parametrize(
    ("workload", "changes", "said"),
    [
        ("ssd", {"precision": "fp16"}, "no published figure for ssd at fp16 on Gaudi"),
        ("resnet50", {}, "no published figure for resnet50 at bf16 on Gaudi"),
        ("ssd", {"backend": "cpu", "device": "cpu (x86_64)"}, "cpu"),
        ("ssd", {"device": "Gaudi HPU (TensorFlow)"}, "does not say"),
    ],
)
def test_no_reference_says_why(workload: str, changes: dict, said: str) -> None:
    published, note = reference(workload, TRAIN | changes, None, FIGURES, "real")
    assert published is None and said in note


def test_the_shipped_figures_load_and_each_names_a_family_we_can_match() -> None:
    figures = load_figures()
    assert figures
    for figure in figures:
        backend, name = ("gaudi", "GAUDI") if figure.device == "Gaudi" else ("cuda", figure.device)
        assert device_family(backend, name) == figure.device


def test_the_shipped_figures_keep_their_conditions() -> None:
    figures = load_figures()
    for figure in figures:
        assert figure.data in ("real", "synthetic", "unknown")
        assert figure.computed in COMPUTED
        assert figure.loader and figure.software and figure.source
        unknown = [k for k in ("data", "loader", "computed") if getattr(figure, k) == "unknown"]
        if unknown or figure.software == "unknown":  # the note says what the source leaves out
            assert figure.note, figure
        if figure.computed not in ("unknown", "samples_over_time"):
            assert figure.computed_note, figure  # how the source's code computes it
    shipped: dict[tuple, Figure] = {}  # the first listed of each
    for f in figures:
        shipped.setdefault((f.workload, f.device, f.precision, f.cards, f.batch), f)
    # the figures added since (REFERENCE.md, "Published figures added")
    nnunet = shipped["unet2d", "A100", "fp16", 1, 64]  # the newer (729963d) one is listed first
    assert nnunet.samples_per_s == 1238.68 and "729963d" in nnunet.source
    assert (nnunet.data, nnunet.loader, nnunet.computed) == ("real", "DALI", "samples_over_time")
    assert "22.11" in nnunet.software
    assert shipped["unet2d", "A100", "fp32", 8, 64].samples_per_s == 6246.95
    for precision, cards, rate in [("fp32", 1, 938), ("fp16", 1, 2470), ("fp32", 8, 7248)]:
        rn50 = shipped["resnet50", "A100", precision, cards, 256]
        assert rn50.samples_per_s == rate and rn50.computed == "mean_of_step_rates"
    ssd = shipped["ssd", "A100", "fp16", 8, 114]  # MLPerf v1.0: global batch 912 = 8 x 114
    assert ssd.computed == "median_of_interval_rates" and "MXNet" in ssd.software
    h100 = shipped["resnet50", "H100", "fp16", 8, 400]  # MLPerf v3.0
    assert h100.samples_per_s == 56056 and h100.loader == "DALI"
    assert not [f for f in figures if f.workload == "segmenter"]  # ViT-B/16 at 224: left out


def test_the_definitions_and_loaders_cover_the_schema_and_the_workloads() -> None:
    schema = yaml.safe_load(_SCHEMA.read_text())
    computed = schema["properties"]["figures"]["items"]["properties"]["computed"]["enum"]
    assert sorted(computed) == sorted(COMPUTED)
    for name in registry.WORKLOADS:  # each workload's published.yaml names its loader
        assert figure_loader(name) in ("torch DataLoader", "tf.data")


def test_the_figures_are_each_workload_s_and_a_loader_is_required(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The catalogue is the union of the workloads' published.yaml (in registry order); one
    without its loader fails naming the file."""
    figures = load_figures()
    assert [f.workload for f in figures] == sorted(
        (f.workload for f in figures), key=list(registry.WORKLOADS).index
    )
    bare = tmp_path / "published.yaml"
    bare.write_text(yaml.safe_dump({"targets": [], "figures": []}))
    monkeypatch.setattr(registry, "published", lambda name: bare)
    figure_loader.cache_clear()
    try:
        with pytest.raises(DataError, match=r"published\.yaml: key 'loader'"):
            figure_loader("ssd")
    finally:
        monkeypatch.undo()
        figure_loader.cache_clear()


def test_a_real_a100_unet2d_run_meets_the_nnunet_figure_of_its_recipe_not_its_loader() -> None:
    train = A100_FP32 | {"precision": "fp16"}
    figures = [f for f in load_figures() if f.workload == "unet2d"]
    published, _ = reference("unet2d", train, 1000.0, figures, "real")
    # 2b20ca80's 1064.46 (our recipe) wins over 22.11's 1238.68 at the same cards and batch
    assert published["samples_per_s"] == 1064.46
    assert published["recipe"] == published["our_recipe"] == "nvidia-nnunet-21.02@2b20ca80"
    assert published["differences"] == [
        "the figure's input pipeline is DALI, ours torch DataLoader"
    ]


def test_a_figure_of_another_recipe_is_never_comparable() -> None:
    """NVIDIA's 22.11 table (the 1040 slices/s among it) ran another release than the 21.02
    recipe our unet2d follows: a run matching every other condition is still indicative."""
    train = A100_FP32 | {"precision": "fp16", "global_batch": 32}
    newer = [f for f in load_figures() if f.samples_per_s == 1040.58]
    assert [f.recipe for f in newer] == ["nvidia-nnunet-22.11@4da7bf28"]
    alike = replace(newer[0], loader=figure_loader("unet2d"))  # only the recipe differs
    published, note = reference("unet2d", train, 1000.0, [alike], "real")
    assert published["comparable"] is False
    assert published["differences"] == [
        "the figure ran another recipe (nvidia-nnunet-22.11@4da7bf28); this run follows "
        "nvidia-nnunet-21.02@2b20ca80"
    ]
    assert published["differences"][0] in note
    ours = replace(alike, recipe=recipes.recipe_id("unet2d"))
    assert reference("unet2d", train, 1000.0, [ours], "real")[0]["comparable"]


def _bad_figures(tmp_path: Path, **changes: object) -> Path:
    entry = asdict(FIGURES[0]) | changes
    path = tmp_path / "reference_figures.yaml"
    path.write_text(yaml.safe_dump({"figures": [entry]}))
    return path


@pytest.mark.parametrize(
    ("changes", "key"),
    [
        ({"precision": "amp"}, "figures.0.precision"),
        ({"cards": 0}, "figures.0.cards"),
        ({"samples_per_s": "fast"}, "figures.0.samples_per_s"),
        ({"workload": "bert"}, "figures.0.workload"),
        ({"typo": 1}, "figures.0"),
        ({"data": "imagenet"}, "figures.0.data"),
        ({"computed": "mean"}, "figures.0.computed"),
        ({"loader": ""}, "figures.0.loader"),
        ({"software": 22.11}, "figures.0.software"),
    ],
)
def test_a_bad_figure_names_the_file_and_key(tmp_path: Path, changes: dict, key: str) -> None:
    path = _bad_figures(tmp_path, **changes)
    with pytest.raises(DataError, match=rf"reference_figures\.yaml: key '{key}'"):
        load_figures(path)


@pytest.mark.parametrize("condition", ["data", "loader", "computed", "software", "recipe"])
def test_a_figure_without_a_condition_names_it(tmp_path: Path, condition: str) -> None:
    entry = asdict(FIGURES[0])
    del entry[condition]
    path = tmp_path / "reference_figures.yaml"
    path.write_text(yaml.safe_dump({"figures": [entry]}))
    with pytest.raises(DataError, match=rf"key 'figures.0': '{condition}' is a required"):
        load_figures(path)
