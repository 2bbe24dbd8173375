"""numba_onnx_ops.backend: onnx's own backend test cases for MatMul and Pow, and the backend's
handling of opsets, attributes, inputs and errors."""

from __future__ import annotations

import re
import subprocess
import sys
import unittest
import warnings

import hypothesis.extra.numpy as hnp
import hypothesis.strategies as st
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from oracles import assert_within_ulp, pow_float_exact

pytest.importorskip("onnx")

import onnx  # noqa: E402
import onnx.backend.test  # noqa: E402
import onnx_suite  # noqa: E402, F401 - (onnx's node cases without pooling)
from onnx import helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import numba_onnx_ops  # noqa: E402
import numba_onnx_ops.reference  # noqa: E402
from numba_onnx_ops.backend import Backend, check_node  # noqa: E402

# ---------------------------------------------------------------------------------------------
# onnx's backend test suite, restricted to MatMul and Pow.
# Node cases: test_matmul_* (opset 13) and test_pow_* (opset 15); test_matmulinteger is another
# operator.  test_operator_pow (pytorch-operator set) is Pow-1 at opset 6.
# ---------------------------------------------------------------------------------------------
_INCLUDE = (r"^test_(matmul|pow)", r"^test_operator_pow_")
_EXCLUDE = (r"^test_matmulinteger",)

with warnings.catch_warnings():
    # Building onnx's node cases runs its own numpy code, which warns (log(0), casts) at import.
    warnings.simplefilter("ignore", RuntimeWarning)
    backend_test = onnx.backend.test.BackendTest(Backend, __name__)
for _pattern in _INCLUDE:
    backend_test.include(_pattern)
for _pattern in _EXCLUDE:
    backend_test.exclude(_pattern)

_BACKEND_CASES = backend_test.test_cases
# Drop the ~4000 cases of other operators instead of reporting each as skipped; the excluded and
# the CUDA cases stay, skipped with their reason.
for _case in _BACKEND_CASES.values():
    for _name in unittest.defaultTestLoader.getTestCaseNames(_case):
        if (
            getattr(getattr(_case, _name), "__unittest_skip_why__", "")
            == "no matched include pattern"
        ):
            delattr(_case, _name)
del _case, _name
globals().update(_BACKEND_CASES)


def _enabled_backend_tests() -> dict[str, list[str]]:
    """Category -> names of the cases that are not skipped by the include/exclude filters or
    by the device (CUDA cases skip themselves)."""
    enabled: dict[str, list[str]] = {}
    for category, case in _BACKEND_CASES.items():
        names = [
            name
            for name in unittest.defaultTestLoader.getTestCaseNames(case)
            if not getattr(getattr(case, name), "__unittest_skip__", False)
        ]
        if names:
            enabled[category] = names
    return enabled


def test_backend_suite_selects_matmul_and_pow_cases():
    # Guards against a filter typo silently leaving the suite empty, and against including a
    # case that needs another operator.
    enabled = _enabled_backend_tests()
    names = {name for names in enabled.values() for name in names}
    assert names, "the include patterns matched no backend test"
    assert all(name.endswith("_cpu") for name in names)
    assert {
        "test_matmul_2d_cpu",
        "test_matmul_bcast_cpu",
        "test_matmul_1d_1d_cpu",
        "test_pow_cpu",
        "test_pow_bcast_array_cpu",
        "test_pow_types_int32_float32_cpu",
        "test_operator_pow_cpu",
    } <= names
    assert "test_matmulinteger_cpu" not in names
    assert len(names) >= 20
    assert set(enabled) == {"OnnxBackendNodeModelTest", "OnnxBackendPyTorchOperatorModelTest"}


def test_backend_suite_cases_use_only_matmul_and_pow():
    from onnx.backend.test.loader import load_model_tests

    selected = [
        case
        for kind in ("node", "pytorch-operator")
        for case in load_model_tests(kind=kind)
        # The runner matches the patterns against the per-device names, e.g. "test_pow_cpu".
        if any(re.search(p, f"{case.name}_cpu") for p in _INCLUDE)
        and not any(re.search(p, f"{case.name}_cpu") for p in _EXCLUDE)
    ]
    assert len(selected) >= 20
    for case in selected:
        model = case.model if case.model is not None else onnx.load(f"{case.model_dir}/model.onnx")
        assert Backend.is_compatible(model), case.name
        assert {node.op_type for node in model.graph.node} <= {"MatMul", "Pow"}


# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------


def _value_info(name: str, dtype: np.dtype | type, shape) -> onnx.ValueInfoProto:
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    value_info = helper.make_tensor_value_info(name, elem, shape)
    if shape is not None:
        # make_tensor_value_info leaves a rank-0 shape unset, which means "unknown rank".
        value_info.type.tensor_type.shape.SetInParent()
    return value_info


def _model(nodes, inputs, outputs, opset: int, initializers=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _binary_model(op: str, x: np.ndarray, y: np.ndarray, opset: int, **attrs) -> onnx.ModelProto:
    """A one-node model ``z = op(x, y)`` whose inputs have the dtypes and shapes of ``x``, ``y``."""
    node = helper.make_node(op, ["x", "y"], ["z"], name=f"{op.lower()}0", **attrs)
    z_shape = [f"z{i}" for i in range(max(x.ndim, y.ndim))]
    return _model(
        [node],
        [_value_info("x", x.dtype, x.shape), _value_info("y", y.dtype, y.shape)],
        [_value_info("z", x.dtype, z_shape)],
        opset,
    )


_rng = np.random.default_rng(20261129)


def _floats(*shape, dtype=np.float32) -> np.ndarray:
    return _rng.uniform(0.5, 2.0, size=shape).astype(dtype)


# ---------------------------------------------------------------------------------------------
# Running models and nodes
# ---------------------------------------------------------------------------------------------


def test_import_numba_onnx_ops_does_not_import_onnx():
    code = "import sys, numba_onnx_ops; sys.exit('onnx' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


# Makes onnx unimportable in a fresh interpreter, as if it were not installed.
_WITHOUT_ONNX = """
import sys

class NoOnnx:
    def find_spec(self, name, path=None, target=None):
        if name == "onnx" or name.startswith("onnx."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)

sys.meta_path.insert(0, NoOnnx())
import numba_onnx_ops
try:
    import {module}
except ImportError as error:
    print(type(error).__name__, error)
"""


@pytest.mark.parametrize("module", ["numba_onnx_ops.backend", "numba_onnx_ops.reference"])
def test_import_without_onnx_says_what_to_install(module):
    code = _WITHOUT_ONNX.replace("{module}", module)
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    # An ImportError (not ModuleNotFoundError: the package is installed) naming the extra.
    assert result.stdout.startswith("ImportError "), result.stdout
    assert "pip install 'numba_onnx_ops[onnx]'" in result.stdout


def test_devices():
    assert Backend.supports_device("CPU")
    assert not Backend.supports_device("CUDA")
    assert not Backend.supports_device("TPU")
    model = _binary_model("MatMul", _floats(2, 2), _floats(2, 2), 13)
    with pytest.raises(ValueError, match="CPU only"):
        Backend.prepare(model, "CUDA")


def test_run_model_chains_nodes_and_reads_initializers():
    # z = (x @ w) ** 2, with w and the exponent as initializers.
    w = _floats(4, 3)
    two = np.array(2.0, dtype=np.float32)
    model = _model(
        [
            helper.make_node("MatMul", ["x", "w"], ["xw"]),
            helper.make_node("Pow", ["xw", "two"], ["z"]),
        ],
        [_value_info("x", np.float32, [5, 4])],
        [_value_info("z", np.float32, [5, 3])],
        13,
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(two, "two")],
    )
    x = _floats(5, 4)
    expected = np.matmul(x, w) ** 2
    rep = Backend.prepare(model)
    assert rep.input_names == ["x"] and rep.output_names == ["z"]
    for inputs in ([x], (x,), {"x": x}, x):
        (z,) = rep.run(inputs)
        np.testing.assert_allclose(z, expected, rtol=1e-6)
    assert rep.run([x])["z"].dtype == np.float32
    (z,) = Backend.run_model(model, [x])
    np.testing.assert_allclose(z, expected, rtol=1e-6)
    (z,) = Backend.prepare(model.SerializeToString()).run([x])
    np.testing.assert_allclose(z, expected, rtol=1e-6)


@given(
    shapes=hnp.mutually_broadcastable_shapes(
        signature="(m?,n),(n,p?)->(m?,p?)", max_dims=4, min_side=0, max_side=4
    ),
    opset=st.sampled_from([9, 13, 18]),
)
def test_run_node_matmul_shapes_like_numpy(shapes, opset):
    # int64: exact results, so any shape-handling slip shows as a mismatch.
    a_shape, b_shape = shapes.input_shapes
    rng = np.random.default_rng(len(a_shape) * 10 + len(b_shape))
    a = rng.integers(-9, 9, a_shape, dtype=np.int64)
    b = rng.integers(-9, 9, b_shape, dtype=np.int64)
    node = helper.make_node("MatMul", ["a", "b"], ["c"])
    (c,) = Backend.run_node(node, [a, b], opset_version=opset)
    np.testing.assert_array_equal(c, np.matmul(a, b))
    assert c.dtype == np.int64


def test_run_node_follows_opset_version():
    node = helper.make_node("Pow", ["x", "y"], ["z"])
    x = np.array([1, 2, 3], dtype=np.int64)
    y = np.array([3, 2, 1], dtype=np.int64)
    (z,) = Backend.run_node(node, [x, y], opset_version=13)
    np.testing.assert_array_equal(z, [1, 4, 3])
    assert z.dtype == np.int64
    (z,) = Backend.run_node(node, {"x": x, "y": y})  # newest version
    np.testing.assert_array_equal(z, [1, 4, 3])
    with pytest.raises(TypeError, match=r"Pow-7.*int64"):
        Backend.run_node(node, [x, y], opset_version=11)


@pytest.mark.parametrize(
    ("opset", "version"),
    [(1, 1), (6, 1), (7, 7), (11, 7), (12, 12), (13, 13), (14, 13), (15, 15), (18, 15)],
)
def test_pow_version_follows_model_opset(opset, version):
    node = helper.make_node("Pow", ["x", "y"], ["z"])
    assert check_node(node, opset) == version


@pytest.mark.parametrize(("opset", "version"), [(1, 1), (8, 1), (9, 9), (12, 9), (13, 13)])
def test_matmul_version_follows_model_opset(opset, version):
    node = helper.make_node("MatMul", ["a", "b"], ["c"])
    assert check_node(node, opset) == version


@pytest.mark.parametrize(
    ("y_shape", "attrs"),
    [
        ((), {"broadcast": 1}),
        ((1, 1), {"broadcast": 1}),
        ((5,), {"broadcast": 1}),
        ((4, 5), {"broadcast": 1}),
        ((3, 4), {"broadcast": 1, "axis": 1}),
        ((2,), {"broadcast": 1, "axis": 0}),
        ((2, 3, 4, 5), {}),
        ((2, 3, 4, 5), {"broadcast": 0}),
    ],
)
def test_pow1_reads_broadcast_and_axis_from_the_node(y_shape, attrs):
    x = _floats(2, 3, 4, 5)
    y = _floats(*y_shape)
    start = x.ndim - y.ndim if attrs.get("axis") is None else attrs["axis"]
    y_aligned = y if y.size == 1 else y.reshape(y.shape + (1,) * (x.ndim - start - y.ndim))
    model = _binary_model("Pow", x, y, 6, **attrs)
    (z,) = Backend.prepare(model).run([x, y])
    assert z.shape == x.shape and z.dtype == np.float32
    assert_within_ulp(z, pow_float_exact(x, y_aligned), np.float32)


@pytest.mark.parametrize(
    ("y_shape", "attrs"),
    [((3, 4), {"broadcast": 1}), ((1, 5), {"broadcast": 1}), ((5,), {})],
)
def test_pow1_refuses_shapes_its_attributes_do_not_allow(y_shape, attrs):
    x, y = _floats(2, 3, 4, 5), _floats(*y_shape)
    rep = Backend.prepare(_binary_model("Pow", x, y, 6, **attrs))
    with pytest.raises(ValueError, match="node 'pow0' at opset 6"):
        rep.run([x, y])


@pytest.mark.parametrize(
    ("op", "dtype", "allowed_from"),
    [
        ("MatMul", np.int32, 9),
        ("MatMul", np.uint64, 9),
        ("MatMul", ml_dtypes.bfloat16, 13),
        ("Pow", np.int32, 12),
        ("Pow", np.int64, 12),
        ("Pow", ml_dtypes.bfloat16, 13),
    ],
)
def test_dtype_follows_the_version(op, dtype, allowed_from):
    a = np.arange(1, 7).reshape(2, 3).astype(dtype)
    if op == "MatMul":
        b = np.arange(1, 7).reshape(3, 2).astype(dtype)
        expected = np.matmul(a.astype(np.float64), b.astype(np.float64))
    else:
        # Pow-13's exponent type T1 has no bfloat16; the other Pow cases share X's dtype.
        b = np.ones((2, 3), np.float32 if dtype is ml_dtypes.bfloat16 else dtype)
        expected = a.astype(np.float64)
    model = _binary_model(op, a, b, allowed_from)
    (z,) = Backend.prepare(model).run([a, b])
    assert z.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(z.astype(np.float64), expected)

    older = _binary_model(op, a, b, allowed_from - 1)
    version = check_node(older.graph.node[0], allowed_from - 1)
    rep = Backend.prepare(older)
    with pytest.raises(TypeError, match=rf"{op}-{version}") as info:
        rep.run([a, b])
    message = str(info.value)
    assert f"opset {allowed_from - 1}" in message
    assert str(np.dtype(dtype)) in message


# ---------------------------------------------------------------------------------------------
# Clear errors
# ---------------------------------------------------------------------------------------------


def test_unsupported_operator_is_named():
    # An operator neither numba_onnx_ops nor onnx's reference evaluator implements.
    model = _model(
        [
            helper.make_node("MatMul", ["x", "x"], ["y"]),
            helper.make_node("Frobnicate", ["y"], ["z"], name="frob0"),
        ],
        [_value_info("x", np.float32, [2, 2])],
        [_value_info("z", np.float32, [2, 2])],
        13,
    )
    assert not Backend.is_compatible(model)
    with pytest.raises(NotImplementedError, match=r"operator 'Frobnicate' \(node 'frob0'\)"):
        Backend.prepare(model)
    with pytest.raises(NotImplementedError, match="'Frobnicate'"):
        Backend.run_node(model.graph.node[1], [_floats(2, 2)])


def test_operator_of_another_domain_is_named():
    node = helper.make_node("Pow", ["x", "y"], ["z"], domain="com.example")
    with pytest.raises(NotImplementedError, match="'com.example::Pow'"):
        Backend.run_node(node, [_floats(2), _floats(2)])


@pytest.mark.parametrize("inputs", [["x"], ["x", "y", "y"], ["x", ""]])
def test_wrong_input_count(inputs):
    node = helper.make_node("Pow", inputs, ["z"], name="p")
    model = _model(
        [node],
        [_value_info("x", np.float32, [2]), _value_info("y", np.float32, [2])],
        [_value_info("z", np.float32, [2])],
        15,
    )
    with pytest.raises(ValueError, match=r"Pow-15 node 'p' has inputs .*takes exactly 2 \(X, Y\)"):
        Backend.prepare(model)
    with pytest.raises(ValueError, match="takes exactly 2"):
        Backend.run_node(node, [_floats(2)] * len(inputs))


def test_wrong_output_count():
    node = helper.make_node("MatMul", ["a", "b"], ["c", "d"])
    with pytest.raises(ValueError, match="produces exactly 1"):
        Backend.run_node(node, [_floats(2, 2), _floats(2, 2)])


@pytest.mark.parametrize(
    ("opset", "attrs", "message"),
    [
        (13, {"alpha": 1.0}, r"MatMul-13 .* attribute 'alpha', which MatMul-13 does not define"),
        (
            6,
            {"broadcast": 1, "exponent": 2},
            r"Pow-1 .* attribute 'exponent'.*its attributes: axis, broadcast",
        ),
        (11, {"broadcast": 1}, r"Pow-7 .* attribute 'broadcast'.*only in Pow-1"),
        (18, {"axis": 0}, r"Pow-15 .* attribute 'axis'.*only in Pow-1"),
        (6, {"broadcast": 1.0}, r"attribute 'broadcast' must be of type INT, got FLOAT"),
    ],
)
def test_unknown_or_mistyped_attribute(opset, attrs, message):
    op = "Pow" if "broadcast" in attrs or "axis" in attrs else "MatMul"
    model = _binary_model(op, _floats(2), _floats(2), opset, **attrs)
    assert not Backend.is_compatible(model)
    with pytest.raises(ValueError, match=message):
        Backend.prepare(model)
    with pytest.raises(ValueError, match=message):
        Backend.run_node(model.graph.node[0], [_floats(2), _floats(2)], opset_version=opset)


@pytest.mark.parametrize("op", ["MatMul", "Pow"])
def test_model_of_an_opset_newer_than_the_package_knows(op):
    """A later opset may define a new MatMul or Pow: such a model is refused before it runs,
    by the backend and by onnx's evaluator with the package's operators."""
    opset = numba_onnx_ops.NEWEST_OPSET + 1
    x = np.ones((2, 2), np.float32)
    model = _binary_model(op, x, x, opset)
    message = rf"opset {opset} .*opset {opset - 1}\b"
    assert not Backend.is_compatible(model)
    with pytest.raises(ValueError, match=message):
        Backend.prepare(model)
    with pytest.raises(ValueError, match=message):
        Backend.run_node(model.graph.node[0], [x, x], opset_version=opset)
    with pytest.raises(ValueError, match=message):
        ReferenceEvaluator(model, new_ops=numba_onnx_ops.reference.OPS)


def test_shape_mismatch_names_the_node():
    x, y = _floats(2, 3), _floats(4, 2)
    with pytest.raises(ValueError, match="node 'matmul0' at opset 13"):
        Backend.prepare(_binary_model("MatMul", x, y, 13)).run([x, y])


def test_inputs_must_match_the_graph():
    x = _floats(3)
    rep = Backend.prepare(_binary_model("Pow", x, x, 15))
    with pytest.raises(ValueError, match=r"missing model inputs \['y'\]"):
        rep.run([x])
    with pytest.raises(ValueError, match="3 inputs given"):
        rep.run([x, x, x])
    with pytest.raises(ValueError, match=r"unknown model inputs \['w'\]"):
        rep.run({"x": x, "y": x, "w": x})
    with pytest.raises(TypeError, match="model input 'y' must be float32, got float64"):
        rep.run([x, x.astype(np.float64)])


def test_inputs_in_any_form_give_the_same_outputs():
    x, y = _floats(2, 3), _floats(3, 2)
    rep = Backend.prepare(_binary_model("MatMul", x, y, 13))
    want = numba_onnx_ops.matmul(x, y)  # (its bits depend only on the values, in any layout)
    for inputs in ([x, y], (x, y), {"x": x, "y": y}, [np.asfortranarray(x), y[::-1][::-1]]):
        (got,) = rep.run(inputs)
        np.testing.assert_array_equal(got, want)
    with pytest.raises(TypeError, match="model input 'x' must be float32, got float64"):
        rep.run((x.astype(np.float64), y))


def test_model_without_default_opset():
    model = _binary_model("Pow", _floats(2), _floats(2), 15)
    del model.opset_import[:]
    model.opset_import.append(helper.make_opsetid("com.example", 1))
    with pytest.raises(ValueError, match="no opset of the default ONNX domain"):
        Backend.prepare(model)


def test_checker_still_runs():
    # A graph whose node reads a value nothing produces passes our node checks but not onnx's.
    model = _model(
        [helper.make_node("Pow", ["x", "nowhere"], ["z"])],
        [_value_info("x", np.float32, [2])],
        [_value_info("z", np.float32, [2])],
        15,
    )
    with pytest.raises(onnx.checker.ValidationError, match="nowhere"):
        Backend.prepare(model)
