"""Timing: contenders interleaved round by round, with pauses for the peers' threads to go idle."""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Timing:
    """How much measuring a size gets: rounds of interleaved calls and a time budget."""

    min_rounds: int
    max_rounds: int
    budget_s: float  # stop after min_rounds once a case has spent this long measuring
    min_sample_s: float  # calls are repeated within a round until one sample lasts this long
    # Before each sample, wait (up to this long) until the process uses no CPU. Worker threads
    # keep spinning after a parallel call: measured here, OpenBLAS's (numpy) and onnxruntime's
    # burn about half a core for 100 ms after each call, which slows whichever contender runs
    # next on 2 cores by up to several times.
    settle_s: float
    # ... and pause at least this long before each sample, idle or not. onnxruntime's pool threads
    # spin 10-50 ms after a run without always showing as CPU time in a 5 ms window: a float32
    # x ** 3.7 of ours took 21-23 ms right after an onnxruntime call, 12.7 ms after a 50 ms pause
    # (alone: 10-13 ms); a 10 ms pause was not enough.
    min_pause_s: float = 0.05


TIMINGS = {
    "full": Timing(min_rounds=7, max_rounds=31, budget_s=5.0, min_sample_s=5e-3, settle_s=0.3),
    "quick": Timing(min_rounds=3, max_rounds=9, budget_s=1.0, min_sample_s=2e-3, settle_s=0.3),
    # tiny checks that every case runs; its times mean nothing, so it does not pause.
    "tiny": Timing(
        min_rounds=2, max_rounds=2, budget_s=0.0, min_sample_s=0.0, settle_s=0.0, min_pause_s=0.0
    ),
}
SIZES = tuple(TIMINGS)


def wait_until_idle(limit_s: float, window_s: float = 5e-3, min_s: float = 0.0) -> float:
    """Sleep ``min_s``, then until this process's threads stop using CPU (less than a fifth of a
    core over a ``window_s`` window), or ``limit_s`` has passed; return the seconds waited."""
    start = time.perf_counter()
    if min_s > 0:
        time.sleep(min_s)
    while time.perf_counter() - start < limit_s:
        cpu = time.process_time()
        time.sleep(window_s)
        if time.process_time() - cpu < 0.2 * window_s:
            break
    return time.perf_counter() - start


def steady_call_time(func: Callable[[], Any], calls: int = 3, limit_s: float = 1.0) -> float:
    """Seconds per call of ``func`` at its steady rate: the fastest of up to ``calls`` calls
    made back to back (fewer once they have taken ``limit_s``).

    One call alone is a poor guide to how many calls fill a sample: right after other work, a
    short call runs on cold caches and a sleeping thread pool (a float32 (4096, 8, 8) product
    of ours took 0.6 ms that way, 0.07 ms back to back), so samples sized from it lasted a
    fraction of ``min_sample_s``.
    """
    best = math.inf
    start = time.perf_counter()
    for _ in range(calls):
        t0 = time.perf_counter()
        func()
        best = min(best, time.perf_counter() - t0)
        if t0 - start + best >= limit_s:
            break
    return best


def call_estimates(funcs: dict[str, Callable[[], Any]], timing: Timing) -> dict[str, float]:
    """``steady_call_time`` of each function, each after the same pause as a sample.

    The estimates set how many calls make a sample, and a sample's first call runs cold: the
    fewer calls, the more it weighs.  Taken back to back, an estimate falls on the pool threads
    the one before left spinning: numpy's float32 matrix-vector product, estimated at 7.9 ms
    right after onnxruntime's (1.4 ms otherwise), was then sampled one call at a time, and its
    median came out 20-35% above the same call's sampled three at a time.
    """
    estimates = {}
    for name, func in funcs.items():
        wait_until_idle(timing.settle_s, min_s=timing.min_pause_s)
        estimates[name] = steady_call_time(func)
    return estimates


def round_order(names: list[str], r: int) -> list[str]:
    """The order of the contenders in round ``r``, from a Williams design: over each cycle of
    rounds (as many as contenders, twice that for an odd count) every contender takes every
    place once and follows every other one equally often.

    Whatever a contender leaves behind (pool threads still spinning, caches full of its data)
    falls on the one after it.  With the order merely rotated each round, a contender follows
    the same other one in all but one round of each cycle: a float32 matrix-vector product of
    ours, which makes numpy's very call, measured 0.89-0.92 of numpy's speed from running after
    onnxruntime in two rounds of three.
    """
    n = len(names)
    if n < 2:
        return list(names)
    first, low, high = [0], 1, n - 1  # 0, 1, n-1, 2, n-2, ...
    while len(first) < n:
        first.append(low)
        low += 1
        if len(first) < n:
            first.append(high)
            high -= 1
    k = r % (n if n % 2 == 0 else 2 * n)
    order = [names[(i + k) % n] for i in first]
    return order[::-1] if k >= n else order


def time_interleaved(
    funcs: dict[str, Callable[[], Any]],
    estimates: dict[str, float],
    timing: Timing,
    min_calls: Mapping[str, int] | None = None,
) -> dict[str, list[float]]:
    """Seconds per call of each function, one sample per round, rounds interleaved.

    ``estimates`` (seconds per call, from ``steady_call_time``) set how many calls make one
    sample, so that a sample lasts at least ``timing.min_sample_s``, and at least
    ``min_calls[name]`` calls where given (a contender whose steady state takes a few calls to
    reach: ``contenders.MIN_CALLS_PER_SAMPLE``).  Each sample starts after
    a pause, so its first call runs cold (caches, page tables and the peers' and our thread
    pools); the rest of the sample is the calls a user's loop makes.  Rounds go on until
    ``timing.min_rounds`` are done and ``timing.budget_s`` is spent, or ``timing.max_rounds``; a
    case whose slowest call takes over a second settles for three rounds.
    """
    names = list(funcs)
    fewest = min_calls or {}
    number = {
        n: max(fewest.get(n, 1), math.ceil(timing.min_sample_s / max(estimates[n], 1e-9)))
        for n in names
    }
    min_rounds = timing.min_rounds
    if max(estimates.values(), default=0.0) > 1.0:
        min_rounds = min(min_rounds, 3)
    samples: dict[str, list[float]] = {n: [] for n in names}
    start = time.perf_counter()  # the budget counts the pauses too
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for r in range(timing.max_rounds):
            for name in round_order(names, r):
                func, count = funcs[name], number[name]
                wait_until_idle(timing.settle_s, min_s=timing.min_pause_s)
                t0 = time.perf_counter()
                for _ in range(count):
                    func()
                samples[name].append((time.perf_counter() - t0) / count)
            if r + 1 >= min_rounds and time.perf_counter() - start >= timing.budget_s:
                break
    finally:
        if gc_was_enabled:
            gc.enable()
    return samples
