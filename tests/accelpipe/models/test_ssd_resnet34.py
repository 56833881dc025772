"""Tests for SSD300-ResNet34: shapes, parameter count, BN settings, frozen/L2 sets, bf16,
backbone checkpoints, and that a few steps on one batch lower the loss."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from accelpipe.core.errors import DataError
from accelpipe.core.keras2 import keras, tf
from accelpipe.models import ssd_resnet34 as ssd
from accelpipe.models.ssd_boxes import default_boxes, encode_labels
from accelpipe.models.ssd_loss import l2_loss, ssd_loss

pytestmark = pytest.mark.tensorflow


@pytest.fixture(scope="module")
def model() -> keras.Model:
    keras.backend.clear_session()
    keras.utils.set_random_seed(0)  # one init every run: tolerances hold for it
    return ssd.build_ssd300(num_classes=81)


def _conv(k: int, cin: int, cout: int, bias: bool = False) -> int:
    return k * k * cin * cout + (cout if bias else 0)


def _expected_backbone() -> tuple[int, int]:
    """(conv weights, BN channels) of ResNet-34's first three groups, by formula."""
    convs, bn = _conv(7, 3, 64), 64
    cin = 64
    for cout, blocks in ((64, 3), (128, 4), (256, 6)):
        for b in range(blocks):
            convs += _conv(3, cin, cout) + _conv(3, cout, cout)
            bn += 2 * cout
            if b == 0 and cin != cout:
                convs += _conv(1, cin, cout)
                bn += cout
            cin = cout
    return convs, bn


def test_backbone_parameters_match_the_hand_count(model) -> None:
    convs, bn = _expected_backbone()
    assert convs == 9408 + 221184 + 1114112 + 6815744  # stem, groups 1..3
    layers = ssd.backbone_layers(model)
    got_conv = sum(layer.count_params() for layer in layers if "_bn" not in layer.name)
    got_bn = sum(layer.count_params() for layer in layers if "_bn" in layer.name)
    assert got_conv == convs
    assert got_bn == 4 * bn  # gamma, beta, moving mean, moving variance


def test_total_parameters_match_the_hand_count(model) -> None:
    convs, bn = _expected_backbone()
    extras, cin = 0, 256
    for mid, out in ((256, 512), (256, 512), (128, 256), (128, 256), (128, 256)):
        extras += _conv(1, cin, mid, True) + _conv(3, mid, out, True)
        cin = out
    channels = (256, 512, 512, 256, 256, 256)
    heads = sum(
        _conv(3, c, a * 81, True) + _conv(3, c, a * 4, True)
        for c, a in zip(channels, (4, 6, 6, 6, 4, 4), strict=True)
    )
    assert model.count_params() == convs + 4 * bn + extras + heads


def test_output_shapes_and_feature_map_sizes(model) -> None:
    cls, box = model(tf.zeros([2, 300, 300, 3]), training=False)
    assert cls.shape == (2, 8732, 81) and box.shape == (2, 8732, 4)
    assert cls.dtype == tf.float32 and box.dtype == tf.float32
    shapes = [tuple(model.get_layer(f"feature{i}").output.shape[1:]) for i in range(6)]
    assert shapes == [(38, 38, 256), (19, 19, 512), (10, 10, 512), (5, 5, 256), (3, 3, 256),
                      (1, 1, 256)]  # fmt: skip
    assert tuple(model.get_layer("stem_pool").output.shape[1:]) == (75, 75, 64)


def test_head_reshape_keeps_row_column_box_order(model) -> None:
    # Anchor index (i * W + j) * A + a of level 1 must be channel block a of cell (i, j).
    feature = model.get_layer("feature1").output
    head = model.get_layer("head1_box").output
    probe = keras.Model(model.input, [head, model.outputs[1]])
    raw, flat = probe(tf.random.normal([1, 300, 300, 3]), training=False)
    i, j, a = 3, 7, 5
    np.testing.assert_allclose(
        flat[0, 5776 + (i * 19 + j) * 6 + a], raw[0, i, j, 4 * a : 4 * a + 4], rtol=1e-6
    )
    assert feature.shape[1] == 19


def test_batch_norm_settings_and_zero_init_gamma(model) -> None:
    bns = [la for la in model.layers if isinstance(la, keras.layers.BatchNormalization)]
    assert len(bns) == 1 + 2 * 13 + 2  # stem, two per block, two projections
    for layer in bns:
        assert layer.momentum == pytest.approx(0.9) and layer.epsilon == pytest.approx(1e-5)
        gamma = layer.gamma.numpy()
        assert (gamma == 0).all() if layer.name.endswith("_bn2") else (gamma == 1).all()


def test_stride_two_convs_use_symmetric_padding(model) -> None:
    x = tf.random.normal([1, 300, 300, 3])
    stem = keras.Model(model.input, model.get_layer("stem_conv").output)(x)
    kernel = model.get_layer("stem_conv").kernel
    expected = tf.nn.conv2d(tf.pad(x, [[0, 0], [3, 3], [3, 3], [0, 0]]), kernel, 2, "VALID")
    np.testing.assert_allclose(stem.numpy(), expected.numpy(), atol=1e-4)
    assert model.get_layer("g2b1_conv1_pad").padding == ((1, 1), (1, 1))
    assert model.get_layer("g2b1_conv1").padding == "valid"
    assert model.get_layer("g3b1_conv1").strides == (1, 1)  # group 3 stays at 38x38


def test_frozen_and_l2_variable_sets(model) -> None:
    names = lambda vs: {v.name for v in vs}  # noqa: E731
    frozen = {v.name for n in ssd.FROZEN_LAYERS for v in model.get_layer(n).trainable_weights}
    assert len(frozen) == 6  # two kernels, two (gamma, beta)
    train = names(ssd.trainable_variables(model))
    assert not train & frozen
    assert train | frozen == names(model.trainable_variables)
    l2 = names(ssd.l2_variables(model))
    assert not any(("_bn" in n) or ("gamma" in n) or ("beta" in n) for n in l2)
    assert any(n.startswith("stem_conv/") for n in l2)
    assert any(n.startswith("head0_cls/bias") for n in l2)
    convs = [la for la in model.layers if isinstance(la, keras.layers.Conv2D)]
    assert len(l2) == sum(len(la.trainable_weights) for la in convs)


def test_mixed_bfloat16_keeps_float32_outputs_and_variables() -> None:
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        m = ssd.build_ssd300(num_classes=5)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    cls, box = m(tf.zeros([1, 300, 300, 3]), training=False)
    assert cls.shape == (1, 8732, 5)
    assert cls.dtype == tf.float32 and box.dtype == tf.float32
    assert m.get_layer("head0_cls").compute_dtype == "bfloat16"
    assert m.get_layer("head0_cls").output.dtype == tf.bfloat16
    assert all(v.dtype == tf.float32 for v in m.trainable_variables)


def _set_known_weights(m: keras.Model) -> None:
    rng = np.random.default_rng(1)
    for layer in ssd.backbone_layers(m):
        for v in layer.weights:
            v.assign(rng.uniform(0.5, 1.5, v.shape).astype(np.float32))


def _backbone_values(m: keras.Model) -> list[np.ndarray]:
    return [v.numpy() for la in ssd.backbone_layers(m) for v in la.weights]


def test_save_and_load_backbone_round_trip(model, tmp_path: Path) -> None:
    source = ssd.build_ssd300(num_classes=3)
    _set_known_weights(source)
    known = np.full((7, 7, 3, 64), 0.25, np.float32)
    source.get_layer("stem_conv").kernel.assign(known)
    prefix = ssd.save_backbone(source, tmp_path / "backbone")
    head_before = model.get_layer("head0_cls").kernel.numpy()
    ssd.load_backbone(model, Path(prefix))
    np.testing.assert_array_equal(model.get_layer("stem_conv").kernel.numpy(), known)
    for a, b in zip(_backbone_values(model), _backbone_values(source), strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(model.get_layer("head0_cls").kernel.numpy(), head_before)


def test_load_backbone_reads_a_reference_tf1_checkpoint(model, tmp_path: Path) -> None:
    source = ssd.build_ssd300(num_classes=3)
    _set_known_weights(source)
    # tf.layers numbering: stem conv2d, group 1 = conv2d_1..6, group 2 block 1 = projection
    # conv2d_7, then conv2d_8, conv2d_9, ..., group 3 = conv2d_16..28; BNs in the same order.
    by_hand = {
        "conv2d/kernel": "stem_conv/kernel",
        "batch_normalization/moving_variance": "stem_bn/moving_variance",
        "conv2d_1/kernel": "g1b1_conv1/kernel",
        "batch_normalization_1/gamma": "g1b1_bn1/gamma",
        "conv2d_7/kernel": "g2b1_proj/kernel",
        "batch_normalization_7/beta": "g2b1_proj_bn/beta",
        "conv2d_8/kernel": "g2b1_conv1/kernel",
        "conv2d_16/kernel": "g3b1_proj/kernel",
        "batch_normalization_28/moving_mean": "g3b6_bn2/moving_mean",
        "conv2d_28/kernel": "g3b6_conv2/kernel",
    }
    pairs = ssd._tf1_variable_names(ssd.backbone_layers(source))
    mapping = {name: v.name.split(":")[0] for v, name in pairs}
    assert {k: mapping[k] for k in by_hand} == by_hand
    names = [f"resnet34/{n}" for _, n in pairs] + ["resnet34/dense/kernel"]  # extras ignored
    values = [v.read_value() for v, _ in pairs] + [tf.zeros([512, 1000])]
    prefix = str(tmp_path / "model.ckpt-28152")
    tf.raw_ops.SaveV2(
        prefix=prefix, tensor_names=names, shape_and_slices=[""] * len(names), tensors=values
    )
    ssd.load_backbone(model, Path(prefix))
    for a, b in zip(_backbone_values(model), _backbone_values(source), strict=True):
        np.testing.assert_array_equal(a, b)


def test_load_backbone_refuses_missing_or_unfitting_checkpoints(model, tmp_path: Path) -> None:
    with pytest.raises(DataError, match="no TensorFlow checkpoint"):
        ssd.load_backbone(model, tmp_path / "nothing")
    prefix = str(tmp_path / "bad")
    tf.raw_ops.SaveV2(
        prefix=prefix,
        tensor_names=["conv2d/kernel"],
        shape_and_slices=[""],
        tensors=[tf.zeros([3, 3, 3, 64])],
    )
    with pytest.raises(DataError, match="conv2d/kernel has shape"):
        ssd.load_backbone(model, Path(prefix))


def test_a_few_steps_on_one_batch_lower_the_loss() -> None:
    tf.random.set_seed(0)
    model = ssd.build_ssd300(num_classes=81)  # fresh: other tests load odd backbone weights
    anchors = tf.constant(default_boxes())
    gt = [([[0.1, 0.1, 0.6, 0.5], [0.5, 0.55, 0.9, 0.95]], [3, 7]), ([[0.2, 0.3, 0.7, 0.8]], [1])]
    targets = [encode_labels(tf.constant(b), tf.constant(c), anchors) for b, c in gt]
    cls_t, box_t, matched = (tf.stack(t) for t in zip(*targets, strict=True))
    images = tf.random.normal([2, 300, 300, 3])
    variables = ssd.trainable_variables(model)
    l2_vars = ssd.l2_variables(model)
    opt = keras.optimizers.SGD(0.01, momentum=0.9)

    @tf.function
    def step() -> tf.Tensor:
        with tf.GradientTape() as tape:
            cls, box = model(images, training=True)
            loss = ssd_loss(cls, box, cls_t, box_t, matched)["total"]
            total = loss + 5e-4 * l2_loss(l2_vars)
        opt.apply_gradients(zip(tape.gradient(total, variables), variables, strict=True))
        return loss

    losses = [float(step()) for _ in range(4)]
    assert all(np.isfinite(losses))
    assert all(b < a for a, b in itertools.pairwise(losses)), losses
    assert losses[-1] < 0.85 * losses[0], losses


def test_width_scales_every_layer_but_keeps_the_anchors() -> None:
    model = ssd.build_ssd300(num_classes=4, width=16)
    assert model.get_layer("stem_conv").filters == 16
    assert model.get_layer("backbone_out").output.shape[-1] == 64  # 256 x 16 / 64
    assert model.get_layer("extra7_3x3").filters == 128  # 512 x 16 / 64
    cls_logits, boxes = model(np.zeros((1, 300, 300, 3), np.float32))
    assert cls_logits.shape == (1, 8732, 4) and boxes.shape == (1, 8732, 4)
