"""accelpipe.plan.pretrained: which converted starting weights a run's model starts from, and the
weights stage's config slice (no framework: Snakemake plans with it)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from accelpipe.config.schema import validate
from accelpipe.core.errors import ConfigError
from accelpipe.plan import pretrained

REPO = Path(__file__).resolve().parents[3]
AUGREG = "https://storage.googleapis.com/vit_models/augreg/"


@pytest.fixture(scope="module")
def defaults() -> dict:
    return validate({})


def test_the_schema_defaults_start_from_the_references_weights(defaults: dict) -> None:
    """The reference recipe: SSD from MLPerf's ResNet-34 checkpoint, Segmenter from AugReg."""
    assert defaults["ssd"]["model"]["pretrained"] == "mlperf"
    assert defaults["segmenter"]["model"]["pretrained"] == "augreg"
    files = defaults["weights"]["resnet34"]["mlperf"]
    assert files["index"]["url"].endswith("/ssd-backbone/model.ckpt-28152.index")
    assert files["data"]["url"].endswith("/ssd-backbone/model.ckpt-28152.data-00000-of-00001")
    # Habana's README lists these md5s; nothing publishes a sha256 of the checkpoint
    assert files["index"]["md5"] == "96080eb2d106f7bd4a682bde003b1436"
    assert files["data"]["md5"] == "1b7fabd0872b765da2fc60af46fe6390"
    b16 = defaults["weights"]["vit"]["augreg"]["B_16"]
    assert b16["url"] == (
        AUGREG + "B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0--imagenet2012"
        "-steps_20k-lr_0.01-res_384.npz"
    )
    assert b16["sha256"] is None and b16["md5"] is None  # none is published


@pytest.mark.parametrize("config_file", ["config.yaml", ".test/config.yaml"])
def test_shipped_and_tiny_configs_start_from_random_init(config_file: str) -> None:
    """No network in the default run or the tests: both configs say none explicitly."""
    config = validate(yaml.safe_load((REPO / config_file).read_text()))
    for workload in pretrained.FAMILIES:
        assert config[workload]["model"]["pretrained"] == "none"
        assert pretrained.base_weights(config, workload) is None


def test_names_of_the_official_and_path_sources(defaults: dict) -> None:
    assert pretrained.base_weights(defaults, "ssd") == "resnet34-mlperf"
    assert pretrained.base_weights(defaults, "segmenter") == "vit-B_16-augreg"
    assert pretrained.base_weights(defaults, "resnet50") is None
    one = pretrained.weights_name("segmenter", {"pretrained": "path:/a/x.npz", "encoder": "S_16"})
    other = pretrained.weights_name("segmenter", {"pretrained": "path:/b/x.npz", "encoder": "S_16"})
    assert one is not None and one.startswith("vit-S_16-path-") and one != other
    assert pretrained.weights_name("ssd", {"pretrained": "none", "width": 64}) is None


def test_the_slice_holds_the_active_source_alone(defaults: dict) -> None:
    ssd = pretrained.weights_slice(defaults, "resnet34-mlperf")
    assert ssd == {
        "family": "resnet34",
        "source": "mlperf",
        "files": defaults["weights"]["resnet34"]["mlperf"],
    }
    vit = pretrained.weights_slice(defaults, "vit-B_16-augreg")
    assert vit == {
        "family": "vit",
        "source": "augreg",
        "encoder": "B_16",
        "files": {"npz": defaults["weights"]["vit"]["augreg"]["B_16"]},
    }
    # another encoder's URL is not in B_16's slice: editing it re-makes nothing
    edited = copy.deepcopy(defaults)
    edited["weights"]["vit"]["augreg"]["L_16"]["url"] = "http://elsewhere/L_16.npz"
    assert pretrained.weights_slice(edited, "vit-B_16-augreg") == vit


def test_a_grid_over_pretrained_names_each_folder(defaults: dict) -> None:
    config = copy.deepcopy(defaults)
    config["segmenter"]["grid"] = {"model.pretrained": ["none", "augreg", "path:/w/ViT.npz"]}
    config = validate(config)
    runs = {
        run: pretrained.run_weights(config, "segmenter", run)
        for run in ("pretrained-none", "pretrained-augreg", "pretrained-ViT")
    }
    assert runs["pretrained-none"] is None
    assert runs["pretrained-augreg"] == "vit-B_16-augreg"
    path_name = runs["pretrained-ViT"]
    assert path_name is not None
    assert pretrained.weights_slice(config, path_name) == {
        "family": "vit",
        "source": "path:/w/ViT.npz",
        "encoder": "B_16",
    }
    assert pretrained.host_paths(config) == ["/w/ViT.npz"]
    assert pretrained.framework(config, path_name) == "tensorflow"


def test_official_weights_that_cannot_fit_are_config_errors(defaults: dict) -> None:
    narrow = validate({"ssd": {"model": {"width": 8}}})
    with pytest.raises(ConfigError, match=r"'ssd.model.pretrained': mlperf weights fit .*64"):
        pretrained.base_weights(narrow, "ssd")
    tiny = validate({"segmenter": {"model": {"encoder": "tiny"}}})
    with pytest.raises(ConfigError, match=r"'weights.vit.augreg.tiny.url': no augreg weights"):
        pretrained.weights_slice(tiny, "vit-tiny-augreg")
    with pytest.raises(ConfigError, match="no run of this config starts from weights 'nope'"):
        pretrained.weights_slice(defaults, "nope")


def test_the_schema_refuses_a_source_it_does_not_know() -> None:
    with pytest.raises(ConfigError, match=r"ssd\.model\.pretrained"):
        validate({"ssd": {"model": {"pretrained": "imagenet"}}})
    with pytest.raises(ConfigError, match=r"segmenter\.model\.pretrained"):
        validate({"segmenter": {"model": {"pretrained": "path:/not/an/npz.h5"}}})
