"""What an encoded image file is, read from its bytes (never its name), without decoding it.

The one check of the image files that COCO and ADE20K prepare copy into TFRecords. The input
pipelines decode those bytes with TensorFlow, whose JPEG decoder (like tf.io.decode_image)
reads the format from the bytes, so a PNG stored under a `.jpg` name trains like any JPEG.
What is accepted is what the reference's `image/format` field names (tensorflow/models
object_detection: 'jpeg' or 'png', decoded accordingly): a complete JPEG, or a PNG whose
chunks are whole and pass their CRCs. Anything else (GIF, BMP, WebP, TIFF: formats some TF
decoders read but the reference records do not name; truncated or corrupt files; not an
image at all) is refused with what it is.

Headers only: about a microsecond for a JPEG and a few for a PNG, where decoding costs
milliseconds. (ImageNet's index reads image sizes with PIL, which also goes by the bytes: its
loader decodes with PIL.)
"""

from __future__ import annotations

import struct
import zlib

JPEG, PNG = "jpeg", "png"
FORMATS = (JPEG, PNG)  # the values written to image/format
_NAMES = {JPEG: "JPEG", PNG: "PNG"}

# Start-of-frame markers (baseline, progressive, lossless, arithmetic...): they hold the size.
_SOF_MARKERS = frozenset(
    {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}
)
# Markers without a length field.
_STANDALONE = frozenset({0x01, *range(0xD0, 0xD9)})
_EOI_SEARCH_BYTES = 1024  # tolerate a little padding after the end-of-image marker
_JPEG_SIGNATURE = b"\xff\xd8"
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# Formats recognised only to say what a refused file is.
_OTHER_SIGNATURES = (
    (b"GIF87a", "GIF"),
    (b"GIF89a", "GIF"),
    (b"BM", "BMP"),
    (b"II*\x00", "TIFF"),
    (b"MM\x00*", "TIFF"),
)


class ImageProblem(Exception):
    """What is wrong with an image file's bytes (callers add the file's name)."""


def name(image_format: str) -> str:
    """The format as people write it: JPEG, PNG."""
    return _NAMES[image_format]


def jpeg_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) from a JPEG's start-of-frame header, or None if the bytes are not a
    complete JPEG (no SOI, no SOF, a segment running past the end, or no EOI near the end).

    Reads only the marker segments before the image data: about a microsecond per image, where
    decoding would cost milliseconds.
    """
    if data[:2] != _JPEG_SIGNATURE or data.rfind(b"\xff\xd9", -_EOI_SEARCH_BYTES) < 0:
        return None
    pos, end = 2, len(data)
    while pos + 4 <= end:
        if data[pos] != 0xFF:
            return None
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker in _STANDALONE:
            pos += 2
            continue
        (length,) = struct.unpack_from(">H", data, pos + 2)
        if marker in _SOF_MARKERS:
            if pos + 9 > end or length < 8:
                return None
            height, width = struct.unpack_from(">HH", data, pos + 5)
            return width, height
        if marker == 0xDA or length < 2:  # image data before any frame header
            return None
        pos += 2 + length
    return None


def png_header(data: bytes) -> tuple[int, int, int, int] | None:
    """(width, height, bit depth, colour type) from a PNG's IHDR chunk, None if not a PNG."""
    if data[:8] != _PNG_SIGNATURE or data[12:16] != b"IHDR" or len(data) < 26:
        return None
    width, height, depth, colour = struct.unpack_from(">IIBB", data, 16)
    return width, height, depth, colour


def png_problem(data: bytes) -> str | None:
    """What is wrong with a PNG's chunks, None if nothing: each chunk whole and passing its
    CRC-32, an IDAT, an IEND. Finds truncated and corrupted files at a few microseconds a
    file; inflating and unfiltering (decoding) would cost ~0.5 ms more."""
    view, pos, end, has_data = memoryview(data), 8, len(data), False
    while pos + 8 <= end:  # a chunk: length, type, data, CRC
        (length,) = struct.unpack_from(">I", data, pos)
        kind = bytes(view[pos + 4 : pos + 8]).decode("latin-1")
        stop = pos + 8 + length
        if stop + 4 > end:
            return f"truncated in its {kind} chunk"
        if zlib.crc32(view[pos + 4 : stop]) != struct.unpack_from(">I", data, stop)[0]:
            return f"its {kind} chunk fails its CRC"
        has_data |= kind == "IDAT"
        if kind == "IEND":
            return None if has_data else "no IDAT chunk"
        pos = stop + 4
    return "truncated: no IEND chunk"


def image_header(data: bytes) -> tuple[str, int, int]:
    """(format, width, height) of an image file's bytes: JPEG or PNG, whatever its name.

    ImageProblem saying what the bytes are otherwise: an incomplete JPEG, an unreadable PNG,
    another image format, or no image.
    """
    if data[:2] == _JPEG_SIGNATURE:
        size = jpeg_size(data)
        if size is None:
            raise ImageProblem("not a complete JPEG file")
        return JPEG, *size
    if data[:8] == _PNG_SIGNATURE:
        header = png_header(data)
        if header is None:
            raise ImageProblem("unreadable PNG (no IHDR chunk)")
        if problem := png_problem(data):
            raise ImageProblem(f"unreadable PNG ({problem})")
        return PNG, header[0], header[1]
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        other = "WebP"
    else:
        other = next((kind for magic, kind in _OTHER_SIGNATURES if data.startswith(magic)), "")
    if other:
        raise ImageProblem(
            f"a {other} image, not JPEG or PNG (the image formats the TFRecords hold)"
        )
    raise ImageProblem("not an image file (neither JPEG nor PNG)")
