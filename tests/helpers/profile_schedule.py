"""The tiny profiler schedule both engines' tests run, and the steps train_log.csv marks
`profiled` under it: the same steps in both engines."""

from __future__ import annotations

TINY_SCHEDULE = {"wait": 1, "warmup": 1, "active": 2, "repeat": 1}
# Step 1 waits, step 2 warms the profiler up, steps 3 and 4 record; later steps come after
# the one cycle.
PROFILED_STEPS = [2, 3, 4]
