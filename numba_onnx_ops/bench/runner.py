"""Running the comparison: check every contender once, then time those that agree."""

from __future__ import annotations

import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from numba.core import event

from .cases import CASES, SPREADS, Case, FirstCall, Spread, make_inputs
from .checking import check
from .contenders import (
    CONTENDERS,
    FACTORIES,
    MIN_CALLS_PER_SAMPLE,
    OURS,
    PEERS,
    Unavailable,
    as_array,
    contender_threads,
)
from .report import fmt_first_calls, fmt_median, fmt_ratio
from .timing import TIMINGS, call_estimates, time_interleaved, wait_until_idle


@dataclass
class Row:
    """The outcome of one case: median seconds per contender, or why there is none.

    ``quartiles`` holds the first and third quartiles of each contender's samples (the spread
    of its median); ``first_call_work`` what numba did during our first call (``numba_work``);
    ``blas_limited``, for a case that sets its threads, whether numpy's BLAS was held to them
    (``contenders.contender_threads``).
    """

    case: Case
    size: str
    times: dict[str, float] = field(default_factory=dict)
    first_call: dict[str, float] = field(default_factory=dict)
    status: dict[str, str] = field(default_factory=dict)  # "ok", "n/a: ...", "wrong: ...", ...
    rounds: int = 0
    quartiles: dict[str, tuple[float, float]] = field(default_factory=dict)
    first_call_work: dict[str, int] = field(default_factory=dict)
    blas_limited: bool | None = None

    @property
    def best_peer(self) -> tuple[str, float] | None:
        peers = [(self.times[p], p) for p in PEERS if p in self.times]
        return (min(peers)[1], min(peers)[0]) if peers else None

    @property
    def ratio(self) -> float | None:
        best = self.best_peer
        if best is None or OURS not in self.times:
            return None
        return best[1] / self.times[OURS]

    @property
    def judged(self) -> bool:
        """Whether the target applies: the target's shapes, timed for real (not ``tiny``)."""
        return self.size != "tiny" and self.case.shapes_at(self.size) == self.case.shapes

    @property
    def met(self) -> bool | None:
        """Whether the speed-up reaches the case's target (``None`` when not :attr:`judged`)."""
        if self.ratio is None or not self.judged:
            return None
        return self.ratio >= self.case.target

    @property
    def ours_ok(self) -> bool:
        return self.status.get(OURS) == "ok"

    @property
    def too_few_threads(self) -> bool:
        """Whether the case asks for more threads than numba's pool has, so that nothing ran."""
        return self.status.get(OURS, "").startswith(_TOO_FEW_THREADS)


_TOO_FEW_THREADS = "n/a: needs"


@contextlib.contextmanager
def numba_work() -> Iterator[dict[str, int]]:
    """What numba does while the block runs, in the dictionary yielded (filled at the end):
    ``compiled``, the functions it compiles, and ``locked``, how often it takes its compiler
    lock, which it also takes to load a function from its on-disk cache.  So ``compiled == 0 <
    locked`` means that everything new came from that cache; both 0, that nothing was new."""
    work: dict[str, int] = {}
    with (
        event.install_recorder("numba:compile") as compiles,
        event.install_recorder("numba:compiler_lock") as locks,
    ):
        yield work
    work["compiled"] = sum(e.is_start for _, e in compiles.buffer)
    work["locked"] = sum(e.is_start for _, e in locks.buffer)


def _quiet():
    """numpy's floating-point errors ignored while the contenders run.  Some cases' results
    are NaN by design (``BASES["negative"]``: fractional powers of negative bases), and numpy,
    a contender, would warn on every call; whatever a contender computes is judged by the
    check against the reference instead.  Entered around the first calls and the rounds,
    never inside a timed call."""
    return np.errstate(all="ignore")


def quartiles(samples: Sequence[float]) -> tuple[float, float]:
    """The first and third quartiles of ``samples``."""
    if len(samples) < 2:
        return samples[0], samples[0]
    q1, _, q3 = statistics.quantiles(samples, n=4, method="inclusive")
    return q1, q3


def run_case(
    case: Case,
    size: str = "full",
    contenders: Sequence[str] = CONTENDERS,
    progress: Callable[[str], None] | None = None,
) -> Row:
    """Check and time one case (see the module docstring)."""
    if case.threads is not None:
        import numba

        pool = numba.config.NUMBA_NUM_THREADS
        if case.threads > pool:
            why = f"{_TOO_FEW_THREADS} {case.threads} threads, numba's pool has {pool}"
            return Row(case, size, status=dict.fromkeys(contenders, why))
        with contender_threads(case.threads) as blas_limited:
            row = run_case(replace(case, threads=None), size, contenders, progress)
        row.case, row.blas_limited = case, blas_limited
        return row
    say = progress or (lambda _msg: None)
    row = Row(case, size)
    a, b = make_inputs(case, size)
    funcs: dict[str, Callable[[], Any]] = {}
    for name in contenders:
        try:
            func = FACTORIES[name](case, a, b)
            with numba_work() as work, _quiet():
                t0 = time.perf_counter()
                out = func()
                row.first_call[name] = time.perf_counter() - t0
            if name == OURS:
                row.first_call_work = work
        except Unavailable as exc:
            row.status[name] = "-" if str(exc) == "-" else f"n/a: {exc}"
            continue
        except Exception as exc:  # a failing contender is reported, not fatal to the run
            row.status[name] = f"error: {type(exc).__name__}: {exc}"
            continue
        problem = check(case, a, b, as_array(out))
        del out
        row.status[name] = f"wrong: {problem}" if problem else "ok"
        if problem is None:
            funcs[name] = func
    say("  first call " + fmt_first_calls(row))
    for name, status in row.status.items():
        if status not in ("ok", "-"):
            say(f"  {name}: {status}")
    if not funcs:
        return row
    # Not the first call, which for us may compile kernels or load them from the cache.
    with _quiet():
        estimates = call_estimates(funcs, TIMINGS[size])
        samples = time_interleaved(funcs, estimates, TIMINGS[size], MIN_CALLS_PER_SAMPLE)
    row.times = {name: statistics.median(s) for name, s in samples.items()}
    row.quartiles = {name: quartiles(s) for name, s in samples.items()}
    row.rounds = len(next(iter(samples.values())))
    ratio = f"  speed-up {fmt_ratio(row.ratio)}" if row.ratio is not None else ""
    medians = ", ".join(f"{n} {fmt_median(row, n)}" for n in row.times)
    say(f"  median of {row.rounds} rounds: {medians}{ratio}")
    return row


def run_comparison(
    cases: Sequence[Case],
    size: str = "full",
    contenders: Sequence[str] = CONTENDERS,
    progress: Callable[[str], None] | None = None,
) -> list[Row]:
    """Run :func:`run_case` on each case in turn, announcing each through ``progress``."""
    rows = []
    for i, case in enumerate(cases, 1):
        if progress:
            progress(f"[{i}/{len(cases)}] {case.name}: {case.label(size)}")
        rows.append(run_case(case, size, contenders, progress))
    return rows


def run_spreads(
    rows: Sequence[Row], progress: Callable[[str], None] | None = None
) -> dict[Spread, dict[str, float]]:
    """Our medians over the cases of each :data:`~.cases.SPREADS` target whose cases all ran
    with a time of ours (judged), timed again together: interleaved in the same rounds, so
    that a machine busier during one case than another does not show as a spread."""
    say = progress or (lambda _msg: None)
    ran = {row.case.name: row for row in rows if row.judged and row.ours_ok}
    by_name = {case.name: case for case in CASES}
    spreads = {}
    for spread in SPREADS:
        if not all(name in ran for name in spread.cases):
            continue
        size = ran[spread.cases[0]].size
        funcs = {}
        for name in spread.cases:
            case = by_name[name]
            funcs[name] = FACTORIES[OURS](case, *make_inputs(case, size))
        say(f"spread of our times, {spread.name}: {', '.join(spread.cases)}")
        samples = time_interleaved(funcs, call_estimates(funcs, TIMINGS[size]), TIMINGS[size])
        spreads[spread] = {name: statistics.median(s) for name, s in samples.items()}
        del funcs  # the inputs (up to 80 MB a case) before the next spread's
    return spreads


_FIRST_CALL_SCRIPT = """
import time
import ml_dtypes
import numpy as np
from numba_onnx_ops import matmul, pow
{setup}
start = time.perf_counter()
{call}
print(time.perf_counter() - start)
"""


def run_first_calls(
    first_calls: Sequence[FirstCall],
    repeat: int = 3,
    progress: Callable[[str], None] | None = None,
) -> dict[FirstCall, list[float]]:
    """Seconds of each first call, ``repeat`` times, each in a new interpreter whose numba cache
    is an empty folder (the imports and inputs are not timed; the call compiles its kernel)."""
    say = progress or (lambda _msg: None)
    results = {}
    for first in first_calls:
        say(f"first call in a fresh process, empty numba cache: {first.label} ({first.name})")
        script = _FIRST_CALL_SCRIPT.format(setup=first.setup, call=first.call)
        times = []
        for _ in range(repeat):
            wait_until_idle(1.0, min_s=0.05)  # this process's pool threads: not while timing
            with tempfile.TemporaryDirectory(prefix="numba-cache-") as cache:
                done = subprocess.run(
                    [sys.executable, "-c", script],
                    env={**os.environ, "NUMBA_CACHE_DIR": cache},
                    capture_output=True,
                    text=True,
                    check=False,
                )
            if done.returncode:
                raise RuntimeError(f"first call {first.name} failed:\n{done.stderr}")
            times.append(float(done.stdout.split()[-1]))
        results[first] = times
    return results
