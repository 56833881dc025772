"""Starting-weight files in the references' real formats, written by the tests.

- `resnet34_tf1_tensors(width, seed)`: every tensor of the reference's ImageNet ResNet-34
  checkpoint (`model.ckpt-28152`), named as its `tf.layers` code creates them (Habana's
  SSD_ResNet34 `architecture.py`, the MLPerf v0.6 ResNet): the stem `conv2d` +
  `batch_normalization`, then per block the projection (first block of groups 2-4), conv1,
  conv2, each with its BN; groups [3, 4, 6, 3] at 64, 128, 256, 512 channels; the classifier
  `dense/*`, `global_step` and a Momentum slot, which a backbone does not use.
- `write_tf1_checkpoint(prefix, tensors)`: a TF1 checkpoint (the SaveV2 op of tf.compat.v1's
  Saver: the `<prefix>.index` + `<prefix>.data-00000-of-00001` pair the reference downloads).
- `augreg_tensors(encoder, grid, seed)`: an AugReg / original-ViT npz's arrays (Flax names:
  `cls`, `embedding/*`, `Transformer/posembed_input/pos_embedding`,
  `Transformer/encoderblock_{i}/...`, `Transformer/encoder_norm/*`, `head/*` for 1000 classes).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

GROUPS = ((64, 3), (128, 4), (256, 6), (512, 3))  # (channels, blocks)


def _bn(name: str, channels: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {
        f"{name}/gamma": rng.uniform(0.5, 1.5, channels).astype(np.float32),
        f"{name}/beta": rng.normal(0, 0.1, channels).astype(np.float32),
        f"{name}/moving_mean": rng.normal(0, 0.1, channels).astype(np.float32),
        f"{name}/moving_variance": rng.uniform(0.5, 1.5, channels).astype(np.float32),
    }


def resnet34_tf1_tensors(width: int = 64, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    tensors: dict[str, np.ndarray] = {}
    counts = {"conv2d": 0, "batch_normalization": 0}

    def name(kind: str) -> str:
        n = counts[kind]
        counts[kind] += 1
        return kind if n == 0 else f"{kind}_{n}"

    def conv(kernel: int, cin: int, cout: int) -> None:
        shape = (kernel, kernel, cin, cout)
        tensors[f"{name('conv2d')}/kernel"] = rng.normal(0, 0.05, shape).astype(np.float32)
        tensors.update(_bn(name("batch_normalization"), cout, rng))

    conv(7, 3, width)
    channels = width
    for g, (full, blocks) in enumerate(GROUPS, start=1):
        filters = full * width // 64
        for b in range(blocks):
            if b == 0 and g > 1:  # the reference's first group has no projection
                conv(1, channels, filters)
            conv(3, channels, filters)
            conv(3, filters, filters)
            channels = filters
    tensors["dense/kernel"] = rng.normal(0, 0.01, (channels, 1000)).astype(np.float32)
    tensors["dense/bias"] = np.zeros(1000, np.float32)
    tensors["conv2d/kernel/Momentum"] = np.zeros_like(tensors["conv2d/kernel"])
    tensors["global_step"] = np.array(28152, np.int64)
    return tensors


def write_tf1_checkpoint(prefix: Path, tensors: dict[str, np.ndarray]) -> Path:
    """`<prefix>.index` and `<prefix>.data-00000-of-00001` under exactly these names, written
    by the SaveV2 op that tf.compat.v1's Saver runs (a TF1 name-based checkpoint, no object
    graph); returns the prefix."""
    import tensorflow as tf

    names = list(tensors)
    tf.raw_ops.SaveV2(
        prefix=str(prefix),
        tensor_names=names,
        shape_and_slices=[""] * len(names),
        tensors=[tf.constant(tensors[n]) for n in names],
    )
    return Path(prefix)


def augreg_tensors(
    hidden: int, layers: int, heads: int, mlp: int, patch: int, grid: int, seed: int = 0
) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)

    def normal(*shape: int) -> np.ndarray:
        return rng.normal(0, 0.05, shape).astype(np.float32)

    head_dim = hidden // heads
    arrays = {
        "cls": normal(1, 1, hidden),
        "embedding/kernel": normal(patch, patch, 3, hidden),
        "embedding/bias": normal(hidden),
        "Transformer/posembed_input/pos_embedding": normal(1, 1 + grid * grid, hidden),
        "Transformer/encoder_norm/scale": 1 + normal(hidden),
        "Transformer/encoder_norm/bias": normal(hidden),
        "head/kernel": normal(hidden, 1000),
        "head/bias": normal(1000),
    }
    for i in range(layers):
        block = f"Transformer/encoderblock_{i}"
        att = f"{block}/MultiHeadDotProductAttention_1"
        for norm in ("LayerNorm_0", "LayerNorm_2"):
            arrays[f"{block}/{norm}/scale"] = 1 + normal(hidden)
            arrays[f"{block}/{norm}/bias"] = normal(hidden)
        for part in ("query", "key", "value"):
            arrays[f"{att}/{part}/kernel"] = normal(hidden, heads, head_dim)
            arrays[f"{att}/{part}/bias"] = normal(heads, head_dim)
        arrays[f"{att}/out/kernel"] = normal(heads, head_dim, hidden)
        arrays[f"{att}/out/bias"] = normal(hidden)
        mlp_block = f"{block}/MlpBlock_3"
        arrays[f"{mlp_block}/Dense_0/kernel"] = normal(hidden, mlp)
        arrays[f"{mlp_block}/Dense_0/bias"] = normal(mlp)
        arrays[f"{mlp_block}/Dense_1/kernel"] = normal(mlp, hidden)
        arrays[f"{mlp_block}/Dense_1/bias"] = normal(hidden)
    return arrays


def write_npz(path: Path, arrays: dict[str, np.ndarray]) -> Path:
    with open(path, "wb") as f:
        np.savez(f, **arrays)
    return Path(path)
