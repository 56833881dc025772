"""FLOPs of TensorFlow train steps counted on their graph: exact counts for layers whose
FLOPs are known, forward and backward, under TF 2.15 and 2.21."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import pytest

from accelpipe.core.keras2 import keras, tf
from accelpipe.engines import tf_flops

pytestmark = pytest.mark.tensorflow

B = 2  # samples per counted batch


@pytest.fixture(autouse=True)
def _float32_policy() -> Iterator[None]:
    yield
    keras.mixed_precision.set_global_policy("float32")


def _train_step(model: keras.Model) -> Callable[[tf.Tensor], tf.Tensor]:
    """The trainer's step in small: tape, loss, gradients, SGD with momentum."""
    optimizer = keras.optimizers.SGD(0.1, momentum=0.9)
    optimizer.build(model.trainable_variables)

    def step(x: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.cast(model(x, training=True), tf.float32)))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    return step


def _forward(model: keras.Model) -> Callable[[tf.Tensor], tf.Tensor]:
    return lambda x: model(x, training=False)


def _conv(cin: int, cout: int, k: int, hw_out: int) -> int:
    """Forward FLOPs per sample of a k x k convolution: 2 Cin Cout k^2 Hout Wout."""
    return 2 * cin * cout * k * k * hw_out * hw_out


def _conv_model() -> keras.Model:
    inputs = keras.Input((8, 8, 3))
    x = keras.layers.Conv2D(4, 3, padding="same", activation="relu")(inputs)
    x = keras.layers.Conv2D(6, 3, strides=2, padding="same")(x)
    return keras.Model(inputs, x)


def test_conv_forward_backward_counts_exactly_and_skips_the_first_input_gradient() -> None:
    model = _conv_model()
    x = tf.zeros((B, 8, 8, 3))
    first, second = _conv(3, 4, 3, 8), _conv(4, 6, 3, 4)
    forward = tf_flops.count_step_flops(_forward(model), [x], B)
    assert forward.flops_per_sample == first + second
    count = tf_flops.count_step_flops(_train_step(model), [x], B)
    # the first layer: forward + filter gradient (its input gradient is built by the tape
    # but nothing uses it, and TensorFlow prunes it); the second: forward + both gradients
    assert count.flops_per_sample == 2 * first + 3 * second
    assert count.total_flops == B * count.flops_per_sample
    assert dict(count.by_kind) == {"matmul": 0, "conv": count.total_flops, "attention": 0}
    assert count.counted_by == tf_flops.COUNTED_BY
    assert any("1 matmul/conv op(s) that nothing uses" in n for n in count.notes)
    assert any("elementwise" in n for n in count.notes)


def test_counting_traces_and_never_runs_the_step() -> None:
    model = _conv_model()
    step = _train_step(model)
    before = [v.numpy().copy() for v in model.variables]
    tf_flops.count_step_flops(tf.function(step), [np.zeros((B, 8, 8, 3), np.float32)], B)
    assert all(np.array_equal(a, v.numpy()) for a, v in zip(before, model.variables, strict=True))


def test_a_tf_function_is_counted_on_the_trace_its_next_call_runs() -> None:
    """The trainer counts on its own step function: the step is traced once, not twice."""
    train_step, traces = _train_step(_conv_model()), []

    def traced_step(x: tf.Tensor) -> tf.Tensor:
        traces.append(x.shape)  # Python runs only while TensorFlow traces
        return train_step(x)

    step = tf.function(traced_step)
    x = np.zeros((B, 8, 8, 3), np.float32)
    tf_flops.count_step_flops(step, [x], B)
    step(tf.constant(x))
    assert len(traces) == 1


def test_dense_counts_two_in_out_per_sample() -> None:
    inputs = keras.Input((5,))
    x = keras.layers.Dense(6, activation="tanh")(inputs)
    model = keras.Model(inputs, keras.layers.Dense(3)(x))
    first, second = 2 * 5 * 6, 2 * 6 * 3
    count = tf_flops.count_step_flops(_train_step(model), [tf.zeros((B, 5))], B)
    assert count.flops_per_sample == 2 * first + 3 * second
    assert count.by_kind["matmul"] == count.total_flops


def test_batched_matmul_with_a_weight() -> None:
    weight = tf.Variable(tf.ones((5, 7)))

    def step(x: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.matmul(x, weight))
        weight.assign_sub(tape.gradient(loss, weight))
        return loss

    x = tf.zeros((B, 4, 5))
    forward = tf_flops.count_step_flops(lambda x: tf.matmul(x, weight), [x], B)
    assert forward.flops_per_sample == 2 * 4 * 5 * 7
    count = tf_flops.count_step_flops(step, [x], B)
    assert count.flops_per_sample == 2 * (2 * 4 * 5 * 7)  # forward + the weight's gradient


def test_keras_multi_head_attention_counts_its_einsums() -> None:
    length, width, heads, key_dim = 6, 4, 2, 8
    inputs = keras.Input((length, width))
    model = keras.Model(inputs, keras.layers.MultiHeadAttention(heads, key_dim)(inputs, inputs))
    projections = 3 * 2 * length * width * heads * key_dim  # query, key, value
    attention = 2 * (2 * heads * length * length * key_dim)  # QK^T and PV
    output = 2 * length * heads * key_dim * width
    x = tf.zeros((B, length, width))
    forward = tf_flops.count_step_flops(_forward(model), [x], B)
    assert forward.flops_per_sample == projections + attention + output
    count = tf_flops.count_step_flops(_train_step(model), [x], B)
    # backward: the projections' kernel gradients (their input gradients reach the batch
    # only), both gradients of everything else
    assert count.flops_per_sample == 2 * projections + 3 * attention + 3 * output
    assert count.by_kind["matmul"] == count.total_flops


def test_einsum_with_an_ellipsis_and_a_transpose() -> None:
    a = tf.zeros((B, 3, 4, 5))
    b = tf.Variable(tf.ones((5, 6)))
    count = tf_flops.count_step_flops(lambda a: tf.einsum("...ij,jk->...ik", a, b), [a], B)
    assert count.flops_per_sample == 2 * 3 * 4 * 5 * 6
    transpose = tf_flops.count_step_flops(lambda a: tf.einsum("bijk->bkji", a), [a], B)
    assert transpose.total_flops == 0


def test_depthwise_convolution_and_its_gradients() -> None:
    inputs = keras.Input((8, 8, 3))
    x = keras.layers.Conv2D(4, 1)(inputs)
    x = keras.layers.DepthwiseConv2D(3, padding="same", depth_multiplier=2)(x)
    model = keras.Model(inputs, x)
    pointwise, depthwise = _conv(3, 4, 1, 8), 2 * 8 * 8 * (4 * 2) * 3 * 3
    count = tf_flops.count_step_flops(_train_step(model), [tf.zeros((B, 8, 8, 3))], B)
    assert count.flops_per_sample == 2 * pointwise + 3 * depthwise


def test_bf16_policy_counts_the_same_as_fp32() -> None:
    x = tf.zeros((B, 8, 8, 3))
    fp32 = tf_flops.count_step_flops(_train_step(_conv_model()), [x], B)
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    bf16 = tf_flops.count_step_flops(_train_step(_conv_model()), [x], B)
    assert bf16.total_flops == fp32.total_flops > 0


def test_nested_functions_are_named_in_a_note() -> None:
    weight = tf.Variable(tf.ones((5, 7)))
    inner = tf.function(lambda x: tf.matmul(x, weight))
    count = tf_flops.count_step_flops(lambda x: inner(x) + 1.0, [tf.zeros((B, 5))], B)
    assert count.total_flops == 0
    assert any("not counted: the bodies of 1 function-calling op(s)" in n for n in count.notes)


def test_a_batch_of_unknown_size_is_refused() -> None:
    weight = tf.Variable(tf.ones((5, 7)))
    concrete = tf.function(lambda x: tf.matmul(x, weight)).get_concrete_function(
        tf.TensorSpec((None, 5))
    )
    with pytest.raises(ValueError, match="MatMul"):
        tf_flops.count_graph_flops(concrete, B)
