"""Tests for Segmenter: output logits, the mask decoder's internals, gradients, config errors,
parameter counts, bf16, no-decay set, and that a few steps on one batch lower the loss."""

from __future__ import annotations

import numpy as np
import pytest

from accelpipe.core.errors import ConfigError
from accelpipe.core.keras2 import keras, tf
from accelpipe.models import segmenter as seg
from accelpipe.models.vit import ENCODERS

pytestmark = pytest.mark.tensorflow

SIZE, CLASSES = 32, 5  # tiny: patch 8 -> 4 x 4 grid, D = 64


def _build(decoder: str, **kwargs) -> keras.Model:
    return seg.build_segmenter(CLASSES, SIZE, "tiny", decoder, **kwargs)


@pytest.fixture(scope="module")
def models() -> dict[str, keras.Model]:
    keras.backend.clear_session()
    keras.utils.set_random_seed(0)  # one init every run: tolerances hold for it
    return {d: _build(d, drop_path=0.0, decoder_dropout=0.0) for d in seg.DECODERS}


@pytest.fixture(scope="module")
def images() -> tf.Tensor:
    return tf.random.stateless_uniform([2, SIZE, SIZE, 3], (1, 2), -1.0, 1.0)


def _block_params(d: int, mlp: int) -> int:
    return 4 * d + 4 * (d * d + d) + 2 * d * mlp + mlp + d


def test_decoder_parameter_counts(models) -> None:
    # The tiny encoder @32 is 80,576 (see test_vit's formula).
    d, encoder = 64, 80_576
    assert models["linear"].count_params() == encoder + d * CLASSES + CLASSES
    mask = (d * d + d) + CLASSES * d + 2 * _block_params(d, 4 * d) + 2 * d + 2 * d * d
    assert models["mask"].count_params() == encoder + mask + 2 * CLASSES
    # Seg-B-Mask/16 @512, 150 classes, by the same formula (built once: 102,497,580).
    d = 768
    decoder = (d * d + d) + 150 * d + 2 * _block_params(d, 4 * d) + 2 * d + 2 * d * d + 300
    assert 86_434_560 + decoder == 102_497_580


@pytest.mark.parametrize("decoder", seg.DECODERS)
def test_output_is_float32_logits_at_input_size(models, images, decoder: str) -> None:
    logits = models[decoder](images, training=False)
    assert logits.shape == (2, SIZE, SIZE, CLASSES) and logits.dtype == tf.float32
    values = logits.numpy()
    assert values.min() < 0.0 or values.max() > 1.0  # not probabilities
    assert not np.allclose(values.sum(-1), 1.0, atol=1e-3)


def test_linear_decoder_is_a_dense_on_the_patch_tokens(models, images) -> None:
    model = models["linear"]
    names = ("Transformer_encoder_norm", "drop_cls", "mask_grid")
    tokens, patches, grid = keras.Model(model.input, [model.get_layer(n).output for n in names])(
        images
    )
    np.testing.assert_array_equal(patches, tokens[:, 1:])
    head = model.get_layer("head")
    np.testing.assert_allclose(grid[:, 1, 2], head(patches)[:, 1 * 4 + 2], atol=1e-6)


def test_mask_decoder_normalises_features_and_classes(models, images) -> None:
    model = models["mask"]
    names = ("proj_patch", "proj_classes", "masks", "mask_norm", "cls_emb")
    outs = keras.Model(model.input, [model.get_layer(n).output for n in names])(images)
    patches, classes, masks, normed, with_cls = (o.numpy() for o in outs)
    assert patches.shape == (2, 16, 64) and classes.shape == (2, CLASSES, 64)
    assert with_cls.shape == (2, 16 + CLASSES, 64)  # classes appended after the patches
    np.testing.assert_allclose(np.linalg.norm(patches, axis=-1), 1.0, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(classes, axis=-1), 1.0, atol=1e-5)
    np.testing.assert_allclose(masks, patches @ classes.transpose(0, 2, 1), atol=1e-5)
    assert np.abs(masks).max() <= 1.0 + 1e-5  # cosine similarities
    # mask_norm: LayerNorm over the classes with the decoder's epsilon, scale 1 / offset 0 at
    # init. Compared with the formula, not with std 1: with 5 classes a patch's similarities
    # may vary little, and the epsilon then pulls its std visibly below 1 (0.97 once).
    centred = masks - masks.mean(-1, keepdims=True)
    expected = centred / np.sqrt(masks.var(-1, keepdims=True) + seg.DECODER_EPS)
    np.testing.assert_allclose(normed, expected, atol=1e-4)
    np.testing.assert_allclose(normed.mean(-1), 0.0, atol=1e-5)
    assert model.get_layer("mask_norm").epsilon == seg.DECODER_EPS == 1e-5


def test_logits_are_the_bilinear_upsampled_mask_grid(models, images) -> None:
    model = models["mask"]
    grid, logits = keras.Model(model.input, [model.get_layer("mask_grid").output, model.output])(
        images
    )
    np.testing.assert_allclose(logits, tf.image.resize(grid, [SIZE, SIZE]), atol=1e-6)


def test_upsample_uses_half_pixel_centres() -> None:
    # torch F.interpolate(bilinear, align_corners=False) of [[0, 1], [2, 3]] to 4 x 4.
    x = tf.constant([[0.0, 1.0], [2.0, 3.0]])[None, :, :, None]
    f = np.array([0.0, 0.25, 0.75, 1.0])
    expected = 2 * f[:, None] + f[None, :]
    np.testing.assert_allclose(seg.Upsample(4)(x)[0, :, :, 0], expected, atol=1e-6)


def test_mask_decoder_config_and_init(models) -> None:
    model = models["mask"]
    block = model.get_layer("decoder_block_1")
    assert block.attention.heads == 1 and block.mlp == 4 * 64  # heads = max(1, D/64)
    assert block.norm_0.epsilon == 1e-5 and block.drop.rate == 0.0
    cls_emb = model.get_layer("cls_emb").cls_emb.numpy()
    assert cls_emb.shape == (1, CLASSES, 64) and np.abs(cls_emb).max() <= 0.04  # trunc 2 std
    proj = model.get_layer("proj_patch").kernel.numpy()
    assert proj.shape == (64, 64) and proj.std() == pytest.approx(64**-0.5, rel=0.1)
    b16 = ENCODERS["B_16"].hidden
    assert max(1, b16 // 64) == 12


@pytest.mark.parametrize("decoder", seg.DECODERS)
def test_gradients_reach_every_trainable_variable(models, images, decoder: str) -> None:
    model = models[decoder]
    weights = tf.random.stateless_normal([2, SIZE, SIZE, CLASSES], (3, 4))
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(model(images, training=True) * weights)
    grads = tape.gradient(loss, model.trainable_variables)
    missing = [v.name for v, g in zip(model.trainable_variables, grads, strict=True)
               if g is None or not np.any(g.numpy())]  # fmt: skip
    assert not missing


def test_a_few_steps_on_one_batch_lower_the_loss(images) -> None:
    keras.backend.clear_session()
    keras.utils.set_random_seed(0)  # one init every run: tolerances hold for it
    model = _build("mask", drop_path=0.0, decoder_dropout=0.0)
    labels = tf.cast(images[..., 0] > 0, tf.int32) + 2 * tf.cast(images[..., 1] > 0, tf.int32)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    opt = keras.optimizers.SGD(0.1, momentum=0.9, nesterov=True)
    losses = []
    for _ in range(6):
        with tf.GradientTape() as tape:
            loss = loss_fn(labels, model(images, training=True))
        variables = model.trainable_variables
        opt.apply_gradients(zip(tape.gradient(loss, variables), variables, strict=True))
        losses.append(float(loss))
    assert losses[-1] < losses[0]


def test_mixed_bfloat16_gives_float32_logits(images) -> None:
    keras.backend.clear_session()
    keras.utils.set_random_seed(0)  # one init every run: tolerances hold for it
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        model = _build("mask", decoder_layers=1)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert model.get_layer("Transformer_encoderblock_0").compute_dtype == "bfloat16"
    assert model.get_layer("mask_norm").compute_dtype == "bfloat16"
    assert all(v.dtype == tf.float32 for v in model.trainable_variables)
    logits = model(images, training=True)
    assert logits.dtype == tf.float32 and np.isfinite(logits.numpy()).all()


def test_no_decay_variables(models) -> None:
    model = models["mask"]
    names = {v.name for v in seg.no_decay_variables(model)}
    expected = {v.name for v in model.trainable_variables
                if len(v.shape) == 1 or v.name.split("/")[-1].split(":")[0]
                in ("cls", "pos_embedding", "cls_emb")}  # fmt: skip
    assert names == expected
    assert "cls_emb/cls_emb:0" in names and "mask_norm/gamma:0" in names
    assert not any("kernel" in n for n in names) and "proj_patch/proj_patch:0" not in names


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"encoder": "B_8"}, "unknown ViT encoder 'B_8'; expected one of B_16"),
        ({"decoder": "unet"}, "unknown Segmenter decoder 'unet'; expected one of linear, mask"),
        ({"image_size": 36}, "image size 36 is not a positive multiple of the ViT patch size 8"),
        ({"num_classes": 0}, "at least one class"),
        ({"decoder_layers": -1}, "decoder_layers must be >= 0"),
    ],
)
def test_config_errors(kwargs: dict, match: str) -> None:
    args = {"num_classes": CLASSES, "image_size": SIZE, "encoder": "tiny", **kwargs}
    with pytest.raises(ConfigError, match=match):
        seg.build_segmenter(**args)


def test_weights_round_trip_through_h5(tmp_path, models, images) -> None:
    # The workload checkpoints with save_weights(.h5): the nested blocks' weights must survive.
    path = str(tmp_path / "model.weights.h5")
    models["mask"].save_weights(path)
    other = _build("mask", drop_path=0.0, decoder_dropout=0.0)
    other.load_weights(path)
    np.testing.assert_array_equal(other(images), models["mask"](images))
