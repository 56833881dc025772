"""Checks of the data inside tf.data pipelines, surfaced as one DataError line.

A tf.debugging.Assert that fails inside a dataset's map function reaches Python as an
InvalidArgumentError from the iterator, its message wrapped in graph context. `check` marks
the message; `data_errors` (and `checked`, an iteration under it) turns an error carrying the
mark into a DataError with just that message.

A damaged TFRecord shard reaches Python as a DataLossError ("truncated record at 16135")
that names no file: `data_errors` finds the shard among those this process reads
(datasets.tfrecord.find_damaged) and raises a DataError naming it and how to re-make it.
Every other error passes through unchanged.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import TypeVar

from accelpipe.core.errors import DataError
from accelpipe.core.keras2 import tf
from accelpipe.datasets.tfrecord import find_damaged

Element = TypeVar("Element")

_MARK = "[accelpipe data check] "
_END = " [end]"


def check(condition: tf.Tensor, *message: tf.Tensor | str) -> tf.Operation:
    """Assert `condition`; the message parts (string tensors or str) are joined. Make the
    checked tensors depend on the result (tf.control_dependencies) so the check runs."""
    text = tf.strings.join([_MARK, *message, _END])
    return tf.debugging.Assert(condition, [text])


def _marked(message: str) -> str | None:
    start = message.find(_MARK)
    if start < 0:
        return None
    start += len(_MARK)
    end = message.find(_END, start)
    return message[start:end] if end >= 0 else message[start:].splitlines()[0]


@contextlib.contextmanager
def data_errors() -> Iterator[None]:
    """Re-raise a failed `check`, or a damaged TFRecord shard, met while iterating a dataset
    as one DataError line."""
    try:
        yield
    except tf.errors.InvalidArgumentError as err:
        message = _marked(err.message)
        if message is None:
            raise
        raise DataError(message) from None
    except tf.errors.DataLossError as err:
        message = find_damaged(err.message)
        if message is None:  # not a shard read here: TensorFlow's own message is all there is
            raise
        raise DataError(message) from None


def checked(elements: Iterable[Element]) -> Iterator[Element]:
    """Iterate `elements` (a dataset) under `data_errors`."""
    iterator = iter(elements)
    while True:
        with data_errors():
            try:
                element = next(iterator)
            except StopIteration:
                return
        yield element
