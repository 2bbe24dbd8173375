"""MatMul and Pow on dask arrays: the in-memory verdict, then a graph of in-memory calls.

Imported only when a ``dask.array.Array`` reaches ``matmul`` or ``pow``.  Every decision the
in-memory call makes (version, dtypes, weak scalars, shapes, broadcasting, Pow-1's legacy
rules, MatMul's 1-D promotion) is made here at the call, by the same code (the operators'
``decisions`` modules) run on shape-only stand-ins of the dask operands, so the exceptions and
messages are the same and no block is computed.  The graph then holds only calls of the public
in-memory functions on blocks, wrapped so that a task's kernels run on the cores that task owns
(``_run_in_task``).
"""

from __future__ import annotations

import math
import sys
import threading
from functools import partial

import dask
import dask.array as da
import dask.system
import numba
import numpy as np
from dask.array.core import unify_chunks
from dask.base import tokenize

from ..core.dtypes import is_half
from ..core.versions import resolve_version
from ..ops.matmul import decisions as matmul_decisions
from ..ops.pow import decisions as pow_decisions

# --- thread policy -----------------------------------------------------------------------


def _concurrent_tasks() -> tuple[int, int]:
    """``(cores, slots)``: the cores this process's scheduler runs tasks on, and how many
    tasks it runs at once.  dask counts one worker thread per core."""
    if "distributed" in sys.modules:
        from distributed import get_worker

        try:
            n = get_worker().state.nthreads
        except ValueError:  # not inside a distributed worker
            pass
        else:
            return n, n
    if threading.current_thread() is threading.main_thread():
        return numba.config.NUMBA_NUM_THREADS, 1  # the synchronous scheduler: one at a time
    n = dask.config.get("num_workers", None) or dask.system.CPU_COUNT
    return n, n


def task_threads(ntasks: int) -> int:
    """numba threads for one of ``ntasks`` tasks of an operation, in the calling task.

    The scheduler's cores are shared evenly by the tasks that can run at once: a graph of one
    block uses every core, a graph of at least as many blocks as worker threads uses one thread
    per task (no oversubscription).  Never more than numba's pool (``NUMBA_NUM_THREADS``).
    """
    cores, slots = _concurrent_tasks()
    running = max(1, min(slots, ntasks))
    return max(1, min(numba.config.NUMBA_NUM_THREADS, cores // running))


def _run_in_task(func, ntasks, *args, **kwargs):
    """Call ``func`` with numba's thread count (per calling thread) set for this task; a lower
    count the calling thread already had is kept."""
    previous = numba.get_num_threads()
    numba.set_num_threads(min(previous, task_threads(ntasks)))
    try:
        return func(*args, **kwargs)
    finally:
        numba.set_num_threads(previous)


# --- helpers ------------------------------------------------------------------------------


def _standin(x):
    """A shape-and-dtype-only numpy array for a dask operand (a zero-stride view: no data)."""
    if not isinstance(x, da.Array):
        return x
    if any(math.isnan(n) for n in x.shape):
        raise ValueError(
            f"dask array of shape {x.shape} has unknown chunk sizes; "
            "call compute_chunk_sizes() on it first"
        )
    # Native byte order: the blocks convert their own, and a stand-in must never be copied.
    dtype = x.dtype if x.dtype.isnative else x.dtype.newbyteorder("=")
    return np.broadcast_to(np.zeros((), dtype), x.shape)


def _as_dask(x, validated: np.ndarray) -> da.Array:
    """A dask operand as is; a numpy operand as one block of its validated array (the dtype
    conversions of weak scalars and byte order already made)."""
    if isinstance(x, da.Array):
        return x
    return da.from_array(validated, chunks=validated.shape or ())


def _no_out(label: str, out) -> None:
    if out is not None:
        raise TypeError(f"{label}: out= is not supported when an operand is a dask array")


def _name(op: str, *parts) -> str:
    """The output's graph name, from what determines its blocks: the operands' names (dask's
    content tokens), their indices and chunks, and the operation's arguments.  Naming the
    output here spares dask hashing the task function (a pickle of it) and inspecting its
    signature at every call, a cost a one-chunk call notices (docs/design.md, "dask")."""
    return f"{op}-{tokenize(*parts)}"


def _blocks(arrays_and_indices, out_ind):
    """Unify the chunks of indexed operands (the common refinement of their boundaries on each
    shared index; size-1 dimensions broadcast) and count the output blocks."""
    chunkss, arrays = unify_chunks(*arrays_and_indices)
    ntasks = math.prod(len(chunkss[i]) for i in out_ind)
    return chunkss, arrays, ntasks


# --- Pow ----------------------------------------------------------------------------------


def _pow_block(compute, x, y, opset):
    return compute(x, y, opset=opset)


def pow(compute, X, Y, *, opset=None, broadcast=None, axis=None, out=None):  # noqa: A001
    """``numba_onnx_ops.pow`` when an operand is a dask array: a lazy dask array whose blocks
    are calls of ``compute`` (the in-memory ``pow``, handed down by the entry point, which this
    layer does not import).

    The result has ``X``'s chunks where ``X`` spans the result, unified with ``Y``'s (each
    dimension split at the boundaries of both; no other rechunk).  A one-element exponent goes
    to every block as a value.  Pow-1's legacy broadcast is applied to ``Y``'s shape first, then
    blocks broadcast numpy-style, which gives the same elements.
    """
    label, x, y, shape = pow_decisions.check(_standin(X), _standin(Y), opset, broadcast, axis)
    _no_out(label, out)
    # Blocks run the version's kernels; Pow-1's reshaped Y broadcasts numpy-style, which is
    # Pow-7's rule, with Pow-1's type constraint.
    version = resolve_version("Pow", opset)
    block_opset = 7 if version == 1 else version
    nd = len(shape)
    if y.size == 1 and not isinstance(Y, da.Array):
        # A one-element numpy exponent: a value in every task.  Its dimensions are all 1, so
        # the result is X's blocks with leading unit dimensions where Y has more.
        xd = _as_dask(X, x)
        xd = xd[(None,) * (nd - xd.ndim)] if xd.ndim < nd else xd
        value = np.ascontiguousarray(y).reshape(())
        out_ind = tuple(range(nd))
        return da.blockwise(
            partial(_run_in_task, _pow_block, xd.npartitions, compute),
            out_ind,
            xd,
            out_ind,
            value,
            None,
            block_opset,
            None,
            name=_name("pow", xd.name, value.dtype.str, value.tobytes(), block_opset),
            dtype=x.dtype,
            align_arrays=False,
            meta=np.empty((0,) * nd, x.dtype),
        )
    xd = _as_dask(X, x)
    yd = _as_dask(Y, y)
    if isinstance(Y, da.Array) and yd.shape != y.shape:  # Pow-1: Y reshaped to X's rank
        yd = yd.reshape(y.shape)
    x_ind = tuple(range(nd - x.ndim, nd))
    y_ind = tuple(range(nd - y.ndim, nd))
    out_ind = tuple(range(nd))
    _, (xd, yd), ntasks = _blocks((xd, x_ind, yd, y_ind), out_ind)
    return da.blockwise(
        partial(_run_in_task, _pow_block, ntasks, compute),
        out_ind,
        xd,
        x_ind,
        yd,
        y_ind,
        block_opset,
        None,
        name=_name("pow", xd.name, x_ind, xd.chunks, yd.name, y_ind, yd.chunks, block_opset),
        dtype=x.dtype,
        align_arrays=False,
        meta=np.empty((0,) * nd, x.dtype),
    )


# --- MatMul -------------------------------------------------------------------------------


def _matmul_block(compute, a, b, opset):
    return compute(a, b, opset=opset)


def _matmul_partial(compute, a, b, opset):
    """One contraction block's partial product, with a unit axis where the blocks are summed.

    Half types are widened to float32 (exactly) and multiplied there, so partials keep float32
    and the result is rounded once, after the sum.
    """
    if is_half(a.dtype):
        a = a.astype(np.float32)
        b = b.astype(np.float32)
    return compute(a, b, opset=opset)[..., None, :, :]


# The partial products' sums and the half types' rounding run in tasks of their own; like the
# in-memory product they give IEEE results silently (overflow to inf, inf - inf to NaN), where
# dask's ``sum`` and ``astype`` would report numpy's floating-point warnings from its tasks.


def _add_partials(x, axis=None, dtype=None, keepdims=False):
    """``numpy.sum`` of partial products (``dask.array.reduction``'s chunk and aggregate)."""
    with np.errstate(all="ignore"):
        return np.sum(x, axis=axis, dtype=dtype, keepdims=keepdims)


def _round(x, to):
    with np.errstate(all="ignore"):
        return x.astype(to)


def matmul(compute, A, B, *, opset=None, out=None):
    """``numba_onnx_ops.matmul`` when an operand is a dask array: a lazy dask array whose
    blocks are calls of ``compute`` (the in-memory ``matmul``, handed down by the entry point).

    Output blocks pair ``A``'s row chunks with ``B``'s column chunks; batch dimensions
    broadcast numpy-style with their chunks unified.  The contraction axis is rechunked to
    the common refinement of ``A``'s column and ``B``'s row chunks (split at the boundaries of
    both), and so are batch dimensions that both have; nothing else is rechunked.  With one
    contraction chunk every output block is one in-memory product.  With several, each block
    pair gives a partial product and the partials are added in a tree (a dask reduction, with
    ``split_every`` as dask's ``sum``): integers in their own dtype (wrapping modulo 2**bits, so
    the result is exact), float32/float64 in their own dtype, float16/bfloat16 as float32
    partials rounded once at the end; IEEE results without floating-point warnings, as in memory.
    """
    label, a, b, a2, b2, batch, (m, k, n), shape = matmul_decisions.check(
        _standin(A), _standin(B), opset
    )
    _no_out(label, out)
    version = resolve_version("MatMul", opset)
    ad = _as_dask(A, a)
    bd = _as_dask(B, b)
    if a.ndim == 1:
        ad = ad[None, :]
    if b.ndim == 1:
        bd = bd[:, None]
    nd = max(ad.ndim, bd.ndim)
    # Indices: batch dimensions 0..nd-3 from the right, rows nd-2, columns nd-1, contraction nd.
    a_ind = tuple(range(nd - ad.ndim, nd - 2)) + (nd - 2, nd)
    b_ind = tuple(range(nd - bd.ndim, nd - 2)) + (nd, nd - 1)
    out_ind = tuple(range(nd))
    # Each task covers one output block and one contraction chunk.
    chunkss, (ad, bd), ntasks = _blocks((ad, a_ind, bd, b_ind), out_ind + (nd,))
    dtype = a.dtype
    if len(chunkss[nd]) == 1:  # one in-memory product per output block
        func, ind, acc, extra = _matmul_block, out_ind, dtype, {}
    else:
        # Partial products, with the contraction index kept as an output axis of unit blocks
        # (before rows and columns), summed below.
        func, ind = _matmul_partial, tuple(range(nd - 2)) + (nd, nd - 2, nd - 1)
        acc = np.dtype(np.float32) if is_half(dtype) else dtype
        extra = {"adjust_chunks": {nd: 1}}
    result = da.blockwise(
        partial(_run_in_task, func, ntasks, compute),
        ind,
        ad,
        a_ind,
        bd,
        b_ind,
        version,
        None,
        name=_name(func.__name__, ad.name, a_ind, ad.chunks, bd.name, b_ind, bd.chunks, version),
        dtype=acc,
        align_arrays=False,
        concatenate=True,
        meta=np.empty((0,) * len(ind), acc),
        **extra,
    )
    if func is _matmul_partial:
        result = da.reduction(result, _add_partials, _add_partials, axis=nd - 2, dtype=acc)
        if acc != dtype:
            result = result.map_blocks(_round, to=dtype, dtype=dtype)  # half types: rounded once
    if a.ndim == 1:
        result = result[..., 0, :] if b.ndim > 1 else result[..., 0]
    if b.ndim == 1:
        result = result[..., 0]
    assert result.shape == shape, (result.shape, shape)
    return result
