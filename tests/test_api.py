"""The public functions' promises beyond the operators' values: the exceptions their docstrings
list, their return types (an ndarray, 0-d where numpy would give a scalar; a dask array for dask
operands), and warmup's checks."""

from __future__ import annotations

import inspect
import re

import numpy as np
import pytest
from oracles import BF16, F16, F32, F64, I8, I32, I64, U32, U64

import numba_onnx_ops as nox
from numba_onnx_ops import precompile


def _dask(x, chunks=1):
    da = pytest.importorskip("dask.array")
    return da.from_array(x, chunks=chunks)


def _unknown_chunks():
    x = _dask(np.arange(4.0), 2)
    return x[x > 1]


# ------------------------------------------------------------------------------------------
# the exceptions each docstring lists
# ------------------------------------------------------------------------------------------
def _raises_section(func) -> dict[str, str]:
    """The docstring's Raises section: exception name -> its description (one line, without
    the ``code`` marks)."""
    doc = inspect.getdoc(func)
    found = re.search(r"^Raises\n-+\n(.*?)(?=^\w[^\n]*\n-+\n|\Z)", doc, re.S | re.M)
    if found is None:
        return {}
    entries: dict[str, str] = {}
    for line in found.group(1).splitlines():
        if line and not line.startswith(" "):
            name = line.strip()
            entries[name] = ""
        elif line.strip():
            entries[name] += " " + line.strip().replace("``", "")
    return entries


_A = np.ones((2, 3), F32)
_B = np.ones((3, 2), F32)
_SQUARE = np.ones((2, 2), F32)

# (function, call, exception, words of the exception's entry in the Raises section)
CASES = {
    "matmul": [
        (lambda: nox.matmul(_A, _B, opset="13"), TypeError, "opset that is not an integer"),
        (lambda: nox.matmul(_A.astype(I8), _B.astype(I8)), TypeError, "does not allow"),
        (lambda: nox.matmul(None, _B), TypeError, "None"),
        (lambda: nox.matmul([[1.0, None, 2.0]], _B), TypeError, "a list holding None"),
        (lambda: nox.matmul(np.ma.ones((2, 3)), _B), TypeError, "masked array"),
        (lambda: nox.matmul(_A, _B.astype(F64)), TypeError, "different dtypes"),
        (lambda: nox.matmul(_A, _B, out=[[0.0] * 2] * 2), TypeError, "not a numpy.ndarray"),
        (lambda: nox.matmul(_A, _B, out=_SQUARE.astype(F64)), TypeError, "wrong dtype"),
        (lambda: nox.matmul(_dask(_A), _B, out=_SQUARE.copy()), TypeError, "with a dask"),
        (lambda: nox.matmul(_A, _B, opset=0), ValueError, "below 1"),
        (lambda: nox.matmul(_A, _B, opset=99), ValueError, "above NEWEST_OPSET"),
        (lambda: nox.matmul([[1.0, 2.0], [3.0]], _B), ValueError, "ragged"),
        (lambda: nox.matmul(np.float32(1), _B), ValueError, "rank-0"),
        (lambda: nox.matmul(_A, _A), ValueError, "inner dimensions"),
        (lambda: nox.matmul(np.ones((2, 2, 3)), np.ones((3, 3, 2))), ValueError, "batch shapes"),
        (lambda: nox.matmul(_A, _B, out=np.ones(4, F32)), ValueError, "wrong shape"),
        (lambda: nox.matmul(_A, _B, out=np.broadcast_to(F32.type(0), (2, 2))), ValueError,
         "read-only"),
        (lambda: nox.matmul(_unknown_chunks(), np.ones(4)), ValueError, "unknown chunk"),
    ],
    "pow": [
        (lambda: nox.pow(_A, 2.0, opset=13.0), TypeError, "opset that is not an integer"),
        (lambda: nox.pow(_A.astype(I8), 2), TypeError, "does not allow"),
        (lambda: nox.pow(_A, None), TypeError, "None"),
        (lambda: nox.pow(_A, [1.0, None, 2.0]), TypeError, "a list holding None"),
        (lambda: nox.pow(np.ma.ones(3), 2.0), TypeError, "masked array"),
        (lambda: nox.pow(_A, _A.astype(F64), opset=7), TypeError, "different dtypes at Pow-1/7"),
        (lambda: nox.pow(_A, _A, opset=7, broadcast=1), TypeError, "at Pow-7 or later"),
        (lambda: nox.pow(_A, 2.0, out=[0.0]), TypeError, "not a numpy.ndarray"),
        (lambda: nox.pow(_A, 2.0, out=_A.astype(F64)), TypeError, "wrong dtype"),
        (lambda: nox.pow(_dask(_A), 2.0, out=_A.copy()), TypeError, "with a dask"),
        (lambda: nox.pow(_A, 2**63), OverflowError, "outside int64 from Pow-12 on"),
        (lambda: nox.pow(_A, 2**1100, opset=7), OverflowError, "float64's range at Pow-1/7"),
        (lambda: nox.pow(_A, 2.0, opset=-1), ValueError, "below 1"),
        (lambda: nox.pow(_A, 2.0, opset=29), ValueError, "above NEWEST_OPSET"),
        (lambda: nox.pow(_A, [[1.0, 2.0], [3.0]]), ValueError, "ragged"),
        (lambda: nox.pow(_A, _B), ValueError, "do not broadcast"),
        (lambda: nox.pow(_A, _A[0], opset=1, broadcast=2), ValueError, "other than 0 or 1"),
        (lambda: nox.pow(_A, _A[0], opset=1, broadcast=1, axis="1"), ValueError, "not an integer"),
        (lambda: nox.pow(_A, _A[0], opset=1, broadcast=1, axis=2), ValueError, "out of range"),
        (lambda: nox.pow(_A, 2.0, out=np.ones(6, F32)), ValueError, "wrong shape"),
        (lambda: nox.pow(_A, 2.0, out=np.broadcast_to(F32.type(0), (2, 3))), ValueError,
         "read-only"),
        (lambda: nox.pow(_unknown_chunks(), 2.0), ValueError, "unknown chunk"),
    ],
    "resolve_version": [
        (lambda: nox.resolve_version("Pow", "13"), TypeError, "not an integer"),
        (lambda: nox.resolve_version("Pow", True), TypeError, "bool"),
        (lambda: nox.resolve_version("Add", 13), ValueError, "op is unknown"),
        (lambda: nox.resolve_version("MatMul", 0), ValueError, "below 1"),
        (lambda: nox.resolve_version("MatMul", 29), ValueError, "above NEWEST_OPSET"),
    ],
    "warmup": [
        (lambda: nox.warmup("nonsense"), TypeError, "not a dtype"),
        (lambda: nox.warmup(["float32", object()]), TypeError, "not a dtype"),
        (lambda: nox.warmup("int8"), TypeError, "neither operator allows"),
    ],
}  # fmt: skip
#: Public functions that raise nothing of their own.
RAISE_NOTHING = {"compiled_specializations", "release_memory"}


def test_every_public_function_is_covered():
    functions = {name for name in nox.__all__ if inspect.isfunction(getattr(nox, name))}
    assert functions == set(CASES) | RAISE_NOTHING
    for name in RAISE_NOTHING:
        assert _raises_section(getattr(nox, name)) == {}, name


@pytest.mark.parametrize("name", sorted(CASES))
def test_raises_sections_list_what_the_functions_raise(name):
    """Each case raises exactly its exception class, whose entry in the function's Raises
    section names the case; and every listed exception has a case."""
    section = _raises_section(getattr(nox, name))
    for i, (call, error, words) in enumerate(CASES[name]):
        with pytest.raises(Exception) as info:
            call()
        assert type(info.value) is error, (name, i, info.value)
        assert error.__name__ in section, (name, error.__name__)
        assert words in section[error.__name__], (name, i, words, section[error.__name__])
    assert set(section) == {error.__name__ for _, error, _ in CASES[name]}


def test_warmup_checks_every_dtype_before_compiling(monkeypatch):
    ran = []
    monkeypatch.setattr(precompile, "matmul", lambda *args, **kwargs: ran.append("matmul"))
    monkeypatch.setattr(precompile, "pow", lambda *args, **kwargs: ran.append("pow"))
    with pytest.raises(TypeError, match="int8"):
        nox.warmup(["float32", "int8"])
    assert ran == []


# ------------------------------------------------------------------------------------------
# return types
# ------------------------------------------------------------------------------------------
def _return_type(func):
    """The return annotation, evaluated (with ``np`` and ``da`` as the modules name them)."""
    da = pytest.importorskip("dask.array")
    annotation = inspect.signature(func).return_annotation
    return eval(annotation, {"np": np, "da": da}) if isinstance(annotation, str) else annotation


def test_return_annotations_hold_what_comes_back():
    x = np.full((2, 2), 2.0, F32)
    for func in (nox.matmul, nox.pow):
        returns = _return_type(func)
        assert isinstance(func(x, x), returns), func.__name__
        assert isinstance(func(_dask(x), x), returns), func.__name__
        assert isinstance(func(x, _dask(x)), returns), func.__name__


MATMUL_DTYPES = [F16, BF16, F32, F64, I32, I64, U32, U64]
POW_DTYPES = [F16, BF16, F32, F64, I32, I64]


def _assert_0d(result, dtype, what):
    assert type(result) is np.ndarray, (what, type(result))
    assert result.shape == (), what
    assert result.dtype == dtype, what


@pytest.mark.parametrize("dtype", MATMUL_DTYPES, ids=str)
@pytest.mark.parametrize("k", [0, 3, 64, 2**20])
def test_matmul_of_two_vectors_is_a_0d_array(dtype, k):
    """numpy.matmul returns a scalar here; an ONNX output is a tensor, so the result is a 0-d
    ndarray of the operands' dtype, on every path: the kept plan (a repeated call), the general
    path (a numpy integer opset) and ``out=``."""
    a = np.ones(k, dtype)
    b = np.zeros(k, dtype)
    b[:1] = 1
    expected = nox.matmul(a[None, :], b[:, None])[0, 0]
    for call in range(3):
        result = nox.matmul(a, b)
        _assert_0d(result, dtype, f"plan, call {call}")
        assert result.tobytes() == expected.tobytes()
    result = nox.matmul(a, b, opset=np.int64(nox.NEWEST_OPSET))
    _assert_0d(result, dtype, "general path")
    assert result.tobytes() == expected.tobytes()
    out = np.full((), 7, dtype)
    assert nox.matmul(a, b, out=out) is out
    assert out.tobytes() == expected.tobytes()


def _pow_exponents(dtype):
    yield from (2, 3, np.array(2, dtype), np.array(3, I8), np.int32(2))
    if dtype.kind == "f" or dtype == BF16:
        yield from (0.5, np.float32(0.5), np.array(-1.5, dtype))


@pytest.mark.parametrize("dtype", POW_DTYPES, ids=str)
def test_pow_of_0d_operands_is_a_0d_array(dtype):
    """numpy.power returns a scalar for 0-d operands; the result is a 0-d ndarray of X's dtype,
    on every path: the kept plan (a repeated call), the general path (a numpy scalar base, a
    numpy integer opset), and ``out=``."""
    x = np.array(2, dtype)
    for y in _pow_exponents(dtype):
        what = f"{dtype} ** {y!r}"
        expected = nox.pow(x.reshape(1), y).reshape(())
        for call in range(3):
            result = nox.pow(x, y)
            _assert_0d(result, dtype, f"{what}, plan, call {call}")
            assert result.tobytes() == expected.tobytes(), what
        for result in (nox.pow(x[()], y), nox.pow(x, y, opset=np.int64(nox.NEWEST_OPSET))):
            _assert_0d(result, dtype, f"{what}, general path")
            assert result.tobytes() == expected.tobytes(), what
        out = np.full((), 7, dtype)
        assert nox.pow(x, y, out=out) is out
        assert out.tobytes() == expected.tobytes(), what


def test_pow_of_0d_operands_at_every_version():
    x = np.array(1.5, F32)
    for opset in (1, 7, 12, 13, 15):
        _assert_0d(nox.pow(x, x, opset=opset), F32, f"opset {opset}")
        _assert_0d(nox.pow(x, 2.0, opset=opset), F32, f"opset {opset}")
        weak_base = F32 if opset < 12 else F64  # (a Python float X: float64 from Pow-12 on)
        _assert_0d(nox.pow(1.5, x, opset=opset), weak_base, f"opset {opset}")
    _assert_0d(nox.pow(x, x, opset=1, broadcast=1), F32, "Pow-1 broadcast=1")
