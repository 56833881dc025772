"""The weights stage end to end through the CLI (`accelpipe weights`): files in the references'
real formats, written here, served from 127.0.0.1 (or read by `path:`), downloaded and
checked, converted, and loaded into the models; the loaded tensors equal the files'."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from accelpipe.cli import main
from accelpipe.core.keras2 import keras, tf
from accelpipe.models import segmenter, ssd_resnet34, vit, vit_npz
from accelpipe.models.pretrained_npz import WEIGHTS_FILE
from tests.helpers.http_server import FileServer
from tests.helpers.pretrained_files import (
    augreg_tensors,
    resnet34_tf1_tensors,
    write_npz,
    write_tf1_checkpoint,
)

pytestmark = pytest.mark.tensorflow

PREFIX = "model.ckpt-28152"
TINY = vit.ENCODERS["tiny"]  # patch 8, width 64, 2 layers, 2 heads, mlp 128


def _md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _augreg(grid: int = 6, seed: int = 0) -> dict[str, np.ndarray]:
    return augreg_tensors(TINY.hidden, TINY.layers, TINY.heads, TINY.mlp, TINY.patch, grid, seed)


@pytest.fixture(scope="module")
def www(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The reference's ResNet-34 checkpoint (full size, every tensor of model.ckpt-28152) and
    an AugReg npz of the tiny encoder, as their hosts serve them."""
    root = tmp_path_factory.mktemp("www")
    write_tf1_checkpoint(root / PREFIX, resnet34_tf1_tensors(64, seed=0))
    write_npz(root / "Ti-augreg.npz", _augreg())
    return root


@pytest.fixture(scope="module")
def server(www: Path) -> Iterator[FileServer]:
    with FileServer(www) as srv:
        yield srv


def _errors(capsys: pytest.CaptureFixture[str]) -> list[str]:
    """The error lines the CLI wrote (it logs errors to the console as one line each)."""
    return [line for line in capsys.readouterr().err.splitlines() if " ERROR " in line]


def _stage(tmp_path: Path, name: str, cfg: dict) -> tuple[int, Path]:
    out = tmp_path / "weights" / name
    argv = ["weights", "--name", name, "--config-json", json.dumps(cfg), "--out", str(out)]
    argv += ["--downloads", str(tmp_path / "downloads" / name)]
    return main(argv), out


def _resnet34_files(server: FileServer, www: Path, **data_checksum: str) -> dict:
    data = f"{PREFIX}.data-00000-of-00001"
    return {
        "index": {"url": server.url(f"{PREFIX}.index"), "md5": _md5(www / f"{PREFIX}.index")},
        "data": {"url": server.url(data), **(data_checksum or {"md5": _md5(www / data)})},
    }


def test_mlperf_checkpoint_is_downloaded_checked_converted_and_loaded(
    server: FileServer, www: Path, tmp_path: Path
) -> None:
    cfg = {"family": "resnet34", "source": "mlperf", "files": _resnet34_files(server, www)}
    code, out = _stage(tmp_path, "resnet34-mlperf", cfg)
    assert code == 0
    stage = json.loads((out / "stage.json").read_text())
    assert stage["source"] == "mlperf" and stage["converted"]["width"] == 64
    assert {f["file"]: f["sha256"] for f in stage["files"]} == {
        f"{PREFIX}.index": _sha256(www / f"{PREFIX}.index"),
        f"{PREFIX}.data-00000-of-00001": _sha256(www / f"{PREFIX}.data-00000-of-00001"),
    }
    keras.backend.clear_session()
    model = ssd_resnet34.build_ssd300(num_classes=81, width=64)
    facts = ssd_resnet34.load_pretrained(model, out)
    reader = tf.train.load_checkpoint(str(www / PREFIX))
    layers = ssd_resnet34.backbone_layers(model)
    pairs = ssd_resnet34._tf1_variable_names(layers)
    assert facts["tensors"] == len(pairs) == 145  # 29 convs + 29 BNs x 4: groups 1-3 only
    for variable, name in pairs:  # the reference maps its root onto resnet34/
        assert np.array_equal(variable.numpy(), reader.get_tensor(name)), name
    # a second run finds the download and the conversion made: no request
    served = len(server.log)
    assert _stage(tmp_path, "resnet34-mlperf", cfg)[0] == 0
    assert len(server.log) == served


def test_a_corrupt_download_fails_naming_the_checksum(
    server: FileServer, www: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = _resnet34_files(server, www, sha256="0" * 64)
    code, out = _stage(
        tmp_path, "resnet34-mlperf", {"family": "resnet34", "source": "mlperf", "files": files}
    )
    assert code == 2 and not out.exists()
    errors = _errors(capsys)
    assert (
        len(errors) == 1 and "sha256 mismatch" in errors[0] and f"expected {'0' * 64}" in errors[0]
    )


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        (
            lambda t: t.pop("batch_normalization_3/moving_variance"),
            "no variable batch_normalization_3/moving_variance",
        ),
        (
            lambda t: t.update({"conv2d_2/kernel": np.zeros((3, 3, 64, 32), np.float32)}),
            "conv2d_2/kernel has shape (3, 3, 64, 32), the backbone needs (3, 3, 64, 64)",
        ),
    ],
    ids=["missing key", "wrong shape"],
)
def test_a_checkpoint_that_does_not_fit_names_its_first_mismatch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change, needle: str
) -> None:
    """A `path:` copy (no server) of a checkpoint with a tensor missing or misshapen: one
    error line naming it, nothing made."""
    # the stem and the first block: the stage stops at the first mismatch
    tensors = dict(list(resnet34_tf1_tensors(64).items())[:20])
    change(tensors)
    folder = tmp_path / "copy"
    folder.mkdir()
    write_tf1_checkpoint(folder / PREFIX, tensors)
    code, out = _stage(
        tmp_path, "resnet34-path-x", {"family": "resnet34", "source": f"path:{folder}"}
    )
    errors = _errors(capsys)
    assert code == 2 and not out.exists()
    assert len(errors) == 1 and "\n" not in errors[0] and needle in errors[0], errors


def test_augreg_npz_is_converted_and_loaded_at_any_grid(
    server: FileServer, www: Path, tmp_path: Path
) -> None:
    npz = www / "Ti-augreg.npz"
    files = {"npz": {"url": server.url(npz.name), "sha256": _sha256(npz)}}
    cfg = {"family": "vit", "source": "augreg", "encoder": "tiny", "files": files}
    code, out = _stage(tmp_path, "vit-tiny-augreg", cfg)
    assert code == 0
    stage = json.loads((out / "stage.json").read_text())
    assert stage["converted"]["grid"] == [6, 6]
    assert stage["converted"]["keys_ignored"] == ["head/bias", "head/kernel"]
    source = dict(np.load(npz))
    for image_size in (48, 32):  # the npz's own 6 x 6 grid, then 4 x 4 (resized)
        keras.backend.clear_session()
        model = (
            vit.build_vit(image_size, "tiny")
            if image_size == 48
            else segmenter.build_segmenter(150, image_size, encoder="tiny", decoder="mask")
        )
        facts = vit_npz.load_converted(model, out)
        assert facts["pos_grid_to"] == [image_size // 8] * 2
        _assert_encoder_equals(model, source, image_size // 8)


def _assert_encoder_equals(model: keras.Model, source: dict, grid: int) -> None:
    """Every encoder tensor of the model equals the AugReg file's (reshaped to Keras' layout;
    the position grid resized bilinearly where the model's differs)."""
    d = TINY.hidden
    variables = vit.encoder_variables(model)
    assert np.array_equal(variables["embedding/kernel"].numpy(), source["embedding/kernel"])
    assert np.array_equal(variables["class_token/cls"].numpy(), source["cls"])
    block = "Transformer_encoderblock_1/MultiHeadDotProductAttention_1"
    flax = "Transformer/encoderblock_1/MultiHeadDotProductAttention_1"
    assert np.array_equal(
        variables[f"{block}/query/kernel"].numpy(), source[f"{flax}/query/kernel"].reshape(d, d)
    )
    assert np.array_equal(
        variables[f"{block}/out/kernel"].numpy(), source[f"{flax}/out/kernel"].reshape(d, d)
    )
    mlp = "Transformer_encoderblock_0/MlpBlock_3/Dense_1/kernel"
    assert np.array_equal(
        variables[mlp].numpy(), source["Transformer/encoderblock_0/MlpBlock_3/Dense_1/kernel"]
    )
    assert np.array_equal(
        variables["Transformer_encoder_norm/gamma"].numpy(),
        source["Transformer/encoder_norm/scale"],
    )
    pos = source["Transformer/posembed_input/pos_embedding"]
    want = pos if grid == 6 else vit_npz.resize_pos_embedding(pos, (grid, grid))
    assert np.array_equal(variables[vit.POS_EMBEDDING].numpy(), want)
    assert len(variables) == 4 + 2 + TINY.layers * 16


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        (
            lambda a: a.pop("Transformer/encoderblock_1/MlpBlock_3/Dense_0/bias"),
            "no key Transformer/encoderblock_1/MlpBlock_3/Dense_0/bias",
        ),
        (
            lambda a: a.update({"embedding/kernel": np.zeros((16, 16, 3, 64), np.float32)}),
            "embedding/kernel has shape (16, 16, 3, 64), the model needs (8, 8, 3, 64)",
        ),
    ],
    ids=["missing key", "wrong shape"],
)
def test_an_npz_that_does_not_fit_names_its_first_mismatch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change, needle: str
) -> None:
    """A `path:` npz (no server) with a key missing or misshapen: one line naming it."""
    arrays = _augreg(grid=4)
    change(arrays)
    npz = write_npz(tmp_path / "ViT-tiny.npz", arrays)
    cfg = {"family": "vit", "source": f"path:{npz}", "encoder": "tiny"}
    code, out = _stage(tmp_path, "vit-tiny-path-x", cfg)
    errors = _errors(capsys)
    assert code == 2 and not out.exists()
    assert len(errors) == 1 and "\n" not in errors[0] and needle in errors[0], errors


def test_a_path_npz_needs_no_server(tmp_path: Path) -> None:
    npz = write_npz(tmp_path / "ViT-tiny.npz", _augreg(grid=4, seed=5))
    code, out = _stage(
        tmp_path, "vit-tiny-path-x", {"family": "vit", "source": f"path:{npz}", "encoder": "tiny"}
    )
    assert code == 0
    stage = json.loads((out / "stage.json").read_text())
    assert stage["source"] == f"path:{npz}"
    assert stage["files"] == [
        {"file": npz.name, "from": str(npz), "bytes": npz.stat().st_size, "sha256": _sha256(npz)}
    ]
    keras.backend.clear_session()
    model = vit.build_vit(32, "tiny")
    vit_npz.load_converted(model, out)
    _assert_encoder_equals(model, dict(np.load(npz)), 4)
    assert (out / WEIGHTS_FILE).is_file()
