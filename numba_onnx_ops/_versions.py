"""Operator versions and their type constraints: the one table every check reads.

Each entry is copied from ONNX's operator pages (``docs/spec``): MatMul has versions 1, 9, 13;
Pow has 1, 7, 12, 13, 15.  An opset resolves to the newest version whose ``since_version`` is at
or below it.
"""

from __future__ import annotations

import numbers

import numpy as np

from ._dtypes import BFLOAT16

_F16 = np.dtype(np.float16)
_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)
_BF16 = BFLOAT16
_I8, _I16, _I32, _I64 = (np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64))
_U8, _U16, _U32, _U64 = (np.dtype(t) for t in (np.uint8, np.uint16, np.uint32, np.uint64))

_FLOATS = frozenset({_F16, _F32, _F64})
_INTS_MATMUL = frozenset({_I32, _I64, _U32, _U64})
_EXPONENTS = _FLOATS | {_I8, _I16, _I32, _I64, _U8, _U16, _U32, _U64}

#: MatMul version -> allowed dtype of A, B and the result (type constraint T).
MATMUL_TYPES: dict[int, frozenset[np.dtype]] = {
    1: _FLOATS,
    9: _FLOATS | _INTS_MATMUL,
    13: _FLOATS | _INTS_MATMUL | {_BF16},
}

#: Pow version -> (allowed dtypes of X and the result (T), allowed dtypes of Y (T1)).
#: Pow-1 and Pow-7 have a single constraint T shared by X and Y.
POW_TYPES: dict[int, tuple[frozenset[np.dtype], frozenset[np.dtype]]] = {
    1: (_FLOATS, _FLOATS),
    7: (_FLOATS, _FLOATS),
    12: (_FLOATS | {_I32, _I64}, _EXPONENTS),
    13: (_FLOATS | {_I32, _I64, _BF16}, _EXPONENTS),
    15: (_FLOATS | {_I32, _I64, _BF16}, _EXPONENTS | {_BF16}),
}

#: Versions whose X and Y share one type constraint (and so must have the same dtype).
POW_SHARED_T = frozenset({1, 7})
#: Versions with Pow-1's legacy ``broadcast`` and ``axis`` attributes.
POW_LEGACY_BROADCAST = frozenset({1})

_TABLES = {"MatMul": MATMUL_TYPES, "Pow": POW_TYPES}


def resolve_version(op: str, opset: int | None = None) -> int:
    """Return the version of ``op`` that a model importing default-domain ``opset`` runs.

    Parameters
    ----------
    op : {"MatMul", "Pow"}
        The operator.
    opset : int, optional
        The default-domain opset version; ``None`` means the newest version of ``op``.

    Returns
    -------
    int
        The newest ``since_version`` of ``op`` that is at or below ``opset``.

    Raises
    ------
    ValueError
        If ``op`` is unknown, or ``opset`` is not an integer >= 1.
    """
    try:
        versions = _TABLES[op]
    except KeyError:
        raise ValueError(f"unknown operator {op!r}; expected one of {sorted(_TABLES)}") from None
    if opset is None:
        return max(versions)
    if isinstance(opset, bool) or not isinstance(opset, numbers.Integral) or opset < 1:
        raise ValueError(f"{op}: opset must be an integer >= 1 or None, got {opset!r}")
    return max(v for v in versions if v <= opset)


def dtype_names(dtypes) -> str:
    """The allowed set as a sorted, readable list for error messages."""
    return "{" + ", ".join(sorted(str(d) for d in dtypes)) + "}"
