"""The own pool: worker threads that wait for jobs spinning, for kernels whose work is too short
for the threading layer's launch.

numba's ``tbb`` layer builds a task arena for every launch and its workers go to sleep within
microseconds, so a launch costs 4-5 us back to back and 12-37 us after a gap of other work
(docs/design.md, "The own pool"): as much as the whole second half of a mid-size product.
Here each worker is a thread that enters compiled code once and stays there: it spins on one
word of a shared control block, runs the job it finds, and spins again; after
``tuning.POOL_SPIN_US`` without a job it sleeps on a futex until the next one opens.

A job is a kernel's *task twin* (``task_twin``: its source with the ``prange`` loop turned into
a loop that claims tasks from a shared word), run at once by the caller and by every worker
that joins, on the caller's arguments: whoever is free claims a task left (the caller from the
front of the range, workers from the back), so a worker that comes late takes fewer tasks, and
nobody waits for a worker that never came.  A task computes
what the kernel's iteration of the same index computes, whichever thread claims it, so results
do not depend on the threads.  Run alone (an empty counter), the twin runs every task in order,
as the kernel's serial twin does.

Linux on x86-64 (the futex system call, the ``pause`` hint); elsewhere ``available()`` is false
and kernels launch on numba's threading layer.  Safe from several Python threads (one job at a
time: a caller that finds the pool busy runs its twin alone) and after ``fork`` (a child starts
workers of its own on first use).
"""

from __future__ import annotations

import ast
import inspect
import os
import platform
import sys
import textwrap
import threading

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from .. import tuning
from . import numba_private
from .jit import helper, kernel, twin_of, twins
from .numba_private import call_compiled
from .schedule import current_cpu, move_off, yield_cpu

# The control block, int64 words; each group on a cache line of its own.
_CLAIM = 0  # the tasks left to claim: the first in the low half, one past the last in the high
_UNSET = -1  # (the count of tasks not known yet: the first twin to reach its loop sets it)
_GEN = 8  # the job's generation: odd while a job is open to workers
_ACTIVE = 16  # workers inside the open job
_SLEEPING = 24  # workers asleep on the futex (on the low half of ``_GEN``)
_FAILED = 25  # a worker's task raised
_FN = 32  # the open job: its trampoline's address,
_ARG = 33  # the address of its arguments,
_LIMIT = 34  # how many workers may join it,
_CALLER = 35  # and the CPU its caller runs on
_WORDS = 40

_SUPPORTED = sys.platform.startswith("linux") and platform.machine() in ("x86_64", "AMD64")
_SYS_FUTEX = 202  # (x86-64)
_FUTEX_WAIT_PRIVATE, _FUTEX_WAKE_PRIVATE = 128, 129
_CLOCK_MONOTONIC = 1
_PATIENCE = 4096  # turns of ``pause`` (some 100 us) before a waiting caller yields its CPU


def available() -> bool:
    """Whether the own pool runs here: Linux on x86-64, with a numba whose calls by address
    this package knows (``numba_private.compiled_address``)."""
    return _SUPPORTED and numba_private.HAVE_ADDRESS_CALLS


def _word(context, builder, aryty, ary, index):
    data = context.make_array(aryty)(context, builder, ary).data
    return builder.gep(data, [index])


@intrinsic
def load(typingctx, ctrl, index):
    """``ctrl[index]``, read atomically (sequentially consistent)."""

    def codegen(context, builder, sig, args):
        return builder.load_atomic(_word(context, builder, sig.args[0], *args), "seq_cst", 8)

    return types.int64(ctrl, types.intp), codegen


@intrinsic
def store(typingctx, ctrl, index, value):
    """``ctrl[index] = value``, written atomically (sequentially consistent)."""

    def codegen(context, builder, sig, args):
        ptr = _word(context, builder, sig.args[0], args[0], args[1])
        builder.store_atomic(args[2], ptr, "seq_cst", 8)
        return context.get_dummy_value()

    return types.void(ctrl, types.intp, types.int64), codegen


@intrinsic
def add(typingctx, ctrl, index, value):
    """``ctrl[index] += value``, atomically; the value before."""

    def codegen(context, builder, sig, args):
        ptr = _word(context, builder, sig.args[0], args[0], args[1])
        return builder.atomic_rmw("add", ptr, args[2], "seq_cst")

    return types.int64(ctrl, types.intp, types.int64), codegen


@intrinsic
def swap_if(typingctx, ctrl, index, expected, value):
    """``ctrl[index] = value`` if it holds ``expected``, atomically."""

    def codegen(context, builder, sig, args):
        ptr = _word(context, builder, sig.args[0], args[0], args[1])
        builder.cmpxchg(ptr, args[2], args[3], "seq_cst", "seq_cst")
        return context.get_dummy_value()

    return types.void(ctrl, types.intp, types.int64, types.int64), codegen


@intrinsic
def pause(typingctx):
    """The spin-wait hint (x86 ``pause``): the spinning thread leaves the core's resources to
    others and does not flood the memory system with loads."""

    def codegen(context, builder, sig, args):
        fnty = ir.FunctionType(ir.VoidType(), [])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.x86.sse2.pause")
        builder.call(fn, [])
        return context.get_dummy_value()

    return types.void(), codegen


@intrinsic
def now_ns(typingctx):
    """The monotonic clock in nanoseconds (``clock_gettime``, from the vDSO: tens of ns)."""

    def codegen(context, builder, sig, args):
        i32, i64 = ir.IntType(32), ir.IntType(64)
        spec_t = ir.LiteralStructType([i64, i64])
        fnty = ir.FunctionType(i32, [i32, spec_t.as_pointer()])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "clock_gettime")
        spec = cgutils.alloca_once(builder, spec_t)
        builder.call(fn, [ir.Constant(i32, _CLOCK_MONOTONIC), spec])
        zero, one = ir.Constant(i32, 0), ir.Constant(i32, 1)
        sec = builder.load(builder.gep(spec, [zero, zero]))
        nsec = builder.load(builder.gep(spec, [zero, one]))
        return builder.add(builder.mul(sec, ir.Constant(i64, 10**9)), nsec)

    return types.int64(), codegen


@intrinsic
def futex(typingctx, ctrl, index, op, value):
    """The futex system call ``op`` on the low 32 bits of ``ctrl[index]`` (little-endian) with
    ``value``: wait while the word holds ``value``'s low bits, or wake up to ``value``
    waiters."""

    def codegen(context, builder, sig, args):
        i64 = ir.IntType(64)
        fnty = ir.FunctionType(i64, [i64], var_arg=True)
        fn = cgutils.get_or_insert_function(builder.module, fnty, "syscall")
        ptr = builder.ptrtoint(_word(context, builder, sig.args[0], args[0], args[1]), i64)
        low = builder.and_(args[3], ir.Constant(i64, 0xFFFFFFFF))
        zero = ir.Constant(i64, 0)  # (no timeout)
        return builder.call(fn, [ir.Constant(i64, _SYS_FUTEX), ptr, args[2], low, zero, zero])

    return types.int64(ctrl, types.intp, types.int64, types.int64), codegen


@intrinsic
def call_job(typingctx, ctrl, fn, arg):
    """Call the trampoline at address ``fn`` with the arguments at ``arg``."""

    def codegen(context, builder, sig, args):
        i8p = ir.IntType(8).as_pointer()
        fnty = ir.FunctionType(ir.VoidType(), [i8p, i8p])
        target = builder.inttoptr(args[1], fnty.as_pointer())
        at = ir.Constant(ir.IntType(64), _FAILED)
        failed = builder.bitcast(_word(context, builder, sig.args[0], args[0], at), i8p)
        builder.call(target, [builder.inttoptr(args[2], i8p), failed])
        return context.get_dummy_value()

    return types.void(ctrl, types.int64, types.int64), codegen


def _trampoline(context, module, tuple_type):
    """``void job(slot*, failed*)``: the twin at the address in ``slot`` called with the
    arguments after it; a twin that raised sets ``*failed`` (the exception itself stays
    behind: a worker has no Python frame to raise in).  One per module: each compilation of a
    twin, which opens its jobs through ``run``, is for one type of arguments."""
    name = "numba_onnx_ops.pool_job"
    fn = module.globals.get(name)
    if fn is not None:
        return fn
    i8p, i64 = ir.IntType(8).as_pointer(), ir.IntType(64)
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [i8p, i8p]), name)
    fn.linkage = "internal"
    builder = ir.IRBuilder(fn.append_basic_block("entry"))
    slot_t = ir.LiteralStructType([i64, context.get_value_type(tuple_type)])
    slot = builder.load(builder.bitcast(fn.args[0], slot_t.as_pointer()))
    address, packed = builder.extract_value(slot, 0), builder.extract_value(slot, 1)
    values = [builder.extract_value(packed, i) for i in range(len(tuple_type))]
    with builder.if_then(call_compiled(context, builder, address, list(tuple_type), values)):
        failed = builder.bitcast(fn.args[1], i64.as_pointer())
        builder.store_atomic(ir.Constant(i64, 1), failed, "seq_cst", 8)
    builder.ret_void()
    return fn


@intrinsic
def post(typingctx, ctrl, twin, arguments):
    """Open a job: the twin at address ``twin`` (``numba_private.compiled_address``) called
    with ``arguments`` by every worker that joins.  The arguments stay in the caller's frame,
    which ``run`` leaves only once every worker has left the job."""
    if not isinstance(arguments, types.BaseTuple):
        return None

    def codegen(context, builder, sig, args):
        i64 = ir.IntType(64)
        job = _trampoline(context, builder.module, sig.args[2])
        packed = cgutils.make_anonymous_struct(builder, [args[1], args[2]])
        slot = cgutils.alloca_once_value(builder, packed)

        def word(index):
            return _word(context, builder, sig.args[0], args[0], ir.Constant(i64, index))

        builder.store(builder.ptrtoint(job, i64), word(_FN))
        builder.store(builder.ptrtoint(slot, i64), word(_ARG))
        builder.store(ir.Constant(i64, _UNSET), word(_CLAIM))
        gen = builder.load_atomic(word(_GEN), "seq_cst", 8)
        # (the stores above are seen by any worker that sees this one)
        builder.store_atomic(builder.add(gen, ir.Constant(i64, 1)), word(_GEN), "seq_cst", 8)
        return context.get_dummy_value()

    return types.void(ctrl, types.int64, arguments), codegen


@intrinsic
def call_twin(typingctx, twin, arguments):
    """Call the twin at address ``twin`` with ``arguments`` on this thread: whether it
    raised."""
    if not isinstance(arguments, types.BaseTuple):
        return None

    def codegen(context, builder, sig, args):
        values = [builder.extract_value(args[1], i) for i in range(len(sig.args[1]))]
        return call_compiled(context, builder, args[0], list(sig.args[1]), values)

    return types.boolean(types.int64, arguments), codegen


@helper(inline="always")
def claim(claims, index, n):
    """The task a twin runs at its ``index``-th turn of ``n``, or ``n`` once none is left.
    Run alone (``claims`` empty): ``index`` itself.  Otherwise the tasks left are a range in
    the word ``claims[0]``: a twin given one word (the calling thread) takes the first, one
    given two (a worker) the last, so each thread's tasks stay next to one another (the
    prefetchers of each core follow its own run of columns; tasks taken in turns cost
    8x1024x1024 a tenth more)."""
    if claims.size == 0:
        return index
    if load(claims, 0) == _UNSET:
        swap_if(claims, 0, _UNSET, n << 32)
    if claims.size == 1:
        left = add(claims, 0, 1)
        first, end = left & 0xFFFFFFFF, left >> 32
        return first if first < end else n
    left = add(claims, 0, -(1 << 32))
    first, end = left & 0xFFFFFFFF, left >> 32
    return end - 1 if first < end else n


@helper(inline="always")
def run(ctrl, helpers, twin, theirs, mine):
    """The twin at address ``twin`` called with the arguments ``theirs`` on up to ``helpers``
    workers and with ``mine`` on the calling thread: whether it raised on any thread (the
    twins of the MatMul kernels raise nothing but under ``NUMBA_BOUNDSCHECK``), once every
    thread has left the job."""
    ctrl[_LIMIT] = helpers
    ctrl[_CALLER] = current_cpu()
    post(ctrl, twin, theirs)
    if load(ctrl, _SLEEPING) != 0:
        futex(ctrl, _GEN, _FUTEX_WAKE_PRIVATE, 1 << 30)
        # A worker woken onto this CPU would wait behind this thread, for milliseconds,
        # before it could move itself (``serve``): it gets the CPU once.
        yield_cpu()
    failed = call_twin(twin, mine)
    store(ctrl, _GEN, load(ctrl, _GEN) + 1)  # closed: no worker enters any more
    turns = 0
    while load(ctrl, _ACTIVE) != 0:  # (they read the arguments in this frame)
        turns += 1
        if turns < _PATIENCE:
            pause()
        else:  # (a worker that lost its CPU to another process may be queued behind this one)
            yield_cpu()
    if load(ctrl, _FAILED) != 0:
        store(ctrl, _FAILED, 0)
        failed = True
    return failed


@kernel()
def serve(ctrl, me, spin):
    """A worker's life: join every job it sees open (if its number ``me`` is below the job's
    limit), spin ``spin`` nanoseconds after the last, then sleep until a job opens."""
    last = load(ctrl, _GEN)
    idle_since = now_ns()
    turns = 0
    while True:
        gen = load(ctrl, _GEN)
        if gen & 1 and gen != last:
            last = gen
            if me < ctrl[_LIMIT]:
                add(ctrl, _ACTIVE, 1)
                # Still open, so its arguments are alive until this worker leaves (``run``
                # waits for ``_ACTIVE`` once it has closed the job).
                if load(ctrl, _GEN) == gen:
                    # Linux often wakes a thread onto the CPU of the thread that woke it,
                    # and leaves the two there: a worker on its caller's CPU moves off it
                    # (``schedule``: the same move, measured, for numba's pool).
                    cpu = current_cpu()
                    if cpu >= 0 and cpu == ctrl[_CALLER]:
                        move_off(cpu)
                    call_job(ctrl, ctrl[_FN], ctrl[_ARG])
                add(ctrl, _ACTIVE, -1)
            idle_since = now_ns()
            continue
        turns += 1
        if turns % 64 != 0:  # (the clock is read once in 64 turns)
            pause()
        elif now_ns() - idle_since > spin:
            add(ctrl, _SLEEPING, 1)
            # (a job opened after this read wakes the futex: ``run`` reads ``_SLEEPING`` after
            # it opens the job; one opened before fails the wait at once)
            if load(ctrl, _GEN) == gen:
                futex(ctrl, _GEN, _FUTEX_WAIT_PRIVATE, gen)
            add(ctrl, _SLEEPING, -1)
            idle_since = now_ns()


class _Pool:
    """A process's control block, its lock (a job at a time) and its workers."""

    def __init__(self):
        buf = np.zeros(_WORDS + 8, np.int64)
        at = (-buf.ctypes.data % 64) // 8  # (the block from a cache line's start)
        self.ctrl = buf[at : at + _WORDS]
        self.lock = threading.Lock()
        self.workers = numba.config.NUMBA_NUM_THREADS - 1
        spin = int(tuning.POOL_SPIN_US * 1000)
        # ``serve`` compiled (or loaded from the cache) here, before any worker runs: a worker
        # that compiled it would hold the GIL for that long, while the caller's next calls,
        # each of which lets the GIL go, waited up to the switch interval to take it back
        # (5 ms a call, for a second, from a cache without ``serve``).
        life = numba_private.entry_point(serve, (self.ctrl, 0, spin))
        for me in range(self.workers):
            threading.Thread(
                target=life, args=(self.ctrl, me, spin), name=f"numba_onnx_ops-{me}", daemon=True
            ).start()


_pool: _Pool | None = None
_start_lock = threading.Lock()


def pool() -> _Pool:
    """This process's pool, its workers started on first use: ``NUMBA_NUM_THREADS`` - 1 of
    them (numba's pool size: ``numba.set_num_threads`` limits each call, as it limits numba's
    own).  Read at every job, not kept: a forked child gets a pool of its own."""
    p = _pool
    return p if p is not None else _start()


def _start() -> _Pool:
    global _pool
    with _start_lock:
        if _pool is None:
            _pool = _Pool()
        return _pool


def _after_fork_in_child() -> None:
    # The parent's workers did not come along, and its control block may hold a job in flight
    # (workers inside it) or its lock a holder: the child starts afresh.
    global _pool, _start_lock
    _pool = None
    _start_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


#: The claims of a twin run alone, and a control block of the pool's type for a twin that
#: opens no job.
NO_CLAIMS = np.zeros(0, np.int64)
NO_POOL = np.zeros(_WORDS, np.int64)


def tasks_of(kernel):
    """``kernel``'s task twin (``task_twin``), compiled as its serial twin is
    (``jit.serial_twin``): without ``parallel``, cached on disk under a name of its own
    (``<name>_tasks``), the schedule's helpers doing nothing."""
    return twin_of(kernel, "_tasks", task_twin)


def task_twins() -> list:
    """The task twins made so far."""
    return twins("_tasks")


def task_twin(kernel):
    """``kernel``'s Python function rewritten for the pool, with four more arguments:
    ``_claims``, ``_pool`` (the control block), ``_helpers`` and ``_self`` (the twin's own
    address, ``numba_private.compiled_address``).

    Its one ``for t in prange(n): body`` loop becomes ``_n = n; for _i in range(_n): t =
    claim(_claims, _i); if t >= _n: break; body``: threads that run it on one counter run each
    task once, on whichever thread claims it; with no counter it runs every task in order.
    With ``_helpers`` > 0 it first opens a job on the pool, the same call with ``_helpers`` 0,
    runs it on the calling thread too (``run``), and returns once every thread has left it."""
    func = kernel.py_func
    lines, first = inspect.getsourcelines(func)
    tree = ast.parse(textwrap.dedent("".join(lines)))
    ast.increment_lineno(tree, first - 1)
    fdef = tree.body[0]
    if fdef.args.vararg or fdef.args.kwarg or fdef.args.kwonlyargs or fdef.args.defaults:
        raise TypeError(f"{func.__name__}: a task twin needs plain positional arguments")
    params = [a.arg for a in fdef.args.args]
    fdef.decorator_list = []
    fdef.name = func.__name__ + "_tasks"
    fdef.args.args += [ast.arg(arg=x) for x in ("_claims", "_pool", "_helpers", "_self")]
    loops = [
        node
        for node in ast.walk(fdef)
        if isinstance(node, ast.For)
        and isinstance(node.iter, ast.Call)
        and getattr(node.iter.func, "id", None) == "prange"
    ]
    if len(loops) != 1 or len(loops[0].iter.args) != 1 or not isinstance(loops[0].target, ast.Name):
        raise TypeError(f"{func.__name__}: a task twin needs exactly one `for t in prange(n)`")
    loop = loops[0]
    count, name = loop.iter.args[0], loop.target.id
    loop_head = (
        f"for _i in range(_n):\n {name} = claim(_claims, _i, _n)\n if {name} >= _n:\n  break"
    )
    head = _parsed_at("_n = 0\n" + loop_head, loop)
    head[0].value = count
    head[1].body.extend(loop.body)
    for node in ast.walk(fdef):  # (the loop's place in its block)
        for field in ("body", "orelse", "finalbody"):
            block = getattr(node, field, None)
            if isinstance(block, list) and any(x is loop for x in block):
                at = next(i for i, x in enumerate(block) if x is loop)
                block[at : at + 1] = head
    theirs = ", ".join(params + [f"_pool[{_CLAIM}:{_CLAIM + 2}]", "_pool", "0", "_self"])
    mine = ", ".join(params + [f"_pool[{_CLAIM}:{_CLAIM + 1}]", "_pool", "0", "_self"])
    opening = _parsed_at(
        f"if _helpers > 0:\n"
        f" if run(_pool, _helpers, _self, ({theirs},), ({mine},)):\n"
        f"  raise RuntimeError('a task of a kernel on the pool raised')\n"
        f" return",
        fdef.body[0],
    )
    docstring = isinstance(fdef.body[0], ast.Expr) and isinstance(fdef.body[0].value, ast.Constant)
    fdef.body[int(docstring) : int(docstring)] = opening
    ast.fix_missing_locations(tree)
    namespace = dict(func.__globals__, claim=claim, run=run)
    exec(compile(tree, inspect.getsourcefile(func), "exec"), namespace)
    return namespace[fdef.name]


def _parsed_at(source: str, where: ast.AST) -> list:
    """The statements of ``source``, placed at ``where``'s line in the source (tracebacks and
    numba's messages point at the kernel's own line)."""
    body = ast.parse(source).body
    for node in (n for part in body for n in ast.walk(part)):
        if hasattr(node, "lineno"):
            node.lineno = node.end_lineno = where.lineno
            node.col_offset, node.end_col_offset = where.col_offset, where.end_col_offset
    return body
