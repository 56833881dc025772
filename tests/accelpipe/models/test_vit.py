"""Tests for the ViT encoder: configs, names, parameter counts, one block against a numpy
reference, stochastic depth and config errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

from accelpipe.core.errors import ConfigError
from accelpipe.core.keras2 import keras, tf
from accelpipe.models import vit

pytestmark = pytest.mark.tensorflow


def vit_params(c: vit.ViTConfig, grid: int) -> int:
    """Encoder parameters by formula: patch conv, CLS, position grid, blocks, final norm."""
    d = c.hidden
    block = 2 * 2 * d + 4 * (d * d + d) + (d * c.mlp + c.mlp) + (c.mlp * d + d)
    return c.patch**2 * 3 * d + d + d + (1 + grid * grid) * d + c.layers * block + 2 * d


@pytest.fixture(scope="module")
def tiny() -> keras.Model:
    keras.backend.clear_session()
    keras.utils.set_random_seed(0)  # one init every run: tolerances hold for it
    return vit.build_vit(32, "tiny", drop_path=0.2)


def test_named_configs() -> None:
    assert vit.ENCODERS["B_16"] == vit.ViTConfig(16, 768, 12, 12, 3072)
    assert vit.ENCODERS["L_16"] == vit.ViTConfig(16, 1024, 24, 16, 4096)
    assert vit.ENCODERS["Ti_16"] == vit.ViTConfig(16, 192, 12, 3, 768)
    assert vit.ENCODERS["S_16"] == vit.ViTConfig(16, 384, 12, 6, 1536)
    assert vit.ENCODERS["tiny"] == vit.ViTConfig(8, 64, 2, 2, 128)
    assert vit.ENCODERS["B_32"].patch == vit.ENCODERS["L_32"].patch == 32
    for name, c in vit.ENCODERS.items():
        assert c.hidden % c.heads == 0
        assert c.mlp == (2 if name == "tiny" else 4) * c.hidden


def test_unknown_encoder_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError, match=r"'B_8'.*B_16, B_32, L_16, L_32, Ti_16, S_16, tiny"):
        vit.build_vit(224, "B_8")


@pytest.mark.parametrize("size", [30, 0, -8])
def test_image_size_must_be_a_multiple_of_the_patch(size: int) -> None:
    with pytest.raises(ConfigError, match=f"image size {size} .* patch size 8"):
        vit.build_vit(size, "tiny")


def test_b16_parameter_count() -> None:
    # ViT-B/16 @224 without pre_logits/head: 590,592 patch conv + 768 CLS + 151,296 position
    # (197 x 768) + 12 x 7,087,872 blocks + 1,536 final norm = 85,798,656 (the published
    # "86M"). Building all 12 blocks takes ~11 s on 2 cores (initialising 86M weights), so
    # the test builds one block and checks the formula on it; the 12-block count is the
    # same formula (and was checked once by building it: 85,798,656).
    b16 = vit.ENCODERS["B_16"]
    assert vit_params(b16, 14) == 85_798_656
    assert vit_params(b16, 24) == 86_090_496  # @384
    assert vit_params(b16, 32) == 86_434_560  # @512, Segmenter's crop
    keras.backend.clear_session()
    keras.utils.set_random_seed(0)  # one init every run: tolerances hold for it
    one = vit.ViTConfig(16, 768, 1, 12, 3072)
    images = keras.Input((224, 224, 3))
    model = keras.Model(images, vit.vit_encoder(images, one, 224))
    assert model.count_params() == vit_params(one, 14) == 85_798_656 - 11 * 7_087_872


def test_tiny_shapes_names_and_count(tiny) -> None:
    tokens = tiny(tf.zeros([2, 32, 32, 3]))
    assert tokens.shape == (2, 1 + 16, 64) and tokens.dtype == tf.float32
    assert tiny.count_params() == vit_params(vit.ENCODERS["tiny"], 4)
    names = [layer.name for layer in tiny.layers]
    for name in ("embedding", "class_token", "Transformer_posembed_input",
                 "Transformer_encoderblock_0", "Transformer_encoderblock_1",
                 "Transformer_encoder_norm"):  # fmt: skip
        assert name in names
    conv = tiny.get_layer("embedding")
    assert conv.kernel_size == conv.strides == (8, 8) and conv.padding == "valid"
    assert tiny.get_layer("class_token").cls.shape == (1, 1, 64)
    assert tiny.get_layer("Transformer_posembed_input").pos_embedding.shape == (1, 17, 64)
    block = tiny.get_layer("Transformer_encoderblock_1")
    assert [block.norm_0.name, block.attention.name, block.norm_2.name, block.mlp_block.name] == [
        "LayerNorm_0", "MultiHeadDotProductAttention_1", "LayerNorm_2", "MlpBlock_3"]  # fmt: skip
    assert block.norm_0.epsilon == block.norm_2.epsilon == 1e-6
    assert tiny.get_layer("Transformer_encoder_norm").epsilon == 1e-6
    assert "Transformer_encoderblock_1/MultiHeadDotProductAttention_1/query/kernel:0" in {
        v.name for v in tiny.weights
    }


def test_patch_tokens_are_row_major_after_the_cls(tiny) -> None:
    x = tf.random.normal([1, 32, 32, 3])
    probe = keras.Model(
        tiny.input, [tiny.get_layer(n).output for n in ("embedding", "class_token")]
    )
    grid, tokens = probe(x)
    np.testing.assert_array_equal(tokens[0, 1 + 2 * 4 + 3], grid[0, 2, 3])
    np.testing.assert_array_equal(tokens[0, 0], tiny.get_layer("class_token").cls[0, 0])


def _ln(x, layer) -> np.ndarray:
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + layer.epsilon) * layer.gamma.numpy() + layer.beta.numpy()


def _dense(x, layer) -> np.ndarray:
    return x @ layer.kernel.numpy() + layer.bias.numpy()


def _block_numpy(x: np.ndarray, block) -> np.ndarray:
    """Pre-norm ViT block in float64 numpy: multi-head attention, erf gelu MLP."""
    att, heads = block.attention, block.attention.heads
    h = _ln(x, block.norm_0)
    q, k, v = (
        _dense(h, getattr(att, n)).reshape(len(x), heads, -1) for n in ("query", "key", "value")
    )
    logits = np.einsum("thd,shd->hts", q, k) / math.sqrt(q.shape[-1])
    w = np.exp(logits - logits.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    y = np.einsum("hts,shd->thd", w, v).reshape(len(x), -1)
    x = x + _dense(y, att.out)
    m = _dense(_ln(x, block.norm_2), block.mlp_block.dense_0)
    m = 0.5 * m * (1 + np.vectorize(math.erf)(m / math.sqrt(2)))
    return x + _dense(m, block.mlp_block.dense_1)


def test_block_matches_a_numpy_reference(tiny) -> None:
    block = tiny.get_layer("Transformer_encoderblock_0")
    x = np.random.default_rng(0).normal(size=(1, 17, 64))
    got = block(tf.constant(x, tf.float32), training=False).numpy()
    np.testing.assert_allclose(got[0], _block_numpy(x[0], block), atol=2e-4)


def test_drop_path_is_per_sample_and_only_in_training() -> None:
    layer = vit.DropPath(0.5)
    x = tf.ones([256, 3, 4])
    np.testing.assert_array_equal(layer(x, training=False), x)
    y = layer(x, training=True).numpy()
    per_sample = y.reshape(256, -1)
    assert set(np.unique(per_sample)) == {0.0, 2.0}  # kept samples scaled by 1 / keep
    assert (per_sample.min(1) == per_sample.max(1)).all()
    assert 0.3 < (per_sample[:, 0] == 0).mean() < 0.7


def test_drop_path_rises_linearly_over_the_blocks(tiny) -> None:
    assert vit.drop_path_rates(0.1, 3) == pytest.approx([0.0, 0.05, 0.1])
    rates = [b.drop.rate for b in vit.encoder_blocks(tiny)]
    assert rates == pytest.approx([0.0, 0.2])


def test_heads_must_divide_the_hidden_size() -> None:
    with pytest.raises(ConfigError, match="hidden size 64 not divisible by 3 heads"):
        vit.TransformerBlock(3, 128)(tf.zeros([1, 5, 64]))
