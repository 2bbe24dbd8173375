"""Bad input: every disallowed dtype of every version, bad shapes, bad opsets, bad out=.

semantics.md: a dtype outside the version's constraint is a TypeError naming the operator, the
version, the dtype and the allowed set; shape problems are ValueErrors naming both shapes;
errors are raised before any kernel runs, so out= is never written when a call fails.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from oracles import (
    BF16,
    F16,
    F32,
    F64,
    I8,
    I32,
    I64,
    MATMUL_SINCE,
    NUMERIC,
    POW_SINCE,
    SPEC_MATMUL_TYPES,
    SPEC_POW_TYPES,
    U32,
    Snapshot,
    dtype_id,
    onnx_type_name,
)

import numba_onnx_ops as noo

# a legal dtype for the other operand at every version
_LEGAL_X = F32
_LEGAL_Y = F32


def assert_dtype_error(excinfo, op, version, bad, allowed):
    message = str(excinfo.value)
    assert f"{op}-{version}" in message, message
    assert np.dtype(bad).name in message, message
    for d in allowed:  # the allowed set, in numpy's or ONNX's spelling
        names = {np.dtype(d).name, onnx_type_name(d), f"tensor({onnx_type_name(d)})"}
        assert any(re.search(rf"(?<![a-z]){n}(?![0-9])", message) for n in names), (d, message)


def sentinel_out(shape, dtype):
    out = np.full(shape, 7, dtype=dtype)
    return out, out.copy()


def assert_untouched(out, saved):
    assert out.tobytes() == saved.tobytes(), "out was written by a failing call"


# ------------------------------------------------------------------------------------------
# dtypes outside the constraint, per version
# ------------------------------------------------------------------------------------------
MATMUL_BAD = [(v, d) for v in MATMUL_SINCE for d in NUMERIC if d not in SPEC_MATMUL_TYPES[v]]


@pytest.mark.parametrize(
    ("version", "dtype"), MATMUL_BAD, ids=[f"MatMul{v}-{dtype_id(d)}" for v, d in MATMUL_BAD]
)
def test_matmul_rejects_dtype(version, dtype):
    a = np.ones((2, 3), dtype=dtype)
    b = np.ones((3, 2), dtype=dtype)
    snap = Snapshot(a, b)
    with pytest.raises(TypeError) as excinfo:
        noo.matmul(a, b, opset=version)
    assert_dtype_error(excinfo, "MatMul", version, dtype, SPEC_MATMUL_TYPES[version])
    snap.assert_unchanged()


POW_BAD_X = [(v, d) for v in POW_SINCE for d in NUMERIC if d not in SPEC_POW_TYPES[v][0]]
POW_BAD_Y = [(v, d) for v in POW_SINCE for d in NUMERIC if d not in SPEC_POW_TYPES[v][1]]


@pytest.mark.parametrize(
    ("version", "dtype"), POW_BAD_X, ids=[f"Pow{v}-{dtype_id(d)}" for v, d in POW_BAD_X]
)
def test_pow_rejects_base_dtype(version, dtype):
    x = np.ones((2, 3), dtype=dtype)
    # at Pow-1/7 the exponent must match X anyway; give it X's dtype so only T is wrong
    y = np.ones((2, 3), dtype=dtype if version < 12 else _LEGAL_Y)
    with pytest.raises(TypeError) as excinfo:
        noo.pow(x, y, opset=version)
    assert_dtype_error(excinfo, "Pow", version, dtype, SPEC_POW_TYPES[version][0])


@pytest.mark.parametrize(
    ("version", "dtype"), POW_BAD_Y, ids=[f"Pow{v}-{dtype_id(d)}" for v, d in POW_BAD_Y]
)
def test_pow_rejects_exponent_dtype(version, dtype):
    x = np.ones((2, 3), dtype=_LEGAL_X)
    y = np.ones((2, 3), dtype=dtype)
    with pytest.raises(TypeError) as excinfo:
        noo.pow(x, y, opset=version)
    if version >= 12:  # at Pow-1/7 the error may as well be the X/Y dtype mismatch
        assert_dtype_error(excinfo, "Pow", version, dtype, SPEC_POW_TYPES[version][1])


def _odd_arrays():
    return {
        "bool": np.ones((2, 2), dtype=bool),
        "complex64": np.ones((2, 2), dtype=np.complex64),
        "complex128": np.ones((2, 2), dtype=np.complex128),
        "object": np.ones((2, 2), dtype=object),
        "str": np.full((2, 2), "1"),
        "bytes": np.full((2, 2), b"1"),
        "datetime": np.zeros((2, 2), dtype="datetime64[s]"),
        "float128": np.ones((2, 2), dtype=np.longdouble),
    }


@pytest.mark.parametrize("kind", list(_odd_arrays()))
@pytest.mark.parametrize("opset", [1, 9, None])
def test_matmul_rejects_non_numeric(kind, opset):
    a = _odd_arrays()[kind]
    with pytest.raises(TypeError):
        noo.matmul(a, a, opset=opset)


@pytest.mark.parametrize("kind", list(_odd_arrays()))
@pytest.mark.parametrize("opset", [1, 7, 12, None])
def test_pow_rejects_non_numeric(kind, opset):
    bad = _odd_arrays()[kind]
    good = np.ones((2, 2), dtype=F32)
    with pytest.raises(TypeError):
        noo.pow(bad, good, opset=opset)
    with pytest.raises(TypeError):
        noo.pow(good, bad, opset=opset)


@pytest.mark.parametrize(
    ("da", "db"), [(F32, F64), (F16, F32), (I32, I64), (I64, U32), (F16, BF16), (F64, I64)]
)
def test_matmul_operands_must_share_dtype(da, db):
    with pytest.raises(TypeError):
        noo.matmul(np.ones((2, 2), da), np.ones((2, 2), db))


@pytest.mark.parametrize("version", [1, 7])
@pytest.mark.parametrize(("dx", "dy"), [(F32, F64), (F64, F32), (F16, F32), (F32, F16)])
def test_pow_shared_t_versions_need_equal_dtypes(version, dx, dy):
    with pytest.raises(TypeError):
        noo.pow(np.ones((2, 2), dx), np.ones((2, 2), dy), opset=version)


@pytest.mark.parametrize("version", [12, 13, 15])
def test_pow_mixed_dtypes_are_legal_from_pow12(version):
    result = noo.pow(np.full(3, 2.0, F32), np.full(3, 3, I8), opset=version)
    assert result.dtype == F32 and (result == 8.0).all()


# ------------------------------------------------------------------------------------------
# shapes
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("sa", "sb"),
    [((), ()), ((), (3,)), ((3,), ()), ((), (2, 2)), ((2, 2), ())],
    ids=str,
)
def test_matmul_rejects_rank0(sa, sb):
    with pytest.raises(ValueError):
        noo.matmul(np.ones(sa, F32), np.ones(sb, F32))


MATMUL_MISMATCH = [
    ((3, 4), (5, 6)),
    ((3,), (4,)),
    ((3,), (4, 2)),
    ((2, 3), (4,)),
    ((2, 3, 4), (3, 4, 5)),  # batch 2 vs 3
    ((2, 1, 3, 4), (3, 1, 4, 5)),  # batch (2, 1) vs (3, 1)
    ((2, 3, 4), (2, 5, 4)),
    ((0, 3), (4, 0)),
    ((4, 0, 3), (2, 3, 1)),
]


@pytest.mark.parametrize(("sa", "sb"), MATMUL_MISMATCH, ids=str)
def test_matmul_mismatched_shapes(sa, sb):
    a = np.ones(sa, F32)
    b = np.ones(sb, F32)
    with pytest.raises(ValueError):
        np.matmul(a, b)  # the oracle agrees these do not match
    with pytest.raises(ValueError) as excinfo:
        noo.matmul(a, b)
    assert str(sa) in str(excinfo.value) and str(sb) in str(excinfo.value), str(excinfo.value)


POW_MISMATCH = [((3,), (4,)), ((2, 3), (3, 2)), ((2, 1, 3), (4, 2)), ((0,), (2,)), ((5,), (0, 4))]


@pytest.mark.parametrize("opset", [7, 12, None])
@pytest.mark.parametrize(("sx", "sy"), POW_MISMATCH, ids=str)
def test_pow_shapes_that_do_not_broadcast(sx, sy, opset):
    with pytest.raises(ValueError) as excinfo:
        noo.pow(np.ones(sx, F32), np.ones(sy, F32), opset=opset)
    assert str(sx) in str(excinfo.value) and str(sy) in str(excinfo.value), str(excinfo.value)


@pytest.mark.parametrize("opset", [7, 12, 13, 15, None])
@pytest.mark.parametrize("attrs", [{"broadcast": 1}, {"broadcast": 0}, {"axis": 0}])
def test_pow_legacy_attributes_after_pow1(attrs, opset):
    x = np.ones((2, 3), F32)
    with pytest.raises(TypeError):
        noo.pow(x, np.ones(3, F32), opset=opset, **attrs)


# ------------------------------------------------------------------------------------------
# opset
# ------------------------------------------------------------------------------------------
BAD_OPSET_VALUES = [0, -1, -100, np.int64(0), np.int32(-3)]
BAD_OPSET_TYPES = ["13", 13.0, 1.5, True, False, np.float64(13.0), np.True_, [13], 13 + 0j]


@pytest.mark.parametrize("opset", BAD_OPSET_VALUES, ids=repr)
def test_opset_below_1_is_a_value_error(opset):
    a = np.ones((2, 2), F32)
    with pytest.raises(ValueError, match="opset must be >= 1"):
        noo.matmul(a, a, opset=opset)
    with pytest.raises(ValueError, match="opset must be >= 1"):
        noo.pow(a, a, opset=opset)
    for op in ("MatMul", "Pow"):
        with pytest.raises(ValueError, match="opset must be >= 1"):
            noo.resolve_version(op, opset)


def _refused_on_every_call(opset, error, message):
    """Both operators (an array and a Python exponent for Pow) and ``resolve_version`` refuse
    ``opset``, on a repeated call too (a kept plan would answer it otherwise)."""
    a = np.ones((2, 2), F32)
    calls = (
        lambda: noo.matmul(a, a, opset=opset),
        lambda: noo.pow(a, a, opset=opset),
        lambda: noo.pow(a, 2.0, opset=opset),
        lambda: noo.resolve_version("MatMul", opset),
        lambda: noo.resolve_version("Pow", opset),
    )
    for _ in range(2):
        for call in calls:
            with pytest.raises(error, match=message):
                call()


@pytest.mark.parametrize("opset", BAD_OPSET_TYPES, ids=repr)
def test_opset_that_is_not_an_integer_is_a_type_error(opset):
    """numpy's convention: a value of the wrong type is a TypeError (a bool is not an opset,
    though Python counts it as an int), whatever its value."""
    message = rf"opset must be an integer or None, got {type(opset).__name__} "
    _refused_on_every_call(opset, TypeError, message)


@pytest.mark.parametrize("kind", [np.int8, np.int64, np.uint8, np.uint64], ids=dtype_id)
def test_numpy_integer_opsets_are_accepted(kind):
    a = np.full((2, 2), 2, I32)
    assert noo.matmul(a, a, opset=kind(9)).tolist() == [[8, 8], [8, 8]]
    with pytest.raises(TypeError, match="MatMul-1"):
        noo.matmul(a, a, opset=kind(8))
    assert noo.pow(a, a, opset=kind(12)).tolist() == [[4, 4], [4, 4]]
    with pytest.raises(TypeError, match="Pow-7"):
        noo.pow(a, a, opset=kind(11))


def test_opset_above_the_newest_known_is_refused():
    """A later opset may define a new MatMul or Pow: it is refused on every call (a repeated
    call would find a kept plan if the first one made one), naming it and the newest known."""
    newest = noo.NEWEST_OPSET
    for opset in (newest + 1, newest + 70, 2**63, np.int64(newest + 1), np.int64(2**63 - 1)):
        _refused_on_every_call(opset, ValueError, rf"opset {opset} .*opset {newest}\b")


def test_the_newest_known_opset_runs():
    a = np.full((2, 2), 2.0, F32)
    assert noo.matmul(a, a, opset=noo.NEWEST_OPSET).tolist() == [[8.0, 8.0], [8.0, 8.0]]
    assert noo.pow(a, a, opset=noo.NEWEST_OPSET).tolist() == [[4.0, 4.0], [4.0, 4.0]]


# ------------------------------------------------------------------------------------------
# out=
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(2, 2), (4, 3, 1), (12,), (3, 4, 1), ()], ids=str)
def test_matmul_out_wrong_shape(shape):
    a = np.ones((3, 5), F32)
    b = np.ones((5, 4), F32)
    out, saved = sentinel_out(shape, F32)
    with pytest.raises(ValueError):
        noo.matmul(a, b, out=out)
    assert_untouched(out, saved)


@pytest.mark.parametrize("dtype", [F64, F16, I32, BF16], ids=dtype_id)
def test_matmul_out_wrong_dtype(dtype):
    a = np.ones((3, 5), F32)
    b = np.ones((5, 4), F32)
    out, saved = sentinel_out((3, 4), dtype)
    with pytest.raises(TypeError):
        noo.matmul(a, b, out=out)
    assert_untouched(out, saved)


@pytest.mark.parametrize("shape", [(3,), (2, 1), (1, 2, 3), (6,)], ids=str)
def test_pow_out_wrong_shape(shape):
    x = np.ones((2, 3), F32)
    out, saved = sentinel_out(shape, F32)
    with pytest.raises(ValueError):
        noo.pow(x, np.float32(2), out=out)
    assert_untouched(out, saved)
    with pytest.raises(ValueError):
        noo.pow(x, np.ones((2, 3), F32), opset=1, out=out)
    assert_untouched(out, saved)


@pytest.mark.parametrize(("xdtype", "outdtype"), [(F32, F64), (I32, I64), (F16, F32), (I64, F64)])
def test_pow_out_wrong_dtype(xdtype, outdtype):
    x = np.ones((2, 3), xdtype)
    out, saved = sentinel_out((2, 3), outdtype)
    with pytest.raises(TypeError):
        noo.pow(x, np.ones((2, 3), I64), out=out)
    assert_untouched(out, saved)


def test_out_untouched_when_inputs_fail():
    out, saved = sentinel_out((2, 2), F32)
    cases = [
        lambda: noo.matmul(np.ones((2, 3), F32), np.ones((4, 2), F32), out=out),  # shapes
        lambda: noo.matmul(np.ones((2, 2), I8), np.ones((2, 2), I8), out=out),  # dtype
        lambda: noo.matmul(np.ones((2, 2), F32), np.ones((2, 2), F64), out=out),  # mismatch
        lambda: noo.matmul(np.ones((2, 2), F32), np.ones((2, 2), F32), opset=0, out=out),
        lambda: noo.pow(np.ones((2, 2), F32), np.ones((3,), F32), out=out),  # shapes
        lambda: noo.pow(np.ones((2, 2), F32), np.ones((2,), F32), opset=1, out=out),  # Pow-1
        lambda: noo.pow(np.ones((2, 2), F32), np.ones((2, 2), F64), opset=7, out=out),
        lambda: noo.pow(np.ones((2, 2), F32), np.ones((2, 2), BF16), opset=13, out=out),
        lambda: noo.pow(np.ones((2, 2), F32), np.ones((2, 2), F32), opset=7, axis=0, out=out),
        lambda: noo.pow(np.ones((2, 2), F32), np.ones((2, 2), F32), opset="x", out=out),
    ]
    for call in cases:
        with pytest.raises((TypeError, ValueError)):
            call()
        assert_untouched(out, saved)


def test_matmul_out_of_the_right_kind_after_errors_still_works():
    a = np.arange(6, dtype=F32).reshape(2, 3)
    out, _ = sentinel_out((2, 2), F32)
    with pytest.raises(ValueError):
        noo.matmul(a, np.ones((4, 2), F32), out=out)
    assert noo.matmul(a, a.T.copy(), out=out) is out
    assert (out == np.array([[5.0, 14.0], [14.0, 50.0]], F32)).all()


@pytest.mark.parametrize(
    ("op", "opset", "dtype", "operand", "label"),
    [
        ("MatMul", 8, I32, "A", "MatMul-1"),
        ("MatMul", 12, BF16, "A", "MatMul-9"),
        ("Pow", 6, I32, "X", "Pow-1"),
        ("Pow", 11, I64, "X", "Pow-7"),
        ("Pow", 12, BF16, "X", "Pow-12"),
        ("Pow", 14, BF16, "Y", "Pow-13"),
    ],
    ids=str,
)
def test_dtype_error_names_the_resolved_version(op, opset, dtype, operand, label):
    bad = np.ones((2, 2), dtype)
    good = np.ones((2, 2), F32)
    with pytest.raises(TypeError) as excinfo:
        if op == "MatMul":
            noo.matmul(bad, bad, opset=opset)
        elif operand == "X":
            noo.pow(bad, bad if opset < 12 else good, opset=opset)
        else:
            noo.pow(good, bad, opset=opset)
    assert label in str(excinfo.value), str(excinfo.value)


@pytest.mark.parametrize("opset", [12, 13, 15, None])
@pytest.mark.parametrize("value", [2**63, 2**100, -(2**63) - 1], ids=["2^63", "2^100", "-2^63-1"])
def test_python_int_outside_int64_is_an_overflow_error(value, opset):
    # From Pow-12 on a Python int operand becomes int64: one outside it has no dtype to take.
    version = noo.resolve_version("Pow", opset)
    for x, y, name in ((np.ones(3, F32), value, "Y"), (value, np.ones(3, I64), "X")):
        with pytest.raises(OverflowError, match=f"Pow-{version}: {name} = {value} .*int64"):
            noo.pow(x, y, opset=opset)
    # int64's own ends are exponents like any other
    assert noo.pow(np.ones(3, F32), 2**63 - 1, opset=opset).tolist() == [1.0] * 3
    assert noo.pow(np.ones(3, F32), -(2**63), opset=opset).tolist() == [1.0] * 3


@pytest.mark.parametrize("opset", [1, 7])
def test_python_int_takes_the_shared_dtype_at_pow1_and_pow7(opset):
    x = np.full(3, 2.0, F32)
    assert np.isinf(noo.pow(x, 2**100, opset=opset)).all()  # 2**100 as float32, then x ** it


@pytest.mark.parametrize(
    ("value", "shown"), [(None, "got None"), ([1, None, 2], "got list [1, None, 2]")]
)
def test_values_that_are_not_numbers_are_named(value, shown):
    good = np.ones((2, 2), F32)
    for call, name in (
        (lambda: noo.matmul(value, good), "MatMul-13: A"),
        (lambda: noo.matmul(good, value), "MatMul-13: B"),
        (lambda: noo.pow(value, 2.0), "Pow-15: X"),
        (lambda: noo.pow(good, value), "Pow-15: Y"),
    ):
        with pytest.raises(TypeError) as excinfo:
            call()
        message = str(excinfo.value)
        assert message.startswith(f"{name} must be an array of numbers, {shown}"), message
        assert "dtype object" not in message


@pytest.mark.parametrize("broadcast", [0, 1])
def test_pow1_attributes_at_later_versions_are_type_errors_even_zero(broadcast):
    # The documented default is the attribute's absence (None), not 0: an ONNX node of a
    # version without the attribute that carries one is invalid, whatever its value.
    x = np.ones((2, 3), F32)
    assert noo.pow(x, x, broadcast=None).shape == (2, 3)
    with pytest.raises(TypeError, match="only in Pow-1"):
        noo.pow(x, x, broadcast=broadcast)
