"""models.pretrained_npz: the converted starting weights are read as data, checked key by key
and shape by shape, and assigned all or nothing."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest

from accelpipe.core.errors import DataError
from accelpipe.models import pretrained_npz


class Variable:
    """What the loader needs of a framework variable: a shape and assign()."""

    def __init__(self, *shape: int) -> None:
        self.value = np.zeros(shape, np.float32)
        self.shape = shape

    def assign(self, value: np.ndarray) -> None:
        self.value = value


def _variables() -> dict[str, Variable]:
    return {"stem_conv/kernel": Variable(7, 7, 3, 4), "stem_bn/gamma": Variable(4)}


def _arrays(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {
        "stem_conv/kernel": rng.normal(size=(7, 7, 3, 4)),
        "stem_bn/gamma": rng.normal(size=4),
    }


def test_saved_arrays_are_assigned_exactly(tmp_path: Path) -> None:
    arrays = _arrays(np.random.default_rng(0))
    path = pretrained_npz.save(arrays, tmp_path / "weights.npz")
    variables = _variables()
    facts = pretrained_npz.assign(variables, path)
    for name, variable in variables.items():
        assert np.array_equal(variable.value, arrays[name].astype(np.float32))
    assert facts["tensors"] == 2 and facts["sha256"] == pretrained_npz.sha256(path)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda a: a.pop("stem_bn/gamma"),
            r"weights\.npz: no stem_bn/gamma \(the model needs it\)$",
        ),
        (
            lambda a: a.update({"stem_bn/gamma": np.zeros(5)}),
            r"weights\.npz: stem_bn/gamma has shape \(5,\), the model needs \(4,\)$",
        ),
        (
            lambda a: a.update({"head/kernel": np.zeros(3)}),
            r"weights\.npz: head/kernel is no variable of the model \(1 such keys\)$",
        ),
    ],
    ids=["missing key", "wrong shape", "unknown key"],
)
def test_the_first_mismatch_is_one_line_and_nothing_is_assigned(
    tmp_path: Path, change, message: str
) -> None:
    arrays = _arrays(np.random.default_rng(1))
    change(arrays)
    path = pretrained_npz.save(arrays, tmp_path / "weights.npz")
    variables = _variables()
    with pytest.raises(DataError, match=message) as err:
        pretrained_npz.assign(variables, path)
    assert "\n" not in str(err.value)
    assert all(not v.value.any() for v in variables.values())  # all or nothing


def test_a_pickle_or_a_missing_file_is_refused(tmp_path: Path) -> None:
    planted = tmp_path / "weights.npz"
    planted.write_bytes(pickle.dumps({"stem_conv/kernel": 1}))
    with pytest.raises(DataError, match="not a readable npz"):
        pretrained_npz.assign(_variables(), planted)
    with pytest.raises(DataError, match="no such file"):
        pretrained_npz.assign(_variables(), tmp_path / "absent.npz")


def test_adapt_runs_before_the_shape_check(tmp_path: Path) -> None:
    arrays = _arrays(np.random.default_rng(2))
    arrays["stem_bn/gamma"] = np.arange(8, dtype=np.float32)
    path = pretrained_npz.save(arrays, tmp_path / "weights.npz")
    variables = _variables()
    pretrained_npz.assign(variables, path, {"stem_bn/gamma": lambda a: a[::2]})
    assert variables["stem_bn/gamma"].value.tolist() == [0, 2, 4, 6]
