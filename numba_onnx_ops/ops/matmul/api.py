"""MatMul's entry point: ``matmul(A, B)`` as ONNX MatMul defines it.

A call flows down: the decisions (``decisions.check``: version, dtypes, shapes), then the
dispatch (BLAS or which own kernel, the calling thread or the pool), then the kernel.  A call of
two ndarrays makes its plan once per kind of call (``dispatch.make``, with an ndarray ``out``
``dispatch.make_into``) and keeps it (``core.plans``); a repeated call runs the kept plan.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ...core import plans
from ...core.checks import dask_operand
from . import dispatch

if TYPE_CHECKING:
    import dask.array as da
    from numpy.typing import ArrayLike

_PLANS = plans.cache()  # call key -> plan (``dispatch.make``)
_INTO = plans.cache()  # call key -> plan of a call with ``out`` (``dispatch.make_into``)
_NDARRAY = np.ndarray


def matmul(
    A: ArrayLike, B: ArrayLike, *, opset: int | None = None, out: np.ndarray | None = None
) -> np.ndarray | da.Array:
    """Matrix product of ``A`` and ``B`` as ONNX MatMul defines it (numpy.matmul's rules).

    Parameters
    ----------
    A, B : array_like
        Operands of the same dtype, of rank >= 1.  A 1-D ``A`` is a row vector and a 1-D ``B``
        a column vector; those dimensions are removed from the result.  Leading (batch)
        dimensions broadcast numpy-style.  Any layout is read in place.  If either is a
        ``dask.array.Array``, the result is a lazy dask array with the same semantics
        (checks made at the call; ``out`` is refused; the chunking is described in the
        README's dask section).
    opset : int, optional
        Default-domain opset of the model, from 1 to ``NEWEST_OPSET``; selects MatMul-1
        (float16/32/64), MatMul-9 (adds int32, int64, uint32, uint64) or MatMul-13 (adds
        bfloat16).  ``None``: the newest.
    out : numpy.ndarray, optional
        Array of the result's exact shape and dtype to fill and return.

    Returns
    -------
    numpy.ndarray or dask.array.Array
        The product, of the operands' dtype.  Integers wrap modulo 2**bits; float16 and
        bfloat16 accumulate in float32 and round once.  Always an array: two 1-D operands
        give a 0-d ``numpy.ndarray`` where ``numpy.matmul`` gives a scalar (an ONNX output is
        a tensor).

    Raises
    ------
    TypeError
        An ``opset`` that is not an integer; a dtype the version does not allow; an operand
        that is not an array of numbers (``None``, a list holding ``None``) or is a masked
        array; ``A`` and ``B`` of different dtypes; ``out`` that is not a ``numpy.ndarray`` or
        is of the wrong dtype; ``out`` with a dask operand.
    ValueError
        An ``opset`` below 1 or above ``NEWEST_OPSET``; an operand numpy cannot make an array
        of (a ragged list); a rank-0 operand; inner dimensions or batch shapes that do not
        match; ``out`` of the wrong shape or read-only; a dask operand of unknown chunk sizes.
    """
    if (
        type(A) is _NDARRAY  # (a module global: ``np.ndarray`` is two lookups a call)
        and type(B) is _NDARRAY
        and (opset is None or opset.__class__ is int)  # (see ``plans.plain``)
    ):
        # The call's key: what its plan depends on (``dispatch.make``), in a flat tuple.
        key = (A.dtype, A.shape, A.strides, A.flags.num, B.dtype, B.shape, B.strides,
               B.flags.num, opset)  # fmt: skip
        if out is None:
            call = _PLANS.get(key)
            if call is None:
                call = plans.keep(_PLANS, key, dispatch.make(A, B, opset))
            return call(A, B)
        if type(out) is np.ndarray:
            into = _INTO.get(key)
            if into is None:
                into = plans.keep(_INTO, key, dispatch.make_into(A, B, opset))
            return into(A, B, out)
    if dask_operand(A, B):
        from ...integrations import dask_arrays  # (only where a dask array arrives)

        return dask_arrays.matmul(matmul, A, B, opset=opset, out=out)
    return dispatch.run_checked(A, B, opset, out)
