"""Which ``ProfilerStep#N`` annotations are complete steps.

When a training loop ends in the middle of a profiler cycle, torch closes the last
``ProfilerStep#N`` at profiler exit: that step holds none of the loop's work, only what ran
between the last ``prof.step()`` and the exit (in our trainer: the epoch's checkpoint save).
Its duration says nothing reliable (a checkpoint save can make it long, an immediate exit
short), so it is recognised by its content:

* Only the last step (latest start) of each trace file can be incomplete: earlier ones
  ended at a ``prof.step()``, which only the loop calls.
* The reference is the set of section names found inside *every* other step (of all files;
  if there are none, inside every last step that holds any section). A section is inside a
  step when it starts within the step's interval in the same process.
* A last step that holds none of the reference sections is incomplete (the AMD trace's
  49 µs ``ProfilerStep#2`` holds no ``Optimizer.step``; ours would hold no ``step``). "None
  of", not "not all of": a section that only some steps run (``loader_first``, a one-off
  annotation) must not make a real last step look incomplete when there are few steps.
* Traces with no sections inside steps fall back to duration: a last step shorter than a
  tenth of the median of the other steps is incomplete.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

_SHORT = 0.1  # fallback: a last step under this fraction of the others' median
# What a step's breakdown is split by: the engines' sections, or the structure of a PyTorch
# step in a trace without them (``traces.structure``).
SECTIONS, STRUCTURE = "sections", "structure"


@dataclass(frozen=True)
class Step:
    """One ProfilerStep: its duration (µs), the section names inside it, whether it is
    the last step of its file, and its breakdown (µs given to each section by
    ``intervals.step_breakdown``; the rest of ``dur`` is in no section) and what that
    breakdown was split by (``SECTIONS`` or ``STRUCTURE``)."""

    dur: float
    contents: frozenset[str]
    last: bool
    parts: dict[str, float] = field(default_factory=dict)
    basis: str = SECTIONS


def file_steps(
    step_pid: np.ndarray,
    step_ts: np.ndarray,
    step_dur: np.ndarray,
    sec_pid: np.ndarray,
    sec_ts: np.ndarray,
    sec_names: list[str],
    parts: list[dict[str, float]] | None = None,
    basis: str = SECTIONS,
) -> list[Step]:
    """The steps of one file, each with the names of the sections that start inside it
    (and its breakdown, when given: µs per part, per step in step order, split by
    ``basis``)."""
    if not len(step_ts):
        return []
    order = np.lexsort((sec_ts, sec_pid))
    s_pid, s_ts = sec_pid[order], sec_ts[order]
    names = [sec_names[i] for i in order.tolist()]
    last = int(np.argmax(step_ts))
    steps = []
    rows = zip(step_pid.tolist(), step_ts.tolist(), step_dur.tolist(), strict=True)
    for i, (pid, ts, dur) in enumerate(rows):
        lo = np.searchsorted(s_pid, pid, side="left")
        hi = np.searchsorted(s_pid, pid, side="right")
        a = lo + np.searchsorted(s_ts[lo:hi], ts, side="left")
        b = lo + np.searchsorted(s_ts[lo:hi], ts + dur, side="right")
        shares = parts[i] if parts else {}
        steps.append(Step(dur, frozenset(names[a:b]), i == last, shares, basis))
    return steps


def complete(steps: list[Step]) -> list[bool]:
    """For each step (of all files together): True unless it is an incomplete last step."""
    others = [s.contents for s in steps if not s.last]
    pool = others or [s.contents for s in steps if s.last and s.contents]
    reference = frozenset.intersection(*pool) if pool else frozenset()
    keep = []
    for i, step in enumerate(steps):
        if not step.last:
            keep.append(True)
        elif reference:
            keep.append(not reference.isdisjoint(step.contents))
        else:
            rest = [s.dur for j, s in enumerate(steps) if j != i]
            keep.append(not rest or step.dur >= _SHORT * float(np.median(rest)))
    return keep
