"""Segmenter evaluation's resize to the original size: bilinear logits, then argmax, made in
bands of rows. The result is the whole-image `tf.image.resize` + `tf.argmax` bit for bit; the
memory is a band's, never the whole image's logits."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import tensorflow as tf

from accelpipe.datasets.ade20k import NUM_CLASSES
from accelpipe.inputs.ade20k_input import normalise
from accelpipe.workloads.segmenter import workload as segmenter

pytestmark = pytest.mark.tensorflow

# (logits h, w) -> (image H, W): up, down, mixed, equal, odd, one row or column
SIZES = [
    ((7, 9), (13, 17)),
    ((20, 30), (7, 11)),
    ((9, 16), (31, 5)),
    ((12, 12), (12, 12)),
    ((1, 1), (5, 3)),
    ((5, 4), (1, 1)),
    ((11, 13), (64, 47)),
    ((3, 2), (29, 2)),
]


def _whole_image(logits: np.ndarray, size: tuple[int, int]) -> tf.Tensor:
    return tf.image.resize(logits, size, "bilinear")


@pytest.mark.parametrize(("source", "size"), SIZES)
def test_every_band_is_the_whole_image_resize_bit_for_bit(source, size) -> None:
    logits = np.random.default_rng(0).normal(0, 4, (*source, 6)).astype(np.float32)
    whole = _whole_image(logits, size).numpy()
    for band_rows in (1, 2, 3, 5, 8, size[0], size[0] + 3):
        for start in range(0, size[0], band_rows):
            stop = min(start + band_rows, size[0])
            band = segmenter.resized_rows(logits, size, start, stop)
            assert band.dtype == np.float32 and band.shape == (stop - start, size[1], 6)
            np.testing.assert_array_equal(band, whole[start:stop])


@pytest.mark.parametrize(("source", "size"), SIZES)
@pytest.mark.parametrize("band_rows", [1, 4, 7, None])
@pytest.mark.parametrize("ties", [False, True])
def test_banded_argmax_is_the_whole_image_argmax(source, size, band_rows, ties) -> None:
    rng = np.random.default_rng(1)
    if ties:  # few distinct values: many equal maxima, the first class must win as in TF
        logits = rng.integers(0, 3, (*source, 5)).astype(np.float32)
    else:
        logits = rng.normal(0, 4, (*source, NUM_CLASSES)).astype(np.float32)
    expected = tf.argmax(_whole_image(logits, size), axis=-1, output_type=tf.int32).numpy()
    got = segmenter.resize_argmax(logits, size, band_rows)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, expected)


def test_predict_gives_the_whole_image_path_class_map() -> None:
    """predict() of an odd-sized image against the old whole-image resize + argmax."""
    weights = tf.constant(np.random.default_rng(2).normal(0, 1, (3, NUM_CLASSES)), tf.float32)

    def model(crops, training=False):
        return tf.einsum("bhwc,ck->bhwk", tf.convert_to_tensor(crops), weights)

    image = np.random.default_rng(3).integers(0, 256, (37, 53, 3), dtype=np.uint8)
    window, short_side = 16, 24
    got = segmenter.predict(model, image, window, short_side, stride=8, batch=4)
    resized = (24, round(53 * 24 / 37))
    x = normalise(tf.image.resize(tf.cast(image, tf.float32), resized, "bilinear")).numpy()
    logits = segmenter.sliding_window_logits(model, x, window, 8, 4)
    full = tf.image.resize(logits, (37, 53), "bilinear")
    np.testing.assert_array_equal(got, tf.argmax(full, axis=-1, output_type=tf.int32).numpy())


def test_no_band_is_taller_than_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    made = []
    real = segmenter.resized_rows

    def recording(logits, size, start, stop):
        band = real(logits, size, start, stop)
        made.append(band.shape)
        return band

    monkeypatch.setattr(segmenter, "resized_rows", recording)
    logits = np.zeros((10, 12, 7), np.float32)
    segmenter.resize_argmax(logits, (45, 33), band_rows=4)
    assert made == [(4, 33, 7)] * 11 + [(1, 33, 7)]


def test_default_band_holds_about_32_mib_of_logits_whatever_the_height() -> None:
    width = 4000  # a 4000x3000 validation image: 7.2 GB of logits at full size
    rows = segmenter._BAND_BYTES // (width * NUM_CLASSES * 4)
    assert rows == 13 and rows * width * NUM_CLASSES * 4 <= 32 << 20


def test_peak_memory_is_a_few_bands_not_the_whole_image() -> None:
    """Traced numpy allocations: the whole resized logits would be 400 x 50 x 150 x 4 B =
    12 MB; with 4-row bands the peak stays within a few bands (120 kB each) plus the
    class map, for up- and downscaling alike."""
    height, width, band_rows = 400, 50, 4
    band_bytes = band_rows * width * NUM_CLASSES * 4
    whole_bytes = height * width * NUM_CLASSES * 4
    for source in ((60, 8), (800, 100)):  # upscaled rows / downscaled (two taps per row)
        logits = np.random.default_rng(4).normal(size=(*source, NUM_CLASSES)).astype(np.float32)
        tracemalloc.start()
        try:
            segmenter.resize_argmax(logits, (height, width), band_rows)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        class_map = height * width * 4
        assert peak - class_map <= 5 * band_bytes, (source, peak)
        assert peak < whole_bytes / 10
