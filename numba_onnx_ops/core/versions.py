"""Operator versions and their type constraints: the one table every check reads.

Each entry is copied from ONNX's operator pages (``docs/spec``): MatMul has versions 1, 9, 13;
Pow has 1, 7, 12, 13, 15, as of opset ``NEWEST_OPSET``.  An opset resolves to the newest version
whose ``since_version`` is at or below it; a later opset is refused, as it may define a new
version of either operator.
"""

from __future__ import annotations

import functools
import numbers

import numpy as np

from .dtypes import bfloat16, is_bfloat16

_F16 = np.dtype(np.float16)
_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)
_I8, _I16, _I32, _I64 = (np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64))
_U8, _U16, _U32, _U64 = (np.dtype(t) for t in (np.uint8, np.uint16, np.uint32, np.uint64))


class Allowed(frozenset):
    """A type constraint: numpy's dtypes, and ml_dtypes' bfloat16 where ``with_bfloat16``,
    tested without importing ml_dtypes (see ``core.dtypes.is_bfloat16``)."""

    with_bfloat16 = False

    def __contains__(self, dtype) -> bool:
        return frozenset.__contains__(self, dtype) or (self.with_bfloat16 and is_bfloat16(dtype))

    def names(self) -> list[str]:
        """The dtypes' names, bfloat16 included."""
        return [str(d) for d in self] + ["bfloat16"] * self.with_bfloat16

    def dtypes(self) -> frozenset[np.dtype]:
        """The dtypes as one set, bfloat16's included (this imports ml_dtypes)."""
        return frozenset(self) | ({bfloat16()} if self.with_bfloat16 else set())


def _allowed(*dtypes, bf16: bool = False) -> Allowed:
    allowed = Allowed(dtypes)
    allowed.with_bfloat16 = bf16
    return allowed


_FLOATS = (_F16, _F32, _F64)
_INTS_MATMUL = (_I32, _I64, _U32, _U64)
_EXPONENTS = _FLOATS + (_I8, _I16, _I32, _I64, _U8, _U16, _U32, _U64)

#: The newest default-domain opset whose MatMul and Pow versions the tables below hold (onnx
#: 1.23's).  Raise it once ONNX's history of both operators up to the new opset is checked
#: (``tests/test_versions.py`` compares the tables with the installed onnx's schemas).
NEWEST_OPSET = 28

# The tables the checks read (the public ones below hold the same dtypes).
MATMUL_ALLOWED: dict[int, Allowed] = {
    1: _allowed(*_FLOATS),
    9: _allowed(*_FLOATS, *_INTS_MATMUL),
    13: _allowed(*_FLOATS, *_INTS_MATMUL, bf16=True),
}
POW_ALLOWED: dict[int, tuple[Allowed, Allowed]] = {
    1: (_allowed(*_FLOATS), _allowed(*_FLOATS)),
    7: (_allowed(*_FLOATS), _allowed(*_FLOATS)),
    12: (_allowed(*_FLOATS, _I32, _I64), _allowed(*_EXPONENTS)),
    13: (_allowed(*_FLOATS, _I32, _I64, bf16=True), _allowed(*_EXPONENTS)),
    15: (_allowed(*_FLOATS, _I32, _I64, bf16=True), _allowed(*_EXPONENTS, bf16=True)),
}


@functools.cache
def public_table(name: str) -> dict:
    """``MATMUL_TYPES``: MatMul version -> allowed dtypes of A, B and the result (constraint
    T).  ``POW_TYPES``: Pow version -> (allowed dtypes of X and the result (T), of Y (T1));
    Pow-1 and Pow-7 have a single constraint T shared by X and Y.  Built on first access:
    holding bfloat16's dtype imports ml_dtypes, which ``import numba_onnx_ops`` does not."""
    if name == "MATMUL_TYPES":
        return {v: t.dtypes() for v, t in MATMUL_ALLOWED.items()}
    return {v: (t.dtypes(), t1.dtypes()) for v, (t, t1) in POW_ALLOWED.items()}


PUBLIC_TABLES = ("MATMUL_TYPES", "POW_TYPES")


def __getattr__(name: str):
    if name in PUBLIC_TABLES:
        return public_table(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: Versions whose X and Y share one type constraint (and so must have the same dtype).
POW_SHARED_T = frozenset({1, 7})
#: Versions with Pow-1's legacy ``broadcast`` and ``axis`` attributes.
POW_LEGACY_BROADCAST = frozenset({1})

_TABLES = {"MatMul": MATMUL_ALLOWED, "Pow": POW_ALLOWED}


def resolve_version(op: str, opset: int | None = None) -> int:
    """Return the version of ``op`` that a model importing default-domain ``opset`` runs.

    Parameters
    ----------
    op : {"MatMul", "Pow"}
        The operator.
    opset : int, optional
        The default-domain opset version, from 1 to ``NEWEST_OPSET``; ``None`` means the newest
        version of ``op``.  A numpy integer is accepted.

    Returns
    -------
    int
        The newest ``since_version`` of ``op`` that is at or below ``opset``.

    Raises
    ------
    TypeError
        If ``opset`` is not an integer (a ``str``, a ``float``, a ``bool``).
    ValueError
        If ``op`` is unknown, or ``opset`` is below 1 or above ``NEWEST_OPSET`` (a later opset
        may define a new version of ``op``, which this package does not know).
    """
    try:
        versions = _TABLES[op]
    except KeyError:
        raise ValueError(f"unknown operator {op!r}; expected one of {sorted(_TABLES)}") from None
    if opset is None:
        return max(versions)
    if isinstance(opset, bool) or not isinstance(opset, numbers.Integral):
        # (numpy's convention: a value of the wrong type is a TypeError, a bad value of the
        # right type a ValueError; a bool is an int to Python, not an opset)
        raise TypeError(
            f"{op}: opset must be an integer or None, got {type(opset).__name__} {opset!r}"
        )
    if opset < 1:
        raise ValueError(f"{op}: opset must be >= 1, got {opset}")
    if opset > NEWEST_OPSET:
        raise ValueError(
            f"{op}: opset {opset} is newer than opset {NEWEST_OPSET}, the newest this package "
            f"knows; a later opset may define a new version of {op}"
        )
    return max(v for v in versions if v <= opset)


def dtype_names(allowed: Allowed) -> str:
    """The allowed set as a sorted, readable list for error messages."""
    return "{" + ", ".join(sorted(allowed.names())) + "}"
