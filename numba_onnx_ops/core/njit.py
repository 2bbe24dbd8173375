"""What both operators' ``@njit`` overloads share: the keywords numba passes as compile-time
literals, the entry points' checks run on prototypes of numba's argument types (so a refusal
is the entry point's own message, raised as numba's ``TypingError`` at compile time), and the
refusal of the half types, on which numba has no arithmetic."""

from __future__ import annotations

import contextlib

import numpy as np
from numba import types
from numba.core.errors import TypingError
from numba.np.numpy_support import as_dtype

from .dtypes import FLOAT16


def is_absent(ty) -> bool:
    """Whether a keyword's numba type says it was not given, or given as ``None``."""
    return (
        ty is None
        or isinstance(ty, types.NoneType)
        or (isinstance(ty, types.Omitted) and ty.value is None)
    )


def literal(op: str, name: str, ty):
    """The value of the keyword ``name`` of ``op``: ``None`` where absent, else its compile-time
    literal; a ``TypingError`` for a value only known at run time."""
    if is_absent(ty):
        return None
    if isinstance(ty, types.Omitted):
        return ty.value
    if isinstance(ty, types.Literal):
        return ty.literal_value
    raise TypingError(f"{op}: {name} must be a compile-time constant in @njit code, got {ty}")


@contextlib.contextmanager
def refusals():
    """The entry point's ``TypeError``, ``ValueError`` and ``OverflowError``, with their own
    words, as numba's ``TypingError``."""
    try:
        yield
    except (TypeError, ValueError, OverflowError) as error:
        raise TypingError(str(error)) from None


def prototype(ty):
    """A value for the entry point's checks standing for any value of numba type ``ty``: an
    array of ones of its dtype and rank (all-ones shapes pass every shape rule, so the checks
    raise only what every value of the type would raise); for a float64 or int64 scalar, a
    Python float or int (numba gives a Python number one of these types, so it is taken as
    weak, as the entry point takes a Python number); for any other scalar, a 0-d array of its
    dtype, as the entry point takes a numpy scalar."""
    ty = types.unliteral(ty)
    if isinstance(ty, types.Array):
        return np.ones((1,) * ty.ndim, as_dtype(ty.dtype))
    if ty == types.float64:
        return 1.0
    if ty == types.int64:
        return 1
    if isinstance(ty, (types.Number, types.Boolean)):
        return np.ones((), as_dtype(ty))
    return None


def refuse_half(label: str, name: str, dtype: np.dtype, call: str) -> None:
    """A ``TypingError`` for float16 (numba has no arithmetic on it; bfloat16 arrays cannot
    reach numba at all)."""
    if dtype == FLOAT16:
        raise TypingError(
            f"{label}: {name} has dtype float16, which numba cannot compute with; "
            f"call numba_onnx_ops.{call} from Python for float16"
        )
