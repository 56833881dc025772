"""The one image check of COCO and ADE20K prepare (accelpipe.datasets.image_bytes): by the
bytes, whatever the name; what it accepts, the TFRecord pipelines' decoder reads."""

from __future__ import annotations

import io

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from accelpipe.datasets import image_bytes
from accelpipe.datasets.image_bytes import ImageProblem, image_header

pytestmark = pytest.mark.tensorflow

RGB = np.random.default_rng(0).integers(0, 256, (7, 9, 3), dtype=np.uint8)


def _encoded(image: Image.Image, image_format: str, **options) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format=image_format, **options)
    return buf.getvalue()


ACCEPTED = {
    "jpeg rgb": (_encoded(Image.fromarray(RGB), "JPEG"), "jpeg"),
    "jpeg grey": (_encoded(Image.fromarray(RGB[..., 0]), "JPEG"), "jpeg"),
    "jpeg cmyk": (_encoded(Image.fromarray(RGB).convert("CMYK"), "JPEG"), "jpeg"),
    "jpeg progressive": (_encoded(Image.fromarray(RGB), "JPEG", progressive=True), "jpeg"),
    "png rgb": (_encoded(Image.fromarray(RGB), "PNG"), "png"),
    "png rgba": (_encoded(Image.fromarray(RGB).convert("RGBA"), "PNG"), "png"),
    "png grey": (_encoded(Image.fromarray(RGB[..., 0]), "PNG"), "png"),
    "png palette": (_encoded(Image.fromarray(RGB).convert("P"), "PNG"), "png"),
    "png 1-bit": (_encoded(Image.fromarray(RGB[..., 0]).convert("1"), "PNG"), "png"),
    "png 16-bit": (_encoded(Image.fromarray(RGB[..., 0].astype(np.uint16) * 257), "PNG"), "png"),
    "png interlaced": (_encoded(Image.fromarray(RGB), "PNG", interlace=True), "png"),
}


@pytest.mark.parametrize("kind", sorted(ACCEPTED))
def test_accepted_images_are_what_the_input_pipelines_decode(kind: str) -> None:
    data, image_format = ACCEPTED[kind]
    assert image_header(data) == (image_format, 9, 7)
    # coco_input and ade20k_input decode with tf.io.decode_jpeg, which (as decode_image)
    # reads the format from the bytes
    assert tf.io.decode_jpeg(data, channels=3).shape == (7, 9, 3)
    assert tf.io.decode_image(data, channels=3, expand_animations=False).shape == (7, 9, 3)


def test_a_png_decodes_to_its_pixels_through_the_jpeg_decoder() -> None:
    data, _ = ACCEPTED["png rgb"]
    np.testing.assert_array_equal(tf.io.decode_jpeg(data, channels=3).numpy(), RGB)


REFUSED = {
    "gif": (_encoded(Image.fromarray(RGB), "GIF"), "a GIF image, not JPEG or PNG"),
    "bmp": (_encoded(Image.fromarray(RGB), "BMP"), "a BMP image, not JPEG or PNG"),
    "webp": (_encoded(Image.fromarray(RGB), "WEBP"), "a WebP image, not JPEG or PNG"),
    "tiff": (_encoded(Image.fromarray(RGB), "TIFF"), "a TIFF image, not JPEG or PNG"),
    "text": (b"<html>404</html>", "not an image file (neither JPEG nor PNG)"),
    "empty": (b"", "not an image file (neither JPEG nor PNG)"),
    "half a jpeg": (ACCEPTED["jpeg rgb"][0][:300], "not a complete JPEG file"),
    "half a png": (ACCEPTED["png rgb"][0][:100], "unreadable PNG (truncated in its IDAT chunk)"),
    "png signature only": (b"\x89PNG\r\n\x1a\n", "unreadable PNG (no IHDR chunk)"),
}


@pytest.mark.parametrize("kind", sorted(REFUSED))
def test_refused_bytes_say_what_they_are(kind: str) -> None:
    data, message = REFUSED[kind]
    with pytest.raises(ImageProblem) as err:
        image_header(data)
    assert str(err.value).startswith(message)


@pytest.mark.parametrize("kind", ["half a jpeg", "half a png", "text", "empty"])
def test_what_is_refused_as_broken_the_decoder_cannot_read_either(kind: str) -> None:
    with pytest.raises(tf.errors.InvalidArgumentError):
        tf.io.decode_image(REFUSED[kind][0], channels=3)


def test_formats_are_the_image_format_values() -> None:
    assert image_bytes.FORMATS == ("jpeg", "png")
    assert [image_bytes.name(f) for f in image_bytes.FORMATS] == ["JPEG", "PNG"]
