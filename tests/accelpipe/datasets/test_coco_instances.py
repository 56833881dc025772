"""Reading and checking a COCO instances JSON (coco_instances.records) on small files written
here: what is kept, skipped and refused, each refusal one message naming the file and key."""

from __future__ import annotations

import copy
import gc
import json
import math
import tracemalloc
from pathlib import Path

import pytest

from accelpipe.core.errors import DataError
from accelpipe.datasets import coco_instances
from accelpipe.datasets.coco_instances import Box, load_instances, records

CATEGORIES = [{"id": 3, "name": "car", "supercategory": "vehicle"}, {"id": 18, "name": "dog"}]


def _content() -> dict:
    return {
        "info": {"year": 2017},
        "images": [
            {"id": 42, "file_name": "000000000042.jpg", "width": 640, "height": 480},
            {"id": 7, "file_name": "000000000007.jpg", "width": 320, "height": 200},
            {"id": 9, "file_name": "000000000009.jpg", "width": 100, "height": 100},
        ],
        "annotations": [
            {"id": 1, "image_id": 42, "category_id": 18, "iscrowd": 0, "area": 50.5,
             "bbox": [64.0, 48.0, 320.0, 240.0]},
            {"id": 2, "image_id": 7, "category_id": 3, "iscrowd": 1, "area": 10,
             "bbox": [0, 0, 320, 200]},
            {"id": 3, "image_id": 42, "category_id": 3, "iscrowd": 0, "area": 1.0,
             "bbox": [10.0, 10.0, 0.0, 5.0]},  # zero width: skipped
            {"id": 4, "image_id": 9, "category_id": 3, "iscrowd": 0, "area": 1.0,
             "bbox": [50.0, 50.0, 50.6, 10.0]},  # ends 0.6 px past the image: skipped
        ],
        "categories": copy.deepcopy(CATEGORIES),
    }  # fmt: skip


def _write(tmp_path: Path, content: dict | str) -> Path:
    path = tmp_path / "instances_val2017.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


def _records(tmp_path: Path, content: dict | str, skip_empty: bool = False):
    return records(_write(tmp_path, content), tmp_path / "val2017", skip_empty=skip_empty)


def test_records_keep_json_order_normalised_boxes_and_stats(tmp_path: Path) -> None:
    kept, stats, cats = _records(tmp_path, _content())
    assert [r.image_id for r in kept] == [42, 7, 9]
    first = kept[0]
    assert first.path == str(tmp_path / "val2017" / "000000000042.jpg")
    assert (first.file_name, first.width, first.height) == ("000000000042.jpg", 640, 480)
    assert first.boxes == [Box(0.1, 0.6, 0.1, 0.6, 18, "dog", 0, 50.5)]
    assert kept[1].boxes == [Box(0.0, 1.0, 0.0, 1.0, 3, "car", 1, 10.0)]
    assert kept[2].boxes == []
    assert (stats.images, stats.source_images, stats.skipped_images) == (3, 3, 0)
    assert (stats.boxes, stats.crowd_boxes, stats.skipped_boxes) == (2, 1, 2)
    assert sorted(cats) == [3, 18]


def test_skip_empty_drops_images_left_without_boxes(tmp_path: Path) -> None:
    kept, stats, _cats = _records(tmp_path, _content(), skip_empty=True)
    assert [r.image_id for r in kept] == [42, 7]
    assert (stats.images, stats.skipped_images) == (2, 1)


def test_integral_floats_are_exact_integers(tmp_path: Path) -> None:
    content = _content()
    content["images"][0].update(width=640.0, id=42.0)
    kept, _stats, _cats = _records(tmp_path, content)
    assert (kept[0].image_id, kept[0].width) == (42, 640)
    assert type(kept[0].width) is int


@pytest.mark.parametrize(
    ("table", "index", "key", "value", "shown"),
    [
        ("images", 1, "width", 320.5, "320.5"),
        ("images", 0, "id", "42", "'42'"),
        ("images", 2, "height", True, "True"),
        # Past 64 bits: orjson reads it as a float, which is refused, not rounded.
        ("images", 0, "id", 2**70, r"1\.1805916207174113e\+21"),
        ("annotations", 2, "image_id", None, "None"),
        ("categories", 1, "id", 18.25, "18.25"),
    ],
)
def test_a_non_integer_is_named_with_its_key(
    tmp_path: Path, table: str, index: int, key: str, value: object, shown: str
) -> None:
    content = _content()
    content[table][index][key] = value
    with pytest.raises(DataError, match=rf"{table}\[{index}\]\.{key} = {shown} is not an integer"):
        _records(tmp_path, content)


def test_an_id_beyond_int64_is_refused(tmp_path: Path) -> None:
    content = _content()
    content["categories"][0]["id"] = 2**63  # orjson keeps it an int: past the int64 features
    with pytest.raises(DataError, match=r"categories\[0\]\.id = 9223372036854775808 is not"):
        _records(tmp_path, content)


def test_an_image_id_listed_twice_is_refused(tmp_path: Path) -> None:
    content = _content()
    content["images"][2]["id"] = 42
    with pytest.raises(DataError, match=r"images\[2\]: image id 42 is listed twice"):
        _records(tmp_path, content)


OUTSIDE = r"image id 42: annotations\[0\] \(id 1\) has bbox .* outside its 640x480 image"


@pytest.mark.parametrize(
    ("ann", "message"),
    [
        ({"bbox": [1.0, 2.0, 3.0]}, r"annotations\[0\]\.bbox = \[1\.0, 2\.0, 3\.0\] is not \[x, y"),
        ({"bbox": None}, r"annotations\[0\]\.bbox = None is not \[x, y"),
        ({"bbox": ["nan", 1, 2, 3]}, OUTSIDE),
        ({"bbox": [1, 2, "nan", 3]}, OUTSIDE),
        ({"bbox": [1, 2, 3, "inf"]}, OUTSIDE),
        ({"bbox": [600, 0, 100, 10]}, OUTSIDE),
        ({"iscrowd": 2}, r"annotations\[0\]\.iscrowd = 2 is not 0 or 1"),
        ({"area": "big"}, r"annotations\[0\]\.area = 'big' is not a number"),
        ({"category_id": 5}, r"annotations\[0\]\.category_id = 5 .* is not in 'categories'"),
        ({"image_id": 8}, r"annotations\[0\]\.image_id = 8 is not in 'images'"),
    ],
)
def test_a_bad_annotation_is_named(tmp_path: Path, ann: dict, message: str) -> None:
    content = _content()
    content["annotations"][0].update(ann)
    with pytest.raises(DataError, match=message) as err:
        _records(tmp_path, content)
    assert str(err.value).startswith(str(tmp_path / "instances_val2017.json"))


def test_a_missing_key_is_named(tmp_path: Path) -> None:
    content = _content()
    del content["images"][1]["file_name"]
    with pytest.raises(DataError, match=r"images\[1\] has no 'file_name'"):
        _records(tmp_path, content)


def test_area_defaults_to_the_box_area(tmp_path: Path) -> None:
    content = _content()
    del content["annotations"][0]["area"]
    kept, _stats, _cats = _records(tmp_path, content)
    assert math.isclose(kept[0].boxes[0].area, 320.0 * 240.0)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"images": [], "annotations": [NaN], "categories": []}', "not valid JSON"),
        ('{"images": [], "annotations": [', "not valid JSON"),
        ('{"images": [], "annotations": {}, "categories": []}', "'annotations' must be a list"),
        ('{"images": [1], "annotations": [], "categories": []}', "'images' must be a list of"),
        ("[]", "'images' must be a list of objects"),
    ],
)
def test_a_malformed_file_is_one_error_naming_it(tmp_path: Path, text: str, message: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(DataError, match=message) as err:
        load_instances(path)
    assert str(err.value).startswith(f"{path}: ")
    assert "\n" not in str(err.value)


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="annotation file not found"):
        load_instances(tmp_path / "instances_train2017.json")


def test_a_folder_in_place_of_the_file_is_named(tmp_path: Path) -> None:
    path = tmp_path / "instances_train2017.json"
    path.mkdir()
    with pytest.raises(DataError, match=r"instances_train2017\.json: cannot read the annotation"):
        load_instances(path)


def test_the_garbage_collector_is_back_on_after_reading(tmp_path: Path) -> None:
    """records() pauses the cyclic collector while it parses; it must come back on, after an
    error too, and stay off where the caller had turned it off. (The collector is turned on
    first: this is about records(); traces.reader.loads_batch once left it off in the same
    process.)"""
    gc.enable()
    _records(tmp_path, _content())
    assert gc.isenabled()
    with pytest.raises(DataError):
        _records(tmp_path, "[]")
    assert gc.isenabled()
    gc.disable()
    try:
        _records(tmp_path, _content())
        assert not gc.isenabled()
    finally:
        gc.enable()


# ----------------------------------------------------------- the annotations, streamed


def _many(n: int, points: int = 60, nested: bool = True) -> dict:
    """`n` annotations on the first image, with polygons (most of a real file's bytes), an RLE
    dict, strings holding the array's separators and non-ASCII text; categories after them;
    with `nested`, an image holding an 'annotations' array of its own, before them."""
    content = _content()
    anns = []
    for i in range(n):
        ann = {"id": 100 + i, "image_id": 42, "category_id": 3, "iscrowd": 0, "area": 2.0,
               "bbox": [1.0, 2.0, 3.0 + i % 7, 4.0],
               "segmentation": [[float(j) + 0.25 for j in range(points)]]}  # fmt: skip
        if i % 5 == 0:
            ann["segmentation"] = {"counts": "ab},{cd]}", "size": [480, 640]}
            ann["note"] = 'é€ }, {"x": [1]}]'
        anns.append(ann)
    content["annotations"] = anns
    if nested:
        content["images"].append({"id": 5, "file_name": "a.jpg", "width": 2, "height": 2,
                                  "annotations": [{"id": 9}]})  # fmt: skip
    return content


@pytest.mark.parametrize("indent", [None, 2])
def test_streamed_annotations_are_the_whole_parse(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, indent: int | None
) -> None:
    path = tmp_path / "instances_train2017.json"
    path.write_text(json.dumps(_many(300), indent=indent, ensure_ascii=False))
    whole = load_instances(path)
    monkeypatch.setattr(coco_instances, "CHUNK_BYTES", 1500)  # a few elements a window
    skeleton, streamed = coco_instances.stream_instances(path)
    assert list(streamed) == whole["annotations"]
    assert skeleton == {**whole, "annotations": []}
    assert records(path, tmp_path, skip_empty=True)[0][0].boxes == [
        Box(1 / 640, (4.0 + i % 7) / 640, 2 / 480, 6 / 480, 3, "car", 0, 2.0) for i in range(300)
    ]


@pytest.mark.parametrize(
    "text",
    [  # no top-level array to stream: parsed whole, as before
        '{"images": [{"id": 1, "annotations": [1]}], "annotations": [], "categories": []}',
        '{"info": "\\"annotations\\": [", "images": [], "annotations": [], "categories": []}',
        '{"images": [], "annotations": [{"a": 1}], "annotations": [], "categories": []}',
    ],
)
def test_a_file_whose_array_is_not_the_top_level_one_is_parsed_whole(
    tmp_path: Path, text: str
) -> None:
    path = _write(tmp_path, text)
    skeleton, streamed = coco_instances.stream_instances(path)
    assert list(streamed) == json.loads(text)["annotations"]
    assert skeleton["images"] == json.loads(text)["images"]


def test_records_never_hold_the_whole_parsed_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 33 item 4: the parsed annotations were 4.2 GB at COCO 2017's size."""
    path = tmp_path / "instances_train2017.json"
    path.write_text(json.dumps(_many(2000, nested=False)))
    monkeypatch.setattr(coco_instances, "CHUNK_BYTES", 64 << 10)  # ~1/20 of the file
    tracemalloc.start()
    try:
        whole = load_instances(path)
        whole_peak = tracemalloc.get_traced_memory()[1]
        del whole
        tracemalloc.reset_peak()
        _kept, stats, _cats = records(path, tmp_path, skip_empty=True)
        streamed_peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert stats.boxes == 2000
    assert streamed_peak < whole_peak / 4
