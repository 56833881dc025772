"""Tests for the vit-keras / original-ViT npz loader: a hand-built npz in the real (Flax) key
layout lands in the right layers, position grid resizing, round trip, provenance facts and
one-line errors (sha256, missing key, shape, not an npz)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from accelpipe.core.errors import DataError
from accelpipe.core.keras2 import keras, tf
from accelpipe.models import vit_npz
from accelpipe.models.segmenter import build_segmenter
from accelpipe.models.vit import build_vit

pytestmark = pytest.mark.tensorflow

D, HEADS, MLP, LAYERS, PATCH = 64, 2, 128, 2, 8  # the "tiny" encoder
IGNORED = ["head/bias", "head/kernel", "pre_logits/bias", "pre_logits/kernel"]


def flax_npz(grid: int = 2, d: int = D, heads: int = HEADS, seed: int = 0) -> dict:
    """Arrays as the original ViT / vit-keras npz stores them (written by hand, not save_npz)."""
    rng = np.random.default_rng(seed)
    r = lambda *shape: rng.normal(size=shape).astype(np.float32)  # noqa: E731
    hd = d // heads
    pos = r(1, 1 + grid * grid, d)
    pos[0, 1:] = (2 * (np.arange(grid * grid) // grid) + np.arange(grid * grid) % grid)[:, None]
    arrays = {"cls": r(1, 1, d), "embedding/kernel": r(PATCH, PATCH, 3, d),
              "embedding/bias": r(d), vit_npz.POS_KEY: pos,
              "Transformer/encoder_norm/scale": r(d), "Transformer/encoder_norm/bias": r(d),
              "pre_logits/kernel": r(d, d), "pre_logits/bias": r(d),
              "head/kernel": r(d, 10), "head/bias": r(10)}  # fmt: skip
    for i in range(LAYERS):
        b = f"Transformer/encoderblock_{i}"
        a = f"{b}/MultiHeadDotProductAttention_1"
        for part in ("LayerNorm_0", "LayerNorm_2"):
            arrays.update({f"{b}/{part}/scale": r(d), f"{b}/{part}/bias": r(d)})
        for part in ("query", "key", "value"):
            arrays.update({f"{a}/{part}/kernel": r(d, heads, hd), f"{a}/{part}/bias": r(heads, hd)})
        arrays.update({f"{a}/out/kernel": r(heads, hd, d), f"{a}/out/bias": r(d)})
        arrays.update({f"{b}/MlpBlock_3/Dense_0/kernel": r(d, MLP),
                       f"{b}/MlpBlock_3/Dense_0/bias": r(MLP),
                       f"{b}/MlpBlock_3/Dense_1/kernel": r(MLP, d),
                       f"{b}/MlpBlock_3/Dense_1/bias": r(d)})  # fmt: skip
    return arrays


def write(path: Path, arrays: dict) -> Path:
    with open(path, "wb") as f:
        np.savez(f, **arrays)
    return path


@pytest.fixture(scope="module")
def model() -> keras.Model:
    keras.backend.clear_session()
    keras.utils.set_random_seed(0)  # one init every run: tolerances hold for it
    return build_vit(32, "tiny")  # 4 x 4 grid


@pytest.fixture(scope="module")
def arrays() -> dict:
    return flax_npz()


@pytest.fixture
def npz(tmp_path: Path, arrays: dict) -> Path:
    return write(tmp_path / "ViT-tiny_imagenet21k.npz", arrays)


def test_hand_built_npz_lands_in_the_right_layers(model, arrays, npz) -> None:
    facts = vit_npz.load_pretrained(model, npz)
    att = model.get_layer("Transformer_encoderblock_1").attention
    query = arrays["Transformer/encoderblock_1/MultiHeadDotProductAttention_1/query/kernel"]
    np.testing.assert_array_equal(att.query.kernel[5, 1 * 32 + 7], query[5, 1, 7])
    np.testing.assert_array_equal(att.query.kernel, query.reshape(D, D))
    out = arrays["Transformer/encoderblock_1/MultiHeadDotProductAttention_1/out/kernel"]
    np.testing.assert_array_equal(att.out.kernel[1 * 32 + 7, 5], out[1, 7, 5])
    bias = arrays["Transformer/encoderblock_1/MultiHeadDotProductAttention_1/value/bias"]
    np.testing.assert_array_equal(att.value.bias, bias.reshape(D))
    block0 = model.get_layer("Transformer_encoderblock_0")
    np.testing.assert_array_equal(
        block0.norm_2.gamma, arrays["Transformer/encoderblock_0/LayerNorm_2/scale"]
    )
    np.testing.assert_array_equal(
        block0.mlp_block.dense_1.kernel,
        arrays["Transformer/encoderblock_0/MlpBlock_3/Dense_1/kernel"],
    )
    np.testing.assert_array_equal(model.get_layer("embedding").kernel, arrays["embedding/kernel"])
    np.testing.assert_array_equal(model.get_layer("class_token").cls, arrays["cls"])
    assert facts == {"file": str(npz), "sha256": hashlib.sha256(npz.read_bytes()).hexdigest(),
                     "tensors_loaded": len(model.trainable_variables), "keys_ignored": IGNORED,
                     "pos_grid_from": [2, 2], "pos_grid_to": [4, 4]}  # fmt: skip


def test_flax_heads_give_the_same_attention_projections(model, arrays, npz) -> None:
    # Flax: q[t, h, k] = sum_d x[t, d] K[d, h, k] + b[h, k]; our Dense then the head split.
    vit_npz.load_pretrained(model, npz)
    att = model.get_layer("Transformer_encoderblock_0").attention
    x = np.random.default_rng(1).normal(size=(1, 5, D)).astype(np.float32)
    a = "Transformer/encoderblock_0/MultiHeadDotProductAttention_1"
    flax_q = np.einsum("td,dhk->thk", x[0], arrays[f"{a}/query/kernel"]) + arrays[f"{a}/query/bias"]
    ours = att._split(att.query(tf.constant(x)))[0].numpy().transpose(1, 0, 2)  # [T, heads, k]
    np.testing.assert_allclose(ours, flax_q, atol=1e-4)
    y = np.random.default_rng(2).normal(size=(5, HEADS, D // HEADS)).astype(np.float32)
    flax_out = np.einsum("thk,hkd->td", y, arrays[f"{a}/out/kernel"]) + arrays[f"{a}/out/bias"]
    np.testing.assert_allclose(att.out(tf.constant(y.reshape(1, 5, D)))[0], flax_out, atol=1e-4)


def test_position_grid_is_resized_bilinearly_with_the_cls_kept(model, arrays, npz) -> None:
    vit_npz.load_pretrained(model, npz)
    pos = model.get_layer("Transformer_posembed_input").pos_embedding.numpy()
    np.testing.assert_array_equal(pos[0, 0], arrays[vit_npz.POS_KEY][0, 0])
    # 2 x 2 grid with value 2 * row + col -> 4 x 4, half-pixel centres (torch
    # align_corners=False): per axis 0, 0.25, 0.75, 1 of the way from the first to the last.
    f = np.array([0.0, 0.25, 0.75, 1.0])
    expected = (2 * f[:, None] + f[None, :]).reshape(16)
    np.testing.assert_allclose(pos[0, 1:], np.repeat(expected[:, None], D, axis=1), atol=1e-6)


def test_round_trip_through_save_npz(tmp_path: Path, model, npz) -> None:
    vit_npz.load_pretrained(model, npz)
    saved = vit_npz.save_npz(model, tmp_path / "export")
    assert saved == tmp_path / "export"  # no ".npz" appended
    with np.load(saved) as data:
        key = data["Transformer/encoderblock_1/MultiHeadDotProductAttention_1/key/kernel"]
        assert key.shape == (D, HEADS, D // HEADS)
        assert data[vit_npz.POS_KEY].shape == (1, 17, D) and "head/kernel" not in data.files
    other = build_vit(32, "tiny")
    facts = vit_npz.load_pretrained(other, saved)
    assert facts["keys_ignored"] == [] and facts["pos_grid_from"] == [4, 4]
    for a, b in zip(model.weights, other.weights, strict=True):
        np.testing.assert_array_equal(a, b)
    x = tf.random.normal([1, 32, 32, 3])
    np.testing.assert_array_equal(model(x), other(x))


def test_segmenter_encoder_loads_and_decoder_is_untouched(npz) -> None:
    segmenter = build_segmenter(3, 32, "tiny", "mask", decoder_layers=1)
    before = segmenter.get_layer("proj_dec").kernel.numpy()
    facts = vit_npz.load_pretrained(segmenter, npz)
    assert facts["tensors_loaded"] == 38
    np.testing.assert_array_equal(segmenter.get_layer("proj_dec").kernel, before)


def test_sha256_checked(model, npz) -> None:
    digest = hashlib.sha256(npz.read_bytes()).hexdigest()
    assert vit_npz.load_pretrained(model, npz, sha256=digest.upper())["sha256"] == digest
    with pytest.raises(DataError) as err:
        vit_npz.load_pretrained(model, npz, sha256="0" * 64)
    assert str(err.value) == f"{npz}: sha256 {digest} does not match the expected {'0' * 64}"


def test_missing_key_names_the_file_and_key_and_assigns_nothing(tmp_path, model, arrays) -> None:
    key = "Transformer/encoderblock_1/MlpBlock_3/Dense_0/bias"
    path = write(tmp_path / "partial.npz", {k: v for k, v in arrays.items() if k != key})
    before = [w.numpy() for w in model.weights]
    with pytest.raises(DataError, match=f"^{path}: no key {key} "):
        vit_npz.load_pretrained(model, path)
    for w, b in zip(model.weights, before, strict=True):
        np.testing.assert_array_equal(w, b)


def test_shape_mismatch_names_the_key_and_both_shapes(tmp_path, model) -> None:
    wide = write(tmp_path / "wide.npz", flax_npz(d=128, heads=2))  # e.g. L_16 into B_16
    match = r"wide.npz: cls has shape \(1, 1, 128\), the model needs \(1, 1, 64\)$"
    with pytest.raises(DataError, match=match):
        vit_npz.load_pretrained(model, wide)
    heads = write(tmp_path / "heads.npz", flax_npz(heads=4))
    key = "Transformer/encoderblock_0/MultiHeadDotProductAttention_1/query/kernel"
    match = rf"heads.npz: {key} has shape \(64, 4, 16\), the model needs \(64, 2, 32\)$"
    with pytest.raises(DataError, match=match):
        vit_npz.load_pretrained(model, heads)


def test_bad_position_embedding_shape(tmp_path, model, arrays) -> None:
    path = write(tmp_path / "pos.npz", {**arrays, vit_npz.POS_KEY: np.zeros((1, 6, D), np.float32)})
    match = r"pos.npz: Transformer/posembed_input/pos_embedding has shape \(1, 6, 64\), "
    with pytest.raises(DataError, match=match):
        vit_npz.load_pretrained(model, path)


def test_not_an_npz(tmp_path, model) -> None:
    text = tmp_path / "weights.npz"
    text.write_text("not weights\n")
    with pytest.raises(DataError, match=r"weights.npz: not a readable npz archive"):
        vit_npz.load_pretrained(model, text)
    single = tmp_path / "single.npz"
    with open(single, "wb") as f:
        np.save(f, np.zeros(3))
    with pytest.raises(DataError, match=r"single.npz: a single .npy array, not an npz"):
        vit_npz.load_pretrained(model, single)
    with pytest.raises(DataError, match=r"absent.npz: no such file"):
        vit_npz.load_pretrained(model, tmp_path / "absent.npz")
