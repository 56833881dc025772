"""FLOPs of one TensorFlow training step, counted on the step's graph.

What TensorFlow offers, checked on 2.15 and 2.21:
- XLA's HLO cost analysis is not reachable from TensorFlow's Python API: a jit-compiled
  function gives its HLO text or proto (`experimental_get_compiler_ir`), no FLOP count (JAX
  exposes the cost analysis; TensorFlow does not).
- The TF profiler's float-op count (`tf.compat.v1.profiler.profile(graph,
  options=ProfileOptionBuilder.float_operation())`) loses most of a TF2 step graph: on a
  conv + attention + dense step it reported Softmax alone (no MatMul, no Conv2D, no
  gradient op). Its per-op numbers are right, though: they come from the FLOP statistics
  TensorFlow registers per op type (`tensorflow/python/profiler/internal/flops_registry.py`,
  read through `ops.get_stats_for_node_def`).

So `count_step_flops` traces the train step (never runs it: the model, optimizer and random
state are untouched) and sums TensorFlow's registered statistics over the graph's matrix
multiplies and convolutions itself: MatMul, Conv2D, Conv3D, DepthwiseConv2dNative and the
gradient ops Conv2DBackpropInput / Conv2DBackpropFilter. Counted here instead, with the same
convention (2 FLOPs per multiply-add):
- BatchMatMul(V2, V3): TensorFlow's statistic reads `transpose_a`, an attribute these ops do
  not have (theirs is `adj_x`), so it takes the wrong contracted length for every
  `adj_x=True` product, which is what a batched matmul's weight gradient is (a ViT's
  attention, Dense layers on 3-D inputs): for the tests' (2, 4, 5) @ (5, 7) it gives that
  gradient 700 FLOPs where 560 is right.
- Einsum (Keras' MultiHeadAttention and EinsumDense are einsums, forward and gradient),
  Conv3DBackpropInputV2 / FilterV2 and DepthwiseConv2dNativeBackpropInput / Filter, which
  have no registered statistic.

As with PyTorch's counter (engines.torch_flops), the count is of matrix multiplies,
convolutions and attention only: TensorFlow also registers statistics for elementwise ops
and reductions (Add, Mul, BiasAdd, Softmax, pooling ...), which are left out and reported in
a note. What else differs from what runs:
- Ops nothing uses are left out, as TensorFlow prunes them when it runs the function: the
  first layer's input gradient (its Conv2DBackpropInput or MatMul) is built by the gradient
  tape and never computed.
- TensorFlow's Conv2DBackpropInput/Filter statistic is the forward convolution's FLOPs
  computed from the larger (input) side divided by the stride product: exact where the input
  size is a multiple of the stride, off on a strided layer with an odd input size (SSD300's
  extra layers: its train step counts 0.13% more than the exact figure).
- The count is of the traced graph, before Grappler or XLA (`jit_compile`) rewrite it: a
  fused or eliminated op is counted as written.
- Ops inside nested functions (a tf.function called from the step, tf.cond / tf.while_loop
  bodies) are not counted; a note names them. The workloads' steps have none.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Callable, Sequence
from typing import Any

from accelpipe.core.flops import FlopCount, flop_count
from accelpipe.core.keras2 import tf  # before TensorFlow's first import (keras2's environment)

# isort: split
# Registers TensorFlow's per-op FLOP statistics (the profiler imports it for the same reason).
from tensorflow.python.framework import ops as tf_ops
from tensorflow.python.profiler.internal import flops_registry  # noqa: F401

COUNTED_BY = (
    "TensorFlow's registered op FLOP statistics (as tf.compat.v1.profiler's float_operation) "
    "over the traced train-step graph (matmul/conv/attention; forward+backward)"
)

# op type -> kind of FLOPs; counted with TensorFlow's statistic where it registers one
_DENSE = {
    "MatMul": "matmul",
    "BatchMatMul": "matmul",
    "BatchMatMulV2": "matmul",
    "BatchMatMulV3": "matmul",
    "Einsum": "matmul",
    "Conv2D": "conv",
    "Conv2DBackpropInput": "conv",
    "Conv2DBackpropFilter": "conv",
    "Conv3D": "conv",
    "Conv3DBackpropInputV2": "conv",
    "Conv3DBackpropFilterV2": "conv",
    "DepthwiseConv2dNative": "conv",
    "DepthwiseConv2dNativeBackpropInput": "conv",
    "DepthwiseConv2dNativeBackpropFilter": "conv",
}
# ops whose attributes name functions: their bodies are not counted
_FUNCTION_ATTRS = re.compile(r"^(f|body|cond|then_branch|else_branch|branches)$")


def _shape(tensor: tf.Tensor) -> list[int]:
    shape = tensor.shape
    if shape.rank is None or not shape.is_fully_defined():
        raise ValueError(f"{tensor.name} has no static shape ({shape})")
    return [int(d) for d in shape]


def _einsum_flops(op: tf.Operation) -> int:
    """2 x the output's elements x the product of the summed-over letters' sizes."""
    equation = op.get_attr("equation").decode().replace(" ", "")
    if "->" not in equation:
        raise ValueError(f"{op.name}: implicit einsum output {equation!r}")
    inputs, output = equation.split("->")
    terms = inputs.split(",")
    if len(terms) < 2:
        return 0  # a transpose, trace or sum: no products
    sizes: dict[str, int] = {}
    for term, tensor in zip(terms, op.inputs, strict=True):
        dims = _shape(tensor)
        head, _, tail = term.partition("...")
        for letter, size in zip(head, dims, strict=False):
            sizes[letter] = size
        for letter, size in zip(reversed(tail), reversed(dims), strict=False):
            sizes[letter] = size
    summed = set(sizes) - set(output)
    return 2 * math.prod(_shape(op.outputs[0])) * math.prod(sizes[s] for s in summed)


def _batch_matmul_flops(op: tf.Operation) -> int:
    """2 x the output's elements x the contracted length (the left operand's last axis, its
    second-to-last where `adj_x` transposes it)."""
    left = _shape(op.inputs[0])
    contracted = left[-2] if op.get_attr("adj_x") else left[-1]
    return 2 * math.prod(_shape(op.outputs[0])) * contracted


def _conv_backprop_flops(op: tf.Operation) -> int:
    """The forward convolution's FLOPs: 2 x the forward output (the gradient coming in,
    input 2) x each output's window (the filter without its output-channel axis; a
    depthwise filter's window is one channel's)."""
    grad_out = _shape(op.inputs[2])
    filter_shape = _shape(op.inputs[1] if "Input" in op.type else op.outputs[0])
    window = filter_shape[:-2] if op.type.startswith("Depthwise") else filter_shape[:-1]
    return 2 * math.prod(grad_out) * math.prod(window)


_OURS: dict[str, Callable[[tf.Operation], int]] = {
    "BatchMatMul": _batch_matmul_flops,
    "BatchMatMulV2": _batch_matmul_flops,
    "BatchMatMulV3": _batch_matmul_flops,
    "Einsum": _einsum_flops,
    "Conv3DBackpropInputV2": _conv_backprop_flops,
    "Conv3DBackpropFilterV2": _conv_backprop_flops,
    "DepthwiseConv2dNativeBackpropInput": _conv_backprop_flops,
    "DepthwiseConv2dNativeBackpropFilter": _conv_backprop_flops,
}


def _registered_flops(graph: tf.Graph, op: tf.Operation) -> int | None:
    """TensorFlow's registered statistic for `op`, or None where it has none."""
    try:
        stats = tf_ops.get_stats_for_node_def(graph, op.node_def, "flops")
    except ValueError as err:  # incomplete shapes, an unsupported data format
        raise ValueError(f"{op.name} ({op.type}): {err}") from None
    return None if stats.value is None else int(stats.value)


def _live_ops(graph: tf.Graph, outputs: Sequence[tf.Tensor]) -> set[tf.Operation]:
    """The ops a call runs: what the outputs, the control outputs and the stateful ops
    (variable updates) depend on; TensorFlow prunes the rest."""
    roots = [t.op for t in outputs if t is not None]
    roots += list(getattr(graph, "control_outputs", ()))
    roots += [op for op in graph.get_operations() if op.op_def.is_stateful]
    live: set[tf.Operation] = set()
    while roots:
        op = roots.pop()
        if op in live:
            continue
        live.add(op)
        roots.extend(t.op for t in op.inputs)
        roots.extend(op.control_inputs)
    return live


def _calls_functions(op: tf.Operation) -> bool:
    return any(
        _FUNCTION_ATTRS.match(name) and (value.HasField("func") or len(value.list.func))
        for name, value in op.node_def.attr.items()
    )


def count_graph_flops(concrete: Any, batch: int) -> FlopCount:
    """The FLOPs of one call of a traced function (a ConcreteFunction with static shapes)
    over `batch` samples, and per sample."""
    graph = concrete.graph
    live = _live_ops(graph, graph.outputs)
    by_kind: dict[str, int] = {}
    elementwise, pruned, nested = 0, 0, []
    for op in graph.get_operations():
        kind = _DENSE.get(op.type)
        if op not in live:
            pruned += kind is not None
            continue
        if _calls_functions(op):
            nested.append(op.type)
        if kind is None:
            with contextlib.suppress(ValueError):  # a shape known only at run time
                elementwise += _registered_flops(graph, op) or 0
            continue
        flops = _OURS[op.type](op) if op.type in _OURS else _registered_flops(graph, op)
        if flops is None:
            raise ValueError(f"{op.name} ({op.type}): TensorFlow registers no FLOP statistic")
        by_kind[kind] = by_kind.get(kind, 0) + flops
    counted = sum(by_kind.values())
    notes = [
        "counts matrix multiplies, convolutions and attention at 2 FLOPs per multiply-add; "
        "BatchMatMul, Einsum and the 3-D/depthwise convolution gradients counted by accelpipe",
        f"TensorFlow's statistics give {elementwise:,} more FLOPs to elementwise ops and "
        f"reductions ({_share(elementwise, counted)} of the count), left out as PyTorch's "
        "counter leaves them out",
    ]
    if pruned:
        notes.append(
            f"{pruned} matmul/conv op(s) that nothing uses left out (TensorFlow prunes them: "
            "the first layer's input gradient)"
        )
    if nested:
        notes.append(
            f"not counted: the bodies of {len(nested)} function-calling op(s) "
            f"({', '.join(sorted(set(nested)))})"
        )
    notes.append("counted on the traced graph, before Grappler or XLA rewrite it")
    return flop_count(by_kind, batch, COUNTED_BY, tuple(notes))


def _share(part: int, whole: int) -> str:
    return f"{part / whole:.1%}" if whole else "n/a"


def _spec(value: Any) -> Any:
    if isinstance(value, tf.Tensor | tf.Variable) or hasattr(value, "__array__"):
        tensor = tf.convert_to_tensor(value)
        return tf.TensorSpec(tensor.shape, tensor.dtype)
    return value


def count_step_flops(step: Callable[..., Any], args: Sequence[Any], batch: int) -> FlopCount:
    """The FLOPs of one training step on a batch like `args` (`step(*args)`: forward, loss,
    gradients, optimizer update), counted on its graph, and per sample.

    `step` is the train step: a tf.function is traced through itself, so that the trace
    counted is the one its next call with such arguments runs (a tracing, seconds on a big
    model, is not paid twice); a plain function is wrapped in one. It is traced with the
    shapes and dtypes of `args` (tensors, arrays, or nests of them), never run; set the
    run's mixed-precision policy first, as the trainer does. Count on the per-replica step,
    outside a distribution strategy's `run`.
    """
    function = step if hasattr(step, "get_concrete_function") else tf.function(step)
    specs = tf.nest.map_structure(_spec, tuple(args))
    return count_graph_flops(function.get_concrete_function(*specs), batch)
