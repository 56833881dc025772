"""Pretrained ViT encoder weights from a vit-keras / original-ViT (Flax) npz, and back.

API:

- `load_pretrained(model, path, sha256=None) -> dict`: assigns the encoder weights of a model
  built with `vit.vit_encoder` (a bare ViT or a Segmenter) and returns facts for provenance:
  `file`, `sha256` (actual), `tensors_loaded`, `keys_ignored` (e.g. `pre_logits/*`, `head/*`),
  `pos_grid_from` / `pos_grid_to` ([rows, cols] of the npz and of the model). Nothing is
  assigned unless every tensor fits. DataError (one line, naming the file and the key) for:
  a sha256 mismatch, a missing or unreadable file, a missing key, a wrong shape.
- `save_npz(model, path)`: writes the encoder in the same layout (no head), the inverse.
- `source_grid(path) -> int`: the side of the position grid of such an npz (DataError if none).
- `load_converted(model, folder) -> dict`: assigns the weights stage's converted encoder
  (`<folder>/weights.npz`, keyed by `vit.encoder_variables`), the position embeddings resized
  from the file's grid to the model's; DataError naming the first missing key or wrong shape.

npz layout (REFERENCE-tensorflow B.3), D hidden, H heads, p patch, g grid side:
`cls` [1, 1, D]; `embedding/kernel` [p, p, 3, D] (= Keras Conv2D HWIO), `embedding/bias`;
`Transformer/posembed_input/pos_embedding` [1, 1 + g*g, D]; per block `i`
`Transformer/encoderblock_{i}/LayerNorm_{0,2}/{scale,bias}`,
`.../MultiHeadDotProductAttention_1/{query,key,value}/kernel` [D, H, D/H], `/bias` [H, D/H],
`.../out/kernel` [H, D/H, D], `.../out/bias` [D], `.../MlpBlock_3/Dense_{0,1}/{kernel,bias}`;
`Transformer/encoder_norm/{scale,bias}`. Flax DenseGeneral's (H, D/H) axes flatten row-major
to the Dense layers' D columns, the order `MultiHeadSelfAttention` splits heads in.
"""

from __future__ import annotations

import hashlib
import math
import pickle
import zipfile
from pathlib import Path

import numpy as np

from accelpipe.core.errors import DataError
from accelpipe.core.keras2 import keras, tf
from accelpipe.models import pretrained_npz
from accelpipe.models.vit import POS_EMBEDDING, encoder_blocks, encoder_variables

POS_KEY = "Transformer/posembed_input/pos_embedding"


def _norm(prefix: str, layer) -> dict[str, tuple]:
    return {f"{prefix}/scale": (layer.gamma, None), f"{prefix}/bias": (layer.beta, None)}


def _block_targets(prefix: str, block) -> dict[str, tuple]:
    """npz key -> (variable, npz shape or None when it equals the variable's shape)."""
    att = block.attention
    heads, head_dim, d = att.heads, att.head_dim, att.heads * att.head_dim
    targets = {**_norm(f"{prefix}/LayerNorm_0", block.norm_0)}
    a = f"{prefix}/MultiHeadDotProductAttention_1"
    for name in ("query", "key", "value"):
        layer = getattr(att, name)
        targets[f"{a}/{name}/kernel"] = (layer.kernel, (d, heads, head_dim))
        targets[f"{a}/{name}/bias"] = (layer.bias, (heads, head_dim))
    targets[f"{a}/out/kernel"] = (att.out.kernel, (heads, head_dim, d))
    targets[f"{a}/out/bias"] = (att.out.bias, None)
    targets.update(_norm(f"{prefix}/LayerNorm_2", block.norm_2))
    for name, layer in (("Dense_0", block.mlp_block.dense_0), ("Dense_1", block.mlp_block.dense_1)):
        targets[f"{prefix}/MlpBlock_3/{name}/kernel"] = (layer.kernel, None)
        targets[f"{prefix}/MlpBlock_3/{name}/bias"] = (layer.bias, None)
    return targets


def _targets(model: keras.Model) -> dict[str, tuple]:
    """Every npz key the model's encoder needs, except the position embedding."""
    try:
        embedding = model.get_layer("embedding")
        targets = {
            "cls": (model.get_layer("class_token").cls, None),
            "embedding/kernel": (embedding.kernel, None),
            "embedding/bias": (embedding.bias, None),
        }
        for i, block in enumerate(encoder_blocks(model)):
            targets.update(_block_targets(f"Transformer/encoderblock_{i}", block))
        targets.update(
            _norm("Transformer/encoder_norm", model.get_layer("Transformer_encoder_norm"))
        )
    except ValueError as exc:  # get_layer: no such layer
        raise ValueError(f"model {model.name!r} has no ViT encoder: {exc}") from None
    return targets


def _pos_layer(model: keras.Model):
    return model.get_layer("Transformer_posembed_input")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _open(path: Path) -> np.lib.npyio.NpzFile:
    try:
        data = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise DataError(f"{path}: no such file (pretrained ViT weights)") from None
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, pickle.UnpicklingError) as exc:
        raise DataError(f"{path}: not a readable npz archive ({exc})") from None
    if not isinstance(data, np.lib.npyio.NpzFile):
        raise DataError(f"{path}: a single .npy array, not an npz archive of ViT weights")
    return data


def _read(data, path: Path, key: str) -> np.ndarray:
    if key not in data.files:
        raise DataError(f"{path}: no key {key} (the ViT encoder needs it)")
    try:
        return np.asarray(data[key], dtype=np.float32)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise DataError(f"{path}: key {key} is unreadable ({exc})") from None


def _fit(path: Path, key: str, value: np.ndarray, variable, npz_shape) -> np.ndarray:
    want = tuple(npz_shape or variable.shape)
    if value.shape != want:
        raise DataError(f"{path}: {key} has shape {value.shape}, the model needs {want}")
    return value.reshape(tuple(variable.shape))


def _grid(tokens: int) -> int | None:
    side = math.isqrt(max(tokens - 1, 0))
    return side if side * side == tokens - 1 and side > 0 else None


def resize_pos_embedding(pos: np.ndarray, grid: tuple[int, int]) -> np.ndarray:
    """[1, 1 + g*g, D] -> [1, 1 + h*w, D]: CLS kept apart, the g x g grid resized bilinearly.

    tf.image.resize bilinear (half-pixel centres, no antialias) = torch F.interpolate bilinear
    with align_corners=False, which Segmenter's `resize_pos_embed` uses: we train Segmenter's
    recipe. (vit-keras uses scipy.ndimage.zoom(order=1), corner-aligned, slightly different
    values; pitfall 17. scipy is not a dependency either.)
    """
    side, d = _grid(pos.shape[1]), pos.shape[2]
    assert side is not None, f"position embedding of {pos.shape[1]} tokens: not 1 + g*g"
    if (side, side) == tuple(grid):
        return pos
    old = pos[0, 1:].reshape(1, side, side, d)
    new = tf.image.resize(tf.constant(old, tf.float32), grid, method="bilinear").numpy()
    return np.concatenate([pos[:, :1], new.reshape(1, grid[0] * grid[1], d)], axis=1)


def _pos_value(data, path: Path, model: keras.Model) -> tuple[np.ndarray, list[int]]:
    pos = _read(data, path, POS_KEY)
    layer = _pos_layer(model)
    d = layer.pos_embedding.shape[-1]
    side = _grid(pos.shape[1]) if pos.ndim == 3 else None
    if pos.ndim != 3 or pos.shape[0] != 1 or pos.shape[2] != d or side is None:
        raise DataError(
            f"{path}: {POS_KEY} has shape {pos.shape}, the model needs (1, 1 + g*g, {d}) "
            f"(resized to its grid {layer.grid})"
        )
    return resize_pos_embedding(pos, tuple(layer.grid)), [side, side]


def load_pretrained(model: keras.Model, path: Path, sha256: str | None = None) -> dict:
    """Load a vit-keras / original-ViT npz into the model's encoder; returns provenance facts."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such file (pretrained ViT weights)")
    actual = _sha256(path)
    if sha256 is not None and actual != sha256.lower():
        raise DataError(f"{path}: sha256 {actual} does not match the expected {sha256}")
    targets = _targets(model)
    with _open(path) as data:
        values = [
            (var, _fit(path, key, _read(data, path, key), var, shape))
            for key, (var, shape) in targets.items()
        ]
        pos, grid_from = _pos_value(data, path, model)
        ignored = sorted(set(data.files) - set(targets) - {POS_KEY})
    for variable, value in values:  # only once every tensor fits
        variable.assign(value)
    _pos_layer(model).pos_embedding.assign(pos)
    return {
        "file": str(path),
        "sha256": actual,
        "tensors_loaded": len(values) + 1,
        "keys_ignored": ignored,
        "pos_grid_from": grid_from,
        "pos_grid_to": list(_pos_layer(model).grid),
    }


def save_npz(model: keras.Model, path: Path) -> Path:
    """Write the model's encoder as a vit-keras / original-ViT npz (no head); returns `path`."""
    arrays = {
        key: var.numpy().astype(np.float32).reshape(shape or tuple(var.shape))
        for key, (var, shape) in _targets(model).items()
    }
    arrays[POS_KEY] = _pos_layer(model).pos_embedding.numpy().astype(np.float32)
    path = Path(path)
    with open(path, "wb") as f:  # a file object: np.savez would otherwise append ".npz"
        np.savez(f, **arrays)
    return path


def source_grid(path: Path) -> int:
    """The side of the square position grid of an original-ViT npz (24 for the 384 px AugReg
    files, 14 for the 224 px ones)."""
    with _open(Path(path)) as data:
        pos = _read(data, Path(path), POS_KEY)
    side = _grid(pos.shape[1]) if pos.ndim == 3 and pos.shape[0] == 1 else None
    if side is None:
        raise DataError(f"{path}: {POS_KEY} has shape {pos.shape}, not (1, 1 + g*g, D)")
    return side


def load_converted(model: keras.Model, folder: Path) -> dict:
    """Assign the encoder from the weights stage's converted npz; facts for stage.json."""
    layer = _pos_layer(model)

    def to_model_grid(pos: np.ndarray) -> np.ndarray:
        fits = pos.ndim == 3 and pos.shape[0] == 1 and pos.shape[2] == layer.pos_embedding.shape[-1]
        return resize_pos_embedding(pos, tuple(layer.grid)) if fits and _grid(pos.shape[1]) else pos

    path = Path(folder) / pretrained_npz.WEIGHTS_FILE
    facts = pretrained_npz.assign(encoder_variables(model), path, {POS_EMBEDDING: to_model_grid})
    return facts | {"pos_grid_to": list(layer.grid)}
