"""The machine's limits, measured in the same run as the comparison they are read against.

- The float32 multiply-add peak of the threads numba uses: independent chains of vector fused
  multiply-adds (``llvm.fma`` on 16 lanes with AVX-512, 8 with AVX2), as many as keep both FMA
  pipes busy, on registers only.  No MatMul can run faster than this.
- A copy: ``numpy.copyto`` of a 10M-element float32 array (the size of the Pow cases) into a warm
  destination, in bytes moved (read plus written) per second: the pace of a memory-bound
  elementwise kernel with plain stores.  (One that writes past the caches, as this library's
  memory-bound powers do for results larger than the L3, skips reading the destination first
  and can beat it.)

Both are medians of a few runs; like every figure of the comparison, they move with what else
the machine runs, which is why they are measured both before and after the cases:
:func:`busy_signs` reads the two for signs that the times are not the machine's own.
"""

from __future__ import annotations

import os
import statistics
import time

import numba
import numpy as np
from llvmlite import ir
from numba import prange, types
from numba.extending import intrinsic

from ..runtime.cpu import vector_bits
from ..runtime.vectors import vector_fma

_CHAINS = 12  # accumulators: FMA latency (4 cycles) x 2 pipes, with room to spare
_COPY_ELEMENTS = 10_000_000
# busy_signs: a limit that moves by more than this factor between before and after the cases
# says that the load on the machine changed meanwhile, more than the noise of a median can.
MOVED = 1.25
# ... and threads on cores of their own run FMA chains each at nearly one thread's rate (less
# only by the lower clock of all cores busy); below this share of it, they waited for cores.
SCALING = 0.65


def _fma_chains(lanes: int):
    """An intrinsic ``f(n) -> float64``: ``n`` steps of ``_CHAINS`` independent fused
    multiply-adds on ``lanes`` float32 lanes each; returns their sum (so none is dead code)."""

    @intrinsic
    def chains(typingctx, n):
        if not isinstance(n, types.Integer):
            return None

        def codegen(context, builder, signature, args):
            f32 = ir.FloatType()
            vt = ir.VectorType(f32, lanes)
            i64 = ir.IntType(64)
            fma = vector_fma(builder, vt)
            count = context.cast(builder, args[0], signature.args[0], types.int64)
            scale = ir.Constant(vt, [0.999999] * lanes)  # the sums stay near 1: no inf, no denormal
            shift = ir.Constant(vt, [1e-6] * lanes)
            entry = builder.block
            loop = builder.append_basic_block("fma_loop")
            done = builder.append_basic_block("fma_done")
            builder.branch(loop)
            builder.position_at_end(loop)
            i = builder.phi(i64)
            i.add_incoming(ir.Constant(i64, 0), entry)
            accs = []
            for c in range(_CHAINS):
                acc = builder.phi(vt)
                # 2 + c: no start is a fixed point of the step, which LLVM would fold away
                acc.add_incoming(ir.Constant(vt, [2.0 + c] * lanes), entry)
                accs.append(acc)
            nexts = [builder.call(fma, [acc, scale, shift]) for acc in accs]
            for acc, nxt in zip(accs, nexts):
                acc.add_incoming(nxt, loop)
            i_next = builder.add(i, ir.Constant(i64, 1))
            i.add_incoming(i_next, loop)
            builder.cbranch(builder.icmp_signed("<", i_next, count), loop, done)
            builder.position_at_end(done)
            total = ir.Constant(ir.DoubleType(), 0.0)
            for acc in nexts:
                for lane in range(lanes):
                    x = builder.extract_element(acc, ir.Constant(ir.IntType(32), lane))
                    total = builder.fadd(total, builder.fpext(x, ir.DoubleType()))
            return total

        return types.float64(n), codegen

    return chains


_kernels: dict[int, tuple] = {}


def _peak_kernels(lanes: int):
    """(one thread, every thread) kernels for ``lanes``, compiled on first use."""
    if lanes not in _kernels:
        chains = _fma_chains(lanes)

        @numba.njit
        def one(n):
            return chains(n)

        @numba.njit(parallel=True)
        def every(n, out):
            for t in prange(out.size):
                out[t] = chains(n)

        _kernels[lanes] = (one, every)
    return _kernels[lanes]


def fma_peak(seconds: float = 0.05, runs: int = 5) -> dict[str, float] | None:
    """float32 GFLOP/s of fused multiply-adds on one thread and on numba's threads (runs of
    about ``seconds`` each), or ``None`` without AVX2 and FMA."""
    bits = vector_bits()
    if not bits:
        return None
    lanes = bits // 32
    one, every = _peak_kernels(lanes)
    flops_per_step = _CHAINS * lanes * 2
    one(1000)
    t0 = time.perf_counter()
    one(100_000)
    steps = max(1000, int(seconds / max(time.perf_counter() - t0, 1e-9) * 100_000))
    threads = numba.get_num_threads()
    out = np.zeros(threads)
    every(1000, out)

    def rate(call, nthreads):
        times = []
        for _ in range(runs):
            t = time.perf_counter()
            call()
            times.append(time.perf_counter() - t)
        return nthreads * steps * flops_per_step / statistics.median(times) / 1e9

    return {
        "threads": threads,
        "cores": physical_cores(),
        "gflops_one_thread": rate(lambda: one(steps), 1),
        "gflops_all_threads": rate(lambda: every(steps, out), threads),
    }


def physical_cores() -> int | None:
    """The cores this process may run on, counting a core's hardware threads once (they share
    its FMA pipes), or ``None`` where the topology cannot be read."""
    cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else range(os.cpu_count())
    cores = set()
    for cpu in cpus:
        try:
            with open(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list") as f:
                cores.add(f.read().strip())
        except OSError:
            return None
    return len(cores) or None


def copy_rate(elements: int = _COPY_ELEMENTS, runs: int = 7) -> dict[str, float]:
    """GB/s moved (read plus written) by ``numpy.copyto`` of ``elements`` float32 values."""
    src = np.ones(elements, np.float32)
    dst = np.zeros_like(src)
    np.copyto(dst, src)
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        np.copyto(dst, src)
        times.append(time.perf_counter() - t)
    median = statistics.median(times)
    return {"bytes": src.nbytes, "seconds": median, "gbps": 2 * src.nbytes / median / 1e9}


def measure() -> dict[str, object]:
    """Both limits, for the report."""
    return {"fma_peak": fma_peak(), "copy": copy_rate()}


def busy_signs(before: dict, after: dict) -> list[str]:
    """Signs, in the limits measured before and after the cases, that something else used the
    machine meanwhile (so that the times are not the machine's own): a limit that moved by more
    than :data:`MOVED`, or threads whose FMA rate did not scale with the cores they had."""
    signs = []
    peaks = before.get("fma_peak"), after.get("fma_peak")
    for key, what in (("gflops_all_threads", "peak"), ("gflops_one_thread", "rate of one thread")):
        rates = [peak[key] for peak in peaks] if all(peaks) else [1.0]
        if max(rates) > MOVED * min(rates):
            signs.append(
                f"the float32 FMA {what} was {rates[0]:.0f} GFLOP/s before the cases and "
                f"{rates[1]:.0f} after"
            )
    copies = [limits["copy"]["seconds"] for limits in (before, after)]
    if max(copies) > MOVED * min(copies):
        signs.append(
            f"the copy took {copies[0] * 1e3:.2f} ms before the cases and "
            f"{copies[1] * 1e3:.2f} ms after"
        )
    for when, peak in zip(("before", "after"), peaks):
        free = min(peak["threads"], peak.get("cores") or 0) if peak else 0
        if free > 1:
            scaling = peak["gflops_all_threads"] / peak["gflops_one_thread"]
            if scaling < SCALING * free:
                signs.append(
                    f"{when} the cases, {peak['threads']} threads on {free} cores ran FMAs "
                    f"{scaling:.1f} times as fast as one thread (idle: about {free})"
                )
    return signs


def limits_line(limits: dict[str, object], when: str = "in this run") -> str:
    peak = limits.get("fma_peak")
    copy = limits["copy"]
    parts = []
    if peak:
        parts.append(
            f"float32 FMA peak {peak['gflops_all_threads']:.0f} GFLOP/s on {peak['threads']} "
            f"threads ({peak['gflops_one_thread']:.0f} on one)"
        )
    parts.append(
        f"copy of {copy['bytes'] / 1e6:.0f} MB {copy['seconds'] * 1e3:.2f} ms "
        f"({copy['gbps']:.0f} GB/s read + written)"
    )
    return f"machine limits {when}: " + "; ".join(parts)
