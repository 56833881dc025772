"""Time on intervals: the one definition of a section's busy time and span, and of the step
breakdown, for kineto and TensorFlow traces alike.

A section instance is a set of host intervals: a ``record_function`` (kineto) or a
``tf.profiler.experimental.Trace`` event is one interval (its thread is inside it for its
whole duration); a TensorFlow name scope (``forward``, ...) is the ops that carry it, on
any executor thread, one instance per step.

* **busy** time of a set of intervals: the length of their union, the time at least one of
  them runs (``busy_and_span``; ``union_length``). Concurrent ops count once; the gaps
  between them do not count.
* **span**: first start to last end. For one interval busy and span are its duration.
* The **step breakdown** (``step_breakdown``) gives each instant of a step to at most one
  section, so the parts and the time in no section add up to the step exactly. Sections
  nest (``step`` holds ``forward``; ``Optimizer.step#SGD.step`` sits in
  ``optimizer_step``) and overlap (TF runs an optimizer's variable reads while ``forward``
  runs), so busy times or spans summed over sections count instants twice. The rule, per
  instant of a step, among the sections busy then in the step's process:

  1. the engines' sections inside a step, by a fixed precedence in the order a step runs
     them: ``FIRST`` (``loader_first``, ``loader_next``, ``forward``, ``loss``,
     ``backward``, ``optimizer_step``): the first of them busy then takes the instant;
  2. else the innermost other busy section: the interval that started last (ties: the one
     that ends first), e.g. ``step`` outside its four parts, or a user's
     ``record_function``;
  3. else no section.

  A trace without the engines' sections is split by the structure of a PyTorch step
  (``traces.structure``): its parts take rule 1's place (``first``), and the time rules 1
  and 2 leave goes, where a part's ``fill`` interval holds it, to that part before it is
  no section's.

Times are µs as the traces write them; intervals are closed, and an end before its start
counts as an empty interval.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

# The engines' sections inside a profiler step, in the order a step runs them: the fixed
# precedence of the step breakdown.
FIRST = ("loader_first", "loader_next", "forward", "loss", "backward", "optimizer_step")


def merged(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of intervals as disjoint pieces, sorted by start."""
    if not len(start):
        return np.zeros(0), np.zeros(0)
    order = np.argsort(start, kind="stable")
    s = start[order]
    e = np.maximum(end[order], s)
    del order  # these arrays can be the size of a trace's kernel columns
    reach = np.maximum.accumulate(e)
    opens = np.flatnonzero(s[1:] > reach[:-1])
    del reach
    opens += 1
    opens = np.concatenate(([0], opens))
    return s[opens], np.maximum.reduceat(e, opens)


def union_length(start: np.ndarray, end: np.ndarray) -> float:
    """Busy time: the length of the union of intervals."""
    lo, hi = merged(start, end)
    return float((hi - lo).sum())


def covered(start: np.ndarray, end: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Per window ``[lo, hi]``: the time in it covered by at least one interval."""
    if not len(start) or not len(lo):
        return np.zeros(len(lo))
    b_start, b_end = merged(start, end)
    before = np.concatenate(([0.0], np.cumsum(b_end - b_start)))

    def upto(t: np.ndarray) -> np.ndarray:  # covered time in (-inf, t]
        k = np.searchsorted(b_start, t, side="right")  # pieces starting at or before t
        over = np.where(k > 0, b_end[np.maximum(k - 1, 0)] - t, 0.0)
        return before[k] - np.maximum(over, 0.0)

    return np.maximum(upto(hi) - upto(lo), 0.0)


class Groups(NamedTuple):
    """Per group of intervals (``busy_and_span``), in key order."""

    key: np.ndarray  # the distinct keys, sorted
    first: np.ndarray  # first start
    last: np.ndarray  # last end: the span is ``last - first``
    busy: np.ndarray  # length of the union
    total: np.ndarray  # summed durations
    head: np.ndarray  # index (into the input) of the group's first-starting interval


def busy_and_span(key: np.ndarray, start: np.ndarray, end: np.ndarray) -> Groups:
    """Intervals grouped by ``key`` (one group per section instance): per key, the span's
    ends, the busy time and the summed durations."""
    order = np.lexsort((start, key))
    k, s = key[order], start[order]
    e = np.maximum(end[order], s)
    if not len(k):
        empty = np.zeros(0)
        return Groups(k, empty, empty, empty, empty, order)
    heads = np.concatenate(([0], np.flatnonzero(k[1:] != k[:-1]) + 1))
    tails = np.append(heads[1:], len(k))
    total = np.add.reduceat(e - s, heads)
    busy = total.copy()  # exact for one interval; unions for the groups of several
    for g in np.flatnonzero(tails - heads > 1).tolist():
        a, b = int(heads[g]), int(tails[g])
        reach = np.maximum.accumulate(e[a:b])
        opens = np.concatenate(([a], np.flatnonzero(s[a + 1 : b] > reach[:-1]) + a + 1))
        busy[g] = float((np.maximum.reduceat(e[a:b], opens - a) - s[opens]).sum())
    return Groups(k[heads], s[heads], np.maximum.reduceat(e, heads), busy, total, order[heads])


def slot_owners(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct boundary points ``p`` (m of them) and the innermost interval (index into the
    start-sorted input, or -1) of each of 2m + 1 slots: before ``p[0]``, at ``p[0]``,
    between ``p[0]`` and ``p[1]``, at ``p[1]``, ..., after ``p[-1]``.

    A sweep with a heap keyed (latest start, earliest end); entries that have ended are
    dropped lazily when they reach the top.
    """
    points = np.unique(np.concatenate((start, end)))
    owners = np.full(2 * len(points) + 1, -1, np.int64)
    starts, ends = start.tolist(), end.tolist()
    heap: list[tuple[float, float, int]] = []
    nxt = 0
    for j, p in enumerate(points.tolist()):
        while nxt < len(starts) and starts[nxt] <= p:
            heapq.heappush(heap, (-starts[nxt], ends[nxt], nxt))
            nxt += 1
        while heap and heap[0][1] < p:  # ended before p
            heapq.heappop(heap)
        owners[2 * j + 1] = heap[0][2] if heap else -1
        while heap and heap[0][1] <= p:  # ends at p: not in the open stretch after it
            heapq.heappop(heap)
        owners[2 * j + 2] = heap[0][2] if heap else -1
    return points, owners


def step_breakdown(
    step_pid: np.ndarray,
    step_lo: np.ndarray,
    step_hi: np.ndarray,
    name: np.ndarray,
    pid: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    names: list[str],
    first: Sequence[str] = FIRST,
    fill: Fill | None = None,
) -> tuple[list[dict[str, float]], np.ndarray]:
    """Each step ``[step_lo, step_hi]`` split by the rule in the module docstring among the
    section intervals of its process (``name``: ids into ``names``): per step, µs given to
    each section (sections with none left out), and µs in no section. Per step, the parts
    and the no-section time add up to ``step_hi - step_lo`` (to float rounding). ``first``:
    rule 1's names in precedence order; ``fill``: intervals whose part takes what rules 1
    and 2 leave in them (in ``first`` order)."""
    parts: list[dict[str, float]] = [{} for _ in range(len(step_lo))]
    no_section = np.maximum(step_hi - step_lo, 0.0)
    first_ids = [names.index(n) for n in first if n in names]
    for p in np.unique(step_pid).tolist():
        rows = np.flatnonzero(step_pid == p)
        mine = pid == p
        if not mine.any():
            continue
        lo, hi = step_lo[rows], step_hi[rows]
        s, e, nm = start[mine], np.maximum(end[mine], start[mine]), name[mine]

        def give(section: int, us: np.ndarray, rows: np.ndarray = rows) -> None:
            for i in np.flatnonzero(us > 0).tolist():
                mine = parts[int(rows[i])]
                mine[names[section]] = mine.get(names[section], 0.0) + float(us[i])

        # 1. The fixed precedence: each one gets what the ones before it left.
        taken_s, taken_e = np.zeros(0), np.zeros(0)
        before = np.zeros(len(rows))
        for section in first_ids:
            sel = nm == section
            if sel.any():
                taken_s, taken_e = merged(np.append(taken_s, s[sel]), np.append(taken_e, e[sel]))
                now = covered(taken_s, taken_e, lo, hi)
                give(section, now - before)
                before = now
        # 2. The rest of the time: the innermost other interval, in stretches of one owner.
        rest = ~np.isin(nm, first_ids)
        total = before
        if rest.any():
            order = np.argsort(s[rest], kind="stable")
            r_s, r_e, r_name = s[rest][order], e[rest][order], nm[rest][order]
            points, owners = slot_owners(r_s, r_e)
            owner = owners[2 : 2 * len(points) - 1 : 2]  # the open stretch after each point
            held = owner >= 0
            st_s, st_e, st_name = points[:-1][held], points[1:][held], r_name[owner[held]]
            for section in np.unique(st_name).tolist():
                sel = st_name == section
                now = covered(np.append(taken_s, st_s[sel]), np.append(taken_e, st_e[sel]), lo, hi)
                give(section, now - before)
            taken_s, taken_e = merged(np.append(taken_s, r_s), np.append(taken_e, r_e))
            total = covered(taken_s, taken_e, lo, hi)
        if fill is not None:  # what rules 1 and 2 left, inside a part's fill interval
            total = _fill(fill, p, first_ids, (taken_s, taken_e), lo, hi, total, give)
        # 3. No section.
        no_section[rows] = np.maximum(hi - lo - total, 0.0)
    return parts, no_section


class Fill(NamedTuple):
    """Intervals that give a part the time no section holds (``step_breakdown``)."""

    name: np.ndarray  # ids into the breakdown's names
    pid: np.ndarray
    start: np.ndarray
    end: np.ndarray


def _fill(
    fill: Fill,
    pid: int,
    order: list[int],
    taken: tuple[np.ndarray, np.ndarray],
    lo: np.ndarray,
    hi: np.ndarray,
    before: np.ndarray,
    give: Callable[[int, np.ndarray], None],
) -> np.ndarray:
    """Give each part (in ``order``) the time of its fill intervals in process ``pid``
    outside ``taken`` and the parts before it; returns the steps' covered time after."""
    mine = fill.pid == pid
    taken_s, taken_e = taken
    for section in order:
        sel = mine & (fill.name == section)
        if sel.any():
            taken_s, taken_e = merged(
                np.append(taken_s, fill.start[sel]), np.append(taken_e, fill.end[sel])
            )
            now = covered(taken_s, taken_e, lo, hi)
            give(section, now - before)
            before = now
    return before
