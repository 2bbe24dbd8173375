"""Pow's entry point: ``pow(X, Y)`` as ONNX Pow defines it.

A call flows down: the decisions (``decisions.check``: version, dtypes, shapes), then the plan
(the exponent class and its kernel, the calling thread or the pool), then the kernel.  A call
of ndarrays, without ``out`` or with an ndarray one, makes its plan once per kind of call (its
key, built below) and keeps it (``core.plans``); a repeated call runs the kept plan.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ...core import plans
from ...core.checks import dask_operand
from . import plan

if TYPE_CHECKING:
    import dask.array as da
    from numpy.typing import ArrayLike

_PLANS = plans.cache()  # call key -> plan (``plan.make``)
_INTO = plans.cache()  # call key -> plan of a call with ``out`` (``plan.make_into``)
_NDARRAY = np.ndarray


def pow(  # noqa: A001 - the ONNX operator's name
    X: ArrayLike,
    Y: ArrayLike,
    *,
    opset: int | None = None,
    broadcast: int | None = None,
    axis: int | None = None,
    out: np.ndarray | None = None,
) -> np.ndarray | da.Array:
    """Elementwise ``X ** Y`` as ONNX Pow defines it.

    Parameters
    ----------
    X : array_like
        The base.  Pow-1/7: float16, float32, float64; Pow-12 adds int32, int64; Pow-13 adds
        bfloat16.
    Y : array_like
        The exponent.  Pow-1/7: the same dtype as ``X``.  Pow-12 on: any of float16/32/64,
        int8..int64, uint8..uint64, independently of ``X``; Pow-15 adds bfloat16.  A plain
        Python ``int``/``float`` is weakly typed: it takes ``X``'s dtype where the version
        needs one dtype, else becomes int64/float64 (an int outside int64 is an error).
    opset : int, optional
        Default-domain opset of the model, from 1 to ``NEWEST_OPSET``; selects Pow-1, 7, 12,
        13 or 15.  ``None``: the newest.
    broadcast, axis : int, optional
        Pow-1's legacy attributes.  ``broadcast=1`` lets ``Y`` be a one-element tensor or match
        a contiguous run of ``X``'s dimensions starting at ``axis`` (default: the trailing
        ones; a negative ``axis`` counts from the end, and must lie in [-rank(X), rank(X) - 1]);
        with ``broadcast=0``, or without the attribute (``None``, the default), the shapes must
        be equal.  A Python scalar ``Y`` is a constant and always applies to every element.
        From Pow-7 on, broadcasting is numpy-style and these attributes do not exist: passing
        either, even 0, is a ``TypeError``, as an ONNX node of that version carrying one is
        invalid.
    out : numpy.ndarray, optional
        Array of the result's exact shape and dtype to fill and return.

    If ``X`` or ``Y`` is a ``dask.array.Array``, the result is a lazy dask array with the same
    semantics (checks made at the call; ``out`` is refused; the chunking is described in the
    README's dask section).

    Returns
    -------
    numpy.ndarray or dask.array.Array
        The power, of ``X``'s dtype.  Floats: within 1 ulp of the correctly rounded value
        (C99 ``pow`` special values).  Integer bases: for ``y >= 0`` exact with wraparound
        (``0 ** 0 = 1``); for ``y < 0`` the truncated true value (0 for ``|x| >= 2``, and the
        dtype's minimum for ``0 ** y``); for a float ``y``, ``x ** y`` in float64 truncated
        toward zero, the dtype's minimum where that is NaN, infinite or out of range.  Always
        an array: 0-d operands give a 0-d ``numpy.ndarray`` where ``numpy.power`` gives a
        scalar (an ONNX output is a tensor).

    Raises
    ------
    TypeError
        An ``opset`` that is not an integer; a dtype the version does not allow; an operand
        that is not an array of numbers (``None``, a list holding ``None``) or is a masked
        array; ``X`` and ``Y`` of different dtypes at Pow-1/7; ``broadcast``/``axis`` at Pow-7
        or later; ``out`` that is not a ``numpy.ndarray`` or is of the wrong dtype; ``out``
        with a dask operand.
    OverflowError
        A Python ``int`` operand outside int64 from Pow-12 on, or outside float64's range at
        Pow-1/7.
    ValueError
        An ``opset`` below 1 or above ``NEWEST_OPSET``; an operand numpy cannot make an array
        of (a ragged list); shapes that do not broadcast (under the version's rules); a
        ``broadcast`` other than 0 or 1, or an ``axis`` that is not an integer or is out of
        range, at Pow-1; ``out`` of the wrong shape or read-only; a dask operand of unknown
        chunk sizes.
    """
    if (
        (out is None or type(out) is _NDARRAY)  # (a module global: ``np.ndarray`` is two
        and type(X) is _NDARRAY  # lookups a call)
        and (opset is None or opset.__class__ is int)  # (see ``plans.plain``)
        and (broadcast is None and axis is None or plans.plain(broadcast, axis))
    ):
        # The call's key: what its plan depends on (``plan.make``), in a flat tuple (one of
        # tuples took twice as long to look up), built here (a function call would be a tenth
        # of a small call).
        ty = type(Y)
        if ty is _NDARRAY:
            value = Y.tobytes() if Y.size == 1 else None
            key = (X.dtype, X.shape, X.flags.num, Y.dtype, Y.shape, Y.flags.num, value, opset,
                   broadcast, axis)  # fmt: skip
        elif ty is float or ty is int:
            # (a NaN is not equal to itself: each NaN object would make a plan of its own)
            key = (X.dtype, X.shape, X.flags.num, ty, Y, opset, broadcast, axis) if Y == Y else None
        elif isinstance(Y, np.generic):
            key = (X.dtype, X.shape, X.flags.num, Y.dtype, Y.tobytes(), opset, broadcast, axis)
        else:
            key = None
        if key is not None and out is None:
            call = _PLANS.get(key)
            if call is None:
                call = plans.keep(_PLANS, key, plan.make(X, Y, opset, broadcast, axis))
            return call(X, Y)
        if key is not None:
            into = _INTO.get(key)
            if into is None:
                into = plans.keep(_INTO, key, plan.make_into(X, Y, opset, broadcast, axis))
            return into(X, Y, out)
    if dask_operand(X, Y):
        from ...integrations import dask_arrays  # (only where a dask array arrives)

        return dask_arrays.pow(pow, X, Y, opset=opset, broadcast=broadcast, axis=axis, out=out)
    return plan.run_checked(X, Y, opset, broadcast, axis, out)
