"""How a ``prange`` loop is split among the threads, set from inside a kernel.

numba cuts a ``prange`` into as many equal parts as there are threads unless a chunk size is set
(``numba.set_parallel_chunksize``).  Equal parts make the call wait for the slowest thread, and
on a shared machine the pool thread is often slow: its core busy with another process, or (2
vCPUs, virtual machine) still coming up after a pause.  With one loop iteration per part, the
TBB layer balances the parts as they run: the calling thread starts at once and takes what a
late thread has not (the measurements: docs/design.md, "How a prange is split").

``numba.set_parallel_chunksize`` itself, called from a kernel, goes through a ctypes pointer,
which numba's on-disk cache refuses; ``set_chunksize`` calls the same C function by the symbol
name numba's own parfor code links against (see ``runtime.numba_private``).

Where the threads run: a kernel's pool thread, woken by the call, is often placed by Linux on
the CPU of the thread that woke it, the caller, and stays there: the two share one CPU for the
whole call while another sits idle, and a call on 2 threads takes the time of one.  Seen on 2
vCPUs of a virtual machine after the caller slept tens of milliseconds, as callers in
notebooks, services and benchmarks do; the scheduler's balancing did not separate them within
a call of milliseconds.
So every parallel task starts with ``spread(state)`` (``state = call_state()``, read before
the loop): a pool thread that finds itself on its caller's CPU asks the kernel to move it
elsewhere, by taking that CPU out of its affinity for one moment and then restoring the
affinity it had.  Nothing is pinned: the thread keeps the CPUs it was allowed, and a thread
allowed one CPU only is left where it is.  But a pool thread woken onto the busy caller's CPU
cannot run to do so: the caller, on its first task of a call, yields its CPU once unless a
pool thread has already started.  The check is a read of numba's thread id and of the call's
flags per task, and a ``sched_getcpu`` on pool threads; the move (one ``sched_getaffinity``
and two ``sched_setaffinity`` calls) happens only when the two collide.  The measurements, of
the move and of the yield: docs/design.md, "How a prange is split, and where pool threads run".
"""

from __future__ import annotations

import sys

import numba
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from .stack import stack_array


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
def move_off(typingctx, cpu):
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
def yield_cpu(typingctx):
    """Give the calling thread's CPU to the next thread in its run queue (``sched_yield``)."""

    def codegen(context, builder, signature, args):
        if _LINUX:
            _emit_yield(builder)
        return context.get_dummy_value()

    return types.void(), codegen


def _emit_yield(builder):
    fnty = ir.FunctionType(ir.IntType(32), [])
    builder.call(cgutils.get_or_insert_function(builder.module, fnty, "sched_yield"), [])


def _c_function(builder, name):
    """One of numba's threading-layer C functions that take nothing and return an intp."""
    fnty = ir.FunctionType(cgutils.intp_t, [])
    return cgutils.get_or_insert_function(builder.module, fnty, name)


# ``call_state()``: the caller's CPU, then these flags, shared by the tasks of one call.
_POOL_STARTED = 1  # a pool thread has started a task
_CALLER_YIELDED = 2  # the caller has been through its check (and yielded if it has a pool)


@numba.njit(inline="always")
def call_state():
    """What ``spread`` needs, read by a kernel just before its ``prange``: the CPU the caller
    runs on and the call's flags (a small array, so that every task sees the same one).  It
    lives in the kernel's stack frame, which outlasts the parallel loop: ``np.empty`` cost a
    heap allocation per call, and compile time in the first kernel of a process."""
    state = stack_array(2, types.int64(0))
    state[0] = current_cpu()
    state[1] = 0
    return state


@numba.njit(inline="always")
def no_call_state():
    """``call_state`` of a kernel's serial twin (``jit.serial_twin``): no caller CPU, so
    ``spread`` does nothing."""
    state = stack_array(2, types.int64(0))
    state[0] = -1
    state[1] = 0
    return state


@numba.njit(inline="always")
def no_spread(state):
    """``spread`` of a kernel's serial twin: nothing to spread."""
    return None


@numba.njit(inline="always")
def no_chunksize(n):
    """``set_chunksize`` of a kernel's serial twin: no loop to split."""
    return types.uintp(0)


@intrinsic
def spread(typingctx, state):
    """Called first in every parallel task with the kernel's ``call_state()``.

    A pool thread notes that it has started, and if it finds itself on the caller's CPU moves
    to another one.  Under TBB and OpenMP the caller runs its share of the tasks as thread 0,
    which stays; under workqueue the caller only waits and every task runs on a pool thread.
    The caller, in a task of its own before any pool thread has started one, yields its CPU
    once (``sched_yield``): a pool thread woken onto that CPU waits in its run queue behind
    the busy caller, to no avail for milliseconds, until the scheduler's balancing moves it;
    given the CPU, it starts its task and moves itself.  Without the yield the pool thread
    joined only after several calls.

    All of it is IR emitted in place, with the thread id from the C function numba's own
    ``get_thread_id`` calls: as an ``@njit`` function, and more so written with numpy arrays,
    it compiled in every process's first kernel call (figures: docs/design.md, "Compile
    time")."""
    if not (isinstance(state, types.Array) and state.dtype == types.int64 and state.ndim == 1):
        return None
    # The threading layer registers ``get_thread_id`` with LLVM when it starts; a kernel's
    # first compile may come before that (numba's own thread-id intrinsic starts it the same
    # way, through the private ``_launch_threads``).
    numba.get_num_threads()

    def codegen(context, builder, signature, args):
        if not _LINUX:
            return context.get_dummy_value()
        i64 = ir.IntType(64)
        data = context.make_array(signature.args[0])(context, builder, args[0]).data
        caller = builder.load(data)
        flags = builder.gep(data, [ir.Constant(i64, 1)])
        with builder.if_then(builder.icmp_signed(">=", caller, ir.Constant(i64, 0))):
            tid = builder.call(_c_function(builder, "get_thread_id"), [])
            pool = builder.icmp_signed("!=", tid, ir.Constant(cgutils.intp_t, 0))
            seen = builder.load_atomic(flags, "monotonic", 8)
            with builder.if_else(pool) as (in_pool, in_caller):
                with in_pool:
                    started = builder.and_(seen, ir.Constant(i64, _POOL_STARTED))
                    with builder.if_then(builder.icmp_unsigned("==", started, i64(0))):
                        builder.atomic_rmw("or", flags, i64(_POOL_STARTED), "monotonic")
                    with builder.if_then(
                        builder.icmp_signed("==", _emit_current_cpu(builder), caller)
                    ):
                        _emit_move_off(context, builder, caller)
                with in_caller:
                    with builder.if_then(builder.icmp_unsigned("==", seen, i64(0))):
                        builder.atomic_rmw("or", flags, i64(_CALLER_YIELDED), "monotonic")
                        # numba's ``get_num_threads``, through its C symbol (the njit version
                        # reaches it through a ctypes pointer, which the on-disk cache refuses)
                        nthreads = builder.call(_c_function(builder, "get_num_threads"), [])
                        with builder.if_then(
                            builder.icmp_signed(">", nthreads, ir.Constant(cgutils.intp_t, 1))
                        ):
                            _emit_yield(builder)
        return context.get_dummy_value()

    return types.void(state), codegen
