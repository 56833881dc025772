"""Starting weights as the weights stage writes them and the models load them.

One npz (`WEIGHTS_FILE` in the folder `<data_root>/weights/<name>/`), keyed by the model's own
variable names (`<layer>/<weight>`, e.g. `stem_conv/kernel`, `Transformer_encoderblock_0/
MultiHeadDotProductAttention_1/query/kernel`), each a float32 array in its variable's shape.
Read without pickle: the file is data, never code.

API (no framework: a variable is anything with `.shape` and `.assign`):

- `save(arrays, path) -> Path`: writes the npz (exactly `path`: no ".npz" appended).
- `read(path, expected, adapt=None) -> dict`: the arrays for `expected` (name -> shape), in its
  order. A DataError of one line, naming the file and the first mismatch: a key the model needs
  and the file lacks, a key the file has and the model does not, a wrong shape. `adapt` maps a
  name to a function applied to its array before the shape check (the ViT position grid).
- `assign(variables, path, adapt=None) -> dict`: `read`, then assigns every variable (nothing is
  assigned unless every array fits); returns facts for provenance (file, sha256, tensors).
"""

from __future__ import annotations

import hashlib
import pickle
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from accelpipe.core.errors import DataError

WEIGHTS_FILE = "weights.npz"

Adapt = dict[str, Callable[[np.ndarray], np.ndarray]]


def save(arrays: dict[str, np.ndarray], path: Path) -> Path:
    path = Path(path)
    with open(path, "wb") as f:  # a file object: np.savez would otherwise append ".npz"
        float32: dict[str, Any] = {k: np.asarray(v, np.float32) for k, v in arrays.items()}
        np.savez(f, **float32)
    return path


def _open(path: Path) -> np.lib.npyio.NpzFile:
    try:
        data = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise DataError(f"{path}: no such file (converted starting weights)") from None
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, pickle.UnpicklingError) as exc:
        raise DataError(f"{path}: not a readable npz of starting weights ({exc})") from None
    if not isinstance(data, np.lib.npyio.NpzFile):
        raise DataError(f"{path}: a single .npy array, not an npz of starting weights")
    return data


def read(
    path: Path, expected: dict[str, tuple[int, ...]], adapt: Adapt | None = None
) -> dict[str, np.ndarray]:
    """Every expected array, checked; the first mismatch is one DataError naming it."""
    path, adapt = Path(path), adapt or {}
    with _open(path) as data:
        extra = [k for k in data.files if k not in expected]
        arrays = {}
        for name, shape in expected.items():
            if name not in data.files:
                raise DataError(f"{path}: no {name} (the model needs it)")
            try:
                value = np.asarray(data[name], dtype=np.float32)
            except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
                raise DataError(f"{path}: {name} is unreadable ({exc})") from None
            value = adapt[name](value) if name in adapt else value
            if tuple(value.shape) != tuple(shape):
                raise DataError(
                    f"{path}: {name} has shape {tuple(value.shape)}, the model needs {tuple(shape)}"
                )
            arrays[name] = value
    if extra:
        raise DataError(f"{path}: {extra[0]} is no variable of the model ({len(extra)} such keys)")
    return arrays


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def assign(variables: dict[str, Any], path: Path, adapt: Adapt | None = None) -> dict[str, Any]:
    """Load the npz into `variables` (name -> variable); nothing is assigned unless all fit."""
    expected = {name: tuple(int(d) for d in v.shape) for name, v in variables.items()}
    arrays = read(path, expected, adapt)
    for name, variable in variables.items():
        variable.assign(arrays[name])
    return {"file": str(path), "sha256": sha256(Path(path)), "tensors": len(arrays)}
