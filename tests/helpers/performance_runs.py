"""A tiny run's train_log.csv, train stage.json and published figures, as the performance
tests read them (tests/accelpipe/performance/)."""

from __future__ import annotations

from pathlib import Path

from accelpipe.config import recipes
from accelpipe.performance.figures import Figure
from tests.helpers.train_logs import write_train_log

# step: (samples/s, data wait ms, step ms, profiled). Step 1 is the warm-up, the profiler ran
# steps 2 and 3, and steps 4..8 are measured.
LOG = {
    1: (10.0, 50.0, 400.0, "0"),
    2: (20.0, 5.0, 200.0, "1"),
    3: (30.0, 5.0, 150.0, "1"),
    4: (100.0, 2.0, 40.0, "0"),
    5: (110.0, 4.0, 36.0, "0"),
    6: (90.0, 1.0, 44.0, "0"),
    7: (120.0, 3.0, 30.0, "0"),
    8: (80.0, 5.0, 50.0, "0"),
}
TRAIN = {
    "backend": "gaudi",
    "device": "GAUDI",
    "precision": "bf16",
    "world_size": 8,
    "global_batch": 1024,
    "steps": 8,
    "seconds": 12.5,
    "peak_device_memory_bytes": 123,
    "device_memory_source": "torch.hpu.max_memory_allocated",
    "peak_host_rss_bytes": 456,
}
# The conditions of a figure measured as our runs are (real data, our definition, ssd's loader).
LIKE_OURS = {
    "data": "real",
    "loader": "tf.data",
    "computed": "samples_over_time",
    "software": "x",
    "recipe": recipes.recipe_id("ssd"),
}
FIGURES = [
    Figure("ssd", 400.0, "img/s", "bf16", "Gaudi", 1, 128, "one card", **LIKE_OURS),
    Figure("ssd", 3200.0, "img/s", "bf16", "Gaudi", 8, 128, "eight cards", **LIKE_OURS),
    Figure("ssd", 150.0, "img/s", "fp32", "Gaudi", 1, 128, "fp32", **LIKE_OURS),
]


def write_log(path: Path) -> Path:
    """LOG as a train_log.csv at `path`."""
    assert list(LOG) == list(range(1, len(LOG) + 1))
    return write_train_log(path, LOG.values())
