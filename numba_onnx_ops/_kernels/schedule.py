"""How a ``prange`` loop is split among the threads, set from inside a kernel.

numba cuts a ``prange`` into as many equal parts as there are threads unless a chunk size is set
(``numba.set_parallel_chunksize``).  Equal parts make the call wait for the slowest thread, and
on a shared machine the pool thread is often slow: its core busy with another process, or (2
vCPUs, virtual machine) still coming up after a pause.  With one loop iteration per part, the
TBB layer balances the parts as they run: the calling thread starts at once and takes what a
late thread has not.  Measured on 2 Zen 4 vCPUs shared with other work, kernel calls in the
peer comparison's pattern (a pause, then a sample of calls), medians of five runs against equal
parts: 2048 x 16^3 float32 139/180, 163/231, 178/175, 185/177, 191/182 us; 4096 x 8^3
100/116, 131/125, 95/91, 97/93, 100/94 us; 64 x 128x64x128 within 10% either way.

``numba.set_parallel_chunksize`` itself, called from a kernel, goes through a ctypes pointer,
which numba's on-disk cache refuses; ``set_chunksize`` calls the same C function by the symbol
name numba's own parfor code links against (see ``_numba_private``).

Where the threads run: a kernel's pool thread, woken by the call, is often placed by Linux on
the CPU of the thread that woke it, the caller, and stays there: the two share one CPU for the
whole call while another sits idle, and a call on 2 threads takes the time of one.  Seen on 2
vCPUs (KVM, Linux 6.18) after the caller slept tens of milliseconds, as callers in notebooks,
services and benchmarks do; the scheduler's balancing did not separate them within a 7 ms call.
So every parallel task starts with ``spread(caller_cpu)``: a pool thread that finds itself on
its caller's CPU asks the kernel to move it elsewhere, by taking that CPU out of its affinity
for one moment and then restoring the affinity it had.  Nothing is pinned: the thread keeps the
CPUs it was allowed, and a thread allowed one CPU only is left where it is.  The check is a
read of numba's thread id per task and a ``sched_getcpu`` on pool threads; the move (one
``sched_getaffinity`` and two ``sched_setaffinity`` calls) happens only when the two collide.
Measured on 2 Zen 4 vCPUs with 60 ms pauses between calls: a compute-only probe 11.6 -> 3.6 ms
(medians of 30); in the peer comparison, alternated with the code before the move, float32
x ** 3.7 on 10M elements 12.7/13.3 -> 9.7/9.4 ms and the 1024^2 bfloat16 product 11.1/12.2 ->
7.0/7.7 ms.
"""

from __future__ import annotations

import sys

import numba
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic


@intrinsic
def set_chunksize(typingctx, n):
    """Set the calling thread's parallel chunk size to ``n``; return the previous one."""
    if not isinstance(n, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        size_t = context.get_value_type(types.uintp)
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(size_t, [size_t]), "set_parallel_chunksize"
        )
        return builder.call(fn, [context.cast(builder, args[0], n, types.uintp)])

    return types.uintp(n), codegen


_LINUX = sys.platform.startswith("linux")  # sched_getcpu and sched_{get,set}affinity
_MASK_WORDS = 16  # a glibc cpu_set_t: 1024 CPUs


@intrinsic
def current_cpu(typingctx):
    """The CPU the calling thread runs on (``sched_getcpu``), or -1 where that is unknown."""

    def codegen(context, builder, signature, args):
        return _emit_current_cpu(builder) if _LINUX else ir.Constant(ir.IntType(64), -1)

    return types.int64(), codegen


def _emit_current_cpu(builder):
    """IR: ``sched_getcpu()`` as an i64."""
    fnty = ir.FunctionType(ir.IntType(32), [])
    fn = cgutils.get_or_insert_function(builder.module, fnty, "sched_getcpu")
    return builder.sext(builder.call(fn, []), ir.IntType(64))


def _emit_move_off(context, builder, cpu):
    """IR: move the calling thread off ``cpu`` (an i64): allow every CPU of its set but that
    one, then give the thread its set back (it stays where it was moved).  A thread whose set
    is that CPU alone, or whose set cannot be read, is left alone."""
    i32, i64 = ir.IntType(32), ir.IntType(64)
    size_t = context.get_value_type(types.uintp)
    bytes_p = ir.IntType(8).as_pointer()
    fnty = ir.FunctionType(i32, [i32, size_t, bytes_p])
    get = cgutils.get_or_insert_function(builder.module, fnty, "sched_getaffinity")
    put = cgutils.get_or_insert_function(builder.module, fnty, "sched_setaffinity")
    mask_t = ir.ArrayType(i64, _MASK_WORDS)
    mine = cgutils.alloca_once(builder, mask_t)
    others = cgutils.alloca_once(builder, mask_t)
    nbytes = ir.Constant(size_t, _MASK_WORDS * 8)
    zero = ir.Constant(i32, 0)

    def call(fn, mask):
        return builder.call(fn, [zero, nbytes, builder.bitcast(mask, bytes_p)])

    in_range = builder.icmp_unsigned("<", cpu, ir.Constant(i64, 64 * _MASK_WORDS))
    with builder.if_then(in_range):
        with builder.if_then(builder.icmp_signed("==", call(get, mine), zero)):
            word = builder.lshr(cpu, ir.Constant(i64, 6))
            bit = builder.shl(ir.Constant(i64, 1), builder.and_(cpu, ir.Constant(i64, 63)))
            rest = ir.Constant(i64, 0)  # the CPUs left once ``cpu`` is taken out
            for w in range(_MASK_WORDS):
                idx = [ir.Constant(i32, 0), ir.Constant(i32, w)]
                v = builder.load(builder.gep(mine, idx))
                is_word = builder.icmp_unsigned("==", word, ir.Constant(i64, w))
                v = builder.select(is_word, builder.and_(v, builder.not_(bit)), v)
                builder.store(v, builder.gep(others, idx))
                rest = builder.or_(rest, v)
            with builder.if_then(builder.icmp_unsigned("!=", rest, ir.Constant(i64, 0))):
                with builder.if_then(builder.icmp_signed("==", call(put, others), zero)):
                    call(put, mine)


@intrinsic
def _move_off(typingctx, cpu):
    """Move the calling thread off ``cpu`` (see ``_emit_move_off``)."""
    if not isinstance(cpu, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        if _LINUX:
            c = context.cast(builder, args[0], signature.args[0], types.int64)
            _emit_move_off(context, builder, c)
        return context.get_dummy_value()

    return types.void(cpu), codegen


@intrinsic
def spread(typingctx, caller_cpu):
    """Called first in every parallel task with the CPU the kernel's caller ran on before the
    loop: a pool thread that finds itself on that CPU moves to another one.  Under TBB and
    OpenMP the caller runs its share of the tasks as thread 0, which stays; under workqueue
    the caller only waits and every task runs on a pool thread.

    All of it is IR emitted in place, with the thread id from the C function numba's own
    ``get_thread_id`` calls: as an ``@njit`` function, this took 0.15-0.2 s to compile in every
    process's first kernel call; written with numpy arrays, 0.3-0.5 s more."""
    if not isinstance(caller_cpu, types.Integer):
        return None
    # The threading layer registers ``get_thread_id`` with LLVM when it starts; a kernel's
    # first compile may come before that (numba's own thread-id intrinsic starts it the same
    # way, through the private ``_launch_threads``).
    numba.get_num_threads()

    def codegen(context, builder, signature, args):
        if not _LINUX:
            return context.get_dummy_value()
        i64 = ir.IntType(64)
        caller = context.cast(builder, args[0], signature.args[0], types.int64)
        tid_fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(cgutils.intp_t, []), "get_thread_id"
        )
        with builder.if_then(builder.icmp_signed(">=", caller, ir.Constant(i64, 0))):
            pool = builder.icmp_signed(
                "!=", builder.call(tid_fn, []), ir.Constant(cgutils.intp_t, 0)
            )
            with builder.if_then(pool):
                with builder.if_then(builder.icmp_signed("==", _emit_current_cpu(builder), caller)):
                    _emit_move_off(context, builder, caller)
        return context.get_dummy_value()

    return types.void(caller_cpu), codegen
