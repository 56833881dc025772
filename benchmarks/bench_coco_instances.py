"""Reading a COCO instances JSON into checked image records vs a bare stdlib `json.load`;
prints one JSON object.

COCO 2017's train file is ~450 MB (118k images, 860k annotations). Before any train record is
written, prepare parses it and checks every annotation (accelpipe.datasets.coco_instances.
records); the tensorflow/tpu converter's equivalent step is a `json.load` and an index by
image id. At full size this step is seconds, comparable to reading the JPEGs from a fast disk,
so it is measured on its own here, at COCO's proportions:

* an instances JSON written here (no images: records() reads none) with `--images` images,
  each entry with COCO's fields (license, urls, date, size), and 7.3 annotations an image on
  average (COCO train: 860001 / 118287), each with a polygon of 8 to 40 points, area, bbox,
  iscrowd (1 % crowds, with RLE counts) and ids; ~3.9 KB an image, as COCO's file;
* `stdlib_load_s`: `json.loads` of its bytes, nothing else (the floor of the reference's way);
* `records_s`: coco_instances.records (orjson parse, every field checked, boxes normalised);
* `ratio_to_stdlib_load` = stdlib_load_s / records_s (> 1: checked records come faster than
  the reference's bare parse). Best of `--repeats` for each, interleaved.

    PYTHONPATH=workflow python benchmarks/bench_coco_instances.py --images 20000
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from math import inf
from pathlib import Path
from typing import Any

import smoke  # the sibling module (sys.path[0] when run as a script)

from accelpipe.datasets.coco_instances import records

ANNOTATIONS_PER_IMAGE = 860001 / 118287
CATEGORY_IDS = [*range(1, 12), *range(13, 26), 27, 28, *range(31, 45), *range(46, 66), 67, 70]
CATEGORY_IDS += [*range(72, 83), *range(84, 91)]  # COCO's 80 ids, 1..90 with gaps


def _annotation(rng: random.Random, ann_id: int, image: dict[str, Any]) -> dict[str, Any]:
    width, height = image["width"], image["height"]
    w, h = rng.uniform(4, width / 2), rng.uniform(4, height / 2)
    x, y = rng.uniform(0, width - w), rng.uniform(0, height - h)
    crowd = rng.random() < 0.01
    if crowd:
        segmentation: Any = {
            "counts": [rng.randrange(500) for _ in range(60)],
            "size": [height, width],
        }
    else:
        points = rng.randrange(8, 41)
        polygon = [
            round(v, 2) for _ in range(points) for v in (x + rng.random() * w, y + rng.random() * h)
        ]
        segmentation = [polygon]
    return {
        "segmentation": segmentation,
        "area": round(w * h * 0.6, 4),
        "iscrowd": int(crowd),
        "image_id": image["id"],
        "bbox": [round(x, 2), round(y, 2), round(w, 2), round(h, 2)],
        "category_id": rng.choice(CATEGORY_IDS),
        "id": ann_id,
    }


def instances(images: int, seed: int) -> dict[str, Any]:
    """An instances JSON at COCO train's proportions (fields, annotations an image, polygons)."""
    rng = random.Random(seed)
    content: dict[str, Any] = {
        "info": {"description": "bench", "version": "1.0", "year": 2017},
        "licenses": [{"url": "http://example.org/", "id": i, "name": "cc"} for i in range(1, 9)],
        "images": [],
        "annotations": [],
        "categories": [
            {"supercategory": "thing", "id": cid, "name": f"category {cid}"} for cid in CATEGORY_IDS
        ],
    }
    ann_id = 1
    for index in range(images):
        image_id = 100000 + index * 7
        image = {
            "license": rng.randrange(1, 9),
            "file_name": f"{image_id:012d}.jpg",
            "coco_url": f"http://images.cocodataset.org/train2017/{image_id:012d}.jpg",
            "height": rng.choice((480, 427, 640, 375)),
            "width": rng.choice((640, 500, 480)),
            "date_captured": "2013-11-14 16:28:13",
            "flickr_url": f"http://farm4.staticflickr.com/{image_id}/{image_id}_abc_z.jpg",
            "id": image_id,
        }
        content["images"].append(image)
        count = round(rng.expovariate(1 / ANNOTATIONS_PER_IMAGE))
        for _ in range(count):
            content["annotations"].append(_annotation(rng, ann_id, image))
            ann_id += 1
    return content


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=20000)
    ap.add_argument("--repeats", type=int, default=3, help="best of N timings for each side")
    ap.add_argument("--seed", type=int, default=0)
    args = smoke.parse_args(ap, argv, images=10, repeats=1)

    content = instances(args.images, args.seed)
    with tempfile.TemporaryDirectory(prefix="bench_coco_instances.") as scratch:
        path = Path(scratch) / "instances_train2017.json"
        path.write_text(json.dumps(content, separators=(",", ":")))
        annotations = len(content["annotations"])
        del content
        best = {"stdlib_load_s": inf, "records_s": inf}
        for _ in range(args.repeats):
            start = time.perf_counter()
            json.loads(path.read_bytes())
            best["stdlib_load_s"] = min(best["stdlib_load_s"], time.perf_counter() - start)
            start = time.perf_counter()
            kept, _stats, _cats = records(path, Path(scratch) / "train2017", skip_empty=True)
            best["records_s"] = min(best["records_s"], time.perf_counter() - start)
        size = path.stat().st_size
    result = {
        "bench": "coco_instances",
        "smoke": args.smoke,
        "images": args.images,
        "annotations": annotations,
        "records": len(kept),
        "file_mb": round(size / 1e6, 1),
        "stdlib_load_s": round(best["stdlib_load_s"], 3),
        "records_s": round(best["records_s"], 3),
        "records_us_per_annotation": round(best["records_s"] / annotations * 1e6, 2),
        "ratio_to_stdlib_load": round(best["stdlib_load_s"] / best["records_s"], 3),
    }
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")
    return result


if __name__ == "__main__":
    main()
