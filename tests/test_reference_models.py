"""numba_onnx_ops.reference: whole exporter-shaped models on onnx's reference evaluator with our
MatMul and Pow, against the plain reference evaluator and onnxruntime, at opsets 11, 13 and 18.

Also a speed measurement (not a test): ``python tests/test_reference_models.py --help``.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Callable

import numpy as np
import pytest
from oracles import assert_within_ulp, pow_float_exact

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from numba_onnx_ops import reference  # noqa: E402

OPSETS = (11, 13, 18)

# float32 models whose values are O(1) (atol covers results near 0: a 256-term float32 dot
# differs by ~1e-6 between summation orders).  Against the plain evaluator only MatMul's summation
# order and Pow's last ulp differ; onnxruntime also has its own tanh, exp and softmax.
TOLERANCE_REFERENCE = {"rtol": 1e-5, "atol": 1e-5}
TOLERANCE_ONNXRUNTIME = {"rtol": 1e-4, "atol": 1e-5}

# ---------------------------------------------------------------------------------------------
# Models shaped like what exporters (torch.onnx) produce: weights as initializers, scalars as
# Constant nodes, symbolic batch dimensions.
# ---------------------------------------------------------------------------------------------


def _constant(name: str, value: float | list[int], dtype=np.float32) -> onnx.NodeProto:
    return helper.make_node(
        "Constant",
        [],
        [name],
        value=numpy_helper.from_array(np.asarray(value, dtype=dtype), name),
    )


def _model(nodes, inputs, outputs, initializers, opset: int, name: str) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, name, inputs, outputs, initializer=initializers)
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="numba_onnx_ops-tests"
    )
    # onnxruntime 1.32 reads IR versions up to 11; opset 18 needs IR >= 8.
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def mlp_gelu(opset: int, d_in: int = 64, d_hidden: int = 256, seed: int = 0) -> onnx.ModelProto:
    """Two linear layers with a tanh-approximated GELU between them:
    ``gelu(h) = 0.5 h (1 + tanh(sqrt(2/pi) (h + 0.044715 h^3)))``, with ``h^3`` as Pow(h, 3)."""
    rng = np.random.default_rng(seed)
    w1 = (rng.standard_normal((d_in, d_hidden)) / math.sqrt(d_in)).astype(np.float32)
    b1 = (0.1 * rng.standard_normal(d_hidden)).astype(np.float32)
    w2 = (rng.standard_normal((d_hidden, d_in)) / math.sqrt(d_hidden)).astype(np.float32)
    b2 = (0.1 * rng.standard_normal(d_in)).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "fc1.weight"], ["fc1_mm"]),
        helper.make_node("Add", ["fc1_mm", "fc1.bias"], ["h"]),
        _constant("three", 3.0),
        helper.make_node("Pow", ["h", "three"], ["h_cubed"]),
        _constant("coeff", 0.044715),
        helper.make_node("Mul", ["h_cubed", "coeff"], ["h_cubed_scaled"]),
        helper.make_node("Add", ["h", "h_cubed_scaled"], ["inner"]),
        _constant("sqrt_2_over_pi", math.sqrt(2.0 / math.pi)),
        helper.make_node("Mul", ["inner", "sqrt_2_over_pi"], ["inner_scaled"]),
        helper.make_node("Tanh", ["inner_scaled"], ["tanh"]),
        _constant("one", 1.0),
        helper.make_node("Add", ["tanh", "one"], ["one_plus_tanh"]),
        helper.make_node("Mul", ["h", "one_plus_tanh"], ["h_gate"]),
        _constant("half", 0.5),
        helper.make_node("Mul", ["h_gate", "half"], ["gelu"]),
        helper.make_node("MatMul", ["gelu", "fc2.weight"], ["fc2_mm"]),
        helper.make_node("Add", ["fc2_mm", "fc2.bias"], ["y"]),
    ]
    return _model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", d_in])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", d_in])],
        [
            numpy_helper.from_array(w1, "fc1.weight"),
            numpy_helper.from_array(b1, "fc1.bias"),
            numpy_helper.from_array(w2, "fc2.weight"),
            numpy_helper.from_array(b2, "fc2.bias"),
        ],
        opset,
        "mlp_gelu",
    )


def layer_norm(opset: int, d: int = 64, seed: int = 1) -> onnx.ModelProto:
    """LayerNorm over the last axis, decomposed the way exporters write it:
    ReduceMean, Sub, Pow(., 2), ReduceMean, Add(eps), Sqrt, Div, Mul(gamma), Add(beta)."""
    rng = np.random.default_rng(seed)
    gamma = (1.0 + 0.1 * rng.standard_normal(d)).astype(np.float32)
    beta = (0.1 * rng.standard_normal(d)).astype(np.float32)

    def reduce_mean(x: str, y: str) -> list[onnx.NodeProto]:
        # ReduceMean-18 takes the axes as an input; earlier versions as an attribute.
        if opset >= 18:
            return [helper.make_node("ReduceMean", [x, "axes"], [y], keepdims=1)]
        return [helper.make_node("ReduceMean", [x], [y], axes=[-1], keepdims=1)]

    nodes = [
        *([_constant("axes", [-1], np.int64)] if opset >= 18 else []),
        *reduce_mean("x", "mean"),
        helper.make_node("Sub", ["x", "mean"], ["centered"]),
        _constant("two", 2.0),
        helper.make_node("Pow", ["centered", "two"], ["squared"]),
        *reduce_mean("squared", "variance"),
        _constant("eps", 1e-5),
        helper.make_node("Add", ["variance", "eps"], ["variance_eps"]),
        helper.make_node("Sqrt", ["variance_eps"], ["std"]),
        helper.make_node("Div", ["centered", "std"], ["normalized"]),
        helper.make_node("Mul", ["normalized", "ln.weight"], ["scaled"]),
        helper.make_node("Add", ["scaled", "ln.bias"], ["y"]),
    ]
    return _model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", d])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", d])],
        [numpy_helper.from_array(gamma, "ln.weight"), numpy_helper.from_array(beta, "ln.bias")],
        opset,
        "layer_norm",
    )


def attention(opset: int, heads: int = 4, d_head: int = 16) -> onnx.ModelProto:
    """Scaled dot-product attention on [batch, heads, seq, d_head] tensors: the scores are a 4-D
    batched MatMul of Q and K^T, then Softmax and a second 4-D MatMul with V."""
    shape = ["batch", heads, "seq", d_head]
    nodes = [
        helper.make_node("Transpose", ["k"], ["k_t"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["q", "k_t"], ["scores"]),
        _constant("scale", math.sqrt(d_head)),
        helper.make_node("Div", ["scores", "scale"], ["scores_scaled"]),
        helper.make_node("Softmax", ["scores_scaled"], ["weights"], axis=-1),
        helper.make_node("MatMul", ["weights", "v"], ["y"]),
    ]
    return _model(
        nodes,
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in ("q", "k", "v")],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
        [],
        opset,
        "attention",
    )


def _feeds(name: str, batch: int = 8, seq: int = 16, seed: int = 2) -> dict[str, np.ndarray]:
    """Inputs for the model ``name`` (model default sizes)."""
    rng = np.random.default_rng(seed)
    if name == "mlp_gelu":
        return {"x": rng.standard_normal((batch, 64)).astype(np.float32)}
    if name == "layer_norm":
        return {"x": (3.0 + 2.0 * rng.standard_normal((batch, seq, 64))).astype(np.float32)}
    return {n: rng.standard_normal((batch, 4, seq, 16)).astype(np.float32) for n in "qkv"}


MODELS: dict[str, Callable[[int], onnx.ModelProto]] = {
    "mlp_gelu": mlp_gelu,
    "layer_norm": layer_norm,
    "attention": attention,
}

# Default-domain opset -> (MatMul version, Pow version), as the spec resolves them.
EXPECTED_VERSIONS = {11: (9, 7), 13: (13, 13), 18: (13, 15)}

# ---------------------------------------------------------------------------------------------
# Whole models
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("opset", OPSETS)
@pytest.mark.parametrize("name", sorted(MODELS))
def test_model_matches_reference_and_onnxruntime(name, opset):
    model = MODELS[name](opset)
    feeds = _feeds(name)

    ours = ReferenceEvaluator(model, new_ops=reference.OPS)
    ported = [node for node in ours.rt_nodes_ if type(node) in reference.OPS]
    assert ported, "the evaluator did not pick numba_onnx_ops' operators"
    assert {node.op_type for node in ported} == {
        n.op_type for n in model.graph.node if n.op_type in ("MatMul", "Pow")
    }
    matmul_version, pow_version = EXPECTED_VERSIONS[opset]
    for node in ported:
        assert node.since_version == (matmul_version if node.op_type == "MatMul" else pow_version)

    (got,) = ours.run(None, feeds)
    (plain,) = ReferenceEvaluator(model).run(None, feeds)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    (runtime,) = session.run(None, feeds)

    assert got.dtype == np.float32 and got.shape == plain.shape == runtime.shape
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, plain, **TOLERANCE_REFERENCE)
    np.testing.assert_allclose(got, runtime, **TOLERANCE_ONNXRUNTIME)


# ---------------------------------------------------------------------------------------------
# Opset-dependent behaviour inside the evaluator
# ---------------------------------------------------------------------------------------------


def _one_node_model(op: str, feeds: dict[str, np.ndarray], opset: int, **attrs):
    inputs = [
        helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
        for k, v in feeds.items()
    ]
    x = next(iter(feeds.values()))
    node = helper.make_node(op, list(feeds), ["z"], name=f"{op.lower()}0", **attrs)
    out = helper.make_tensor_value_info("z", helper.np_dtype_to_tensor_dtype(x.dtype), None)
    out.type.tensor_type.shape.SetInParent()
    for i in range(x.ndim):
        out.type.tensor_type.shape.dim.add().dim_param = f"z{i}"
    graph = helper.make_graph([node], "g", inputs, [out])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize(
    ("y_shape", "attrs"),
    [((), {"broadcast": 1}), ((4, 5), {"broadcast": 1}), ((3, 4), {"broadcast": 1, "axis": 1})],
)
def test_pow1_attributes_reach_the_kernel(y_shape, attrs):
    rng = np.random.default_rng(3)
    x = rng.uniform(0.5, 2.0, (2, 3, 4, 5)).astype(np.float32)
    y = rng.uniform(-2.0, 2.0, y_shape).astype(np.float32)
    model = _one_node_model("Pow", {"x": x, "y": y}, 6, **attrs)
    sess = ReferenceEvaluator(model, new_ops=reference.OPS)
    assert sess.rt_nodes_[0].since_version == 1
    (z,) = sess.run(None, {"x": x, "y": y})
    start = x.ndim - y.ndim if "axis" not in attrs else attrs["axis"]
    y_aligned = y.reshape(y.shape + (1,) * (x.ndim - start - y.ndim))
    assert_within_ulp(z, pow_float_exact(x, y_aligned), np.float32)


def test_pow1_without_broadcast_refuses_other_shapes():
    x = np.ones((2, 3), np.float32)
    y = np.ones((3,), np.float32)
    sess = ReferenceEvaluator(_one_node_model("Pow", {"x": x, "y": y}, 6), new_ops=reference.OPS)
    with pytest.raises(ValueError):
        sess.run(None, {"x": x, "y": y})


def test_pow_attributes_refused_after_pow1():
    x = np.ones((2, 3), np.float32)
    model = _one_node_model("Pow", {"x": x, "y": x}, 11, broadcast=1)
    with pytest.raises(ValueError, match=r"Pow-7 node 'pow0' has attribute 'broadcast'.*Pow-1"):
        ReferenceEvaluator(model, new_ops=reference.OPS)


@pytest.mark.parametrize(
    ("op", "x", "y", "allowed_opset"),
    [
        ("Pow", np.arange(-3, 4, dtype=np.int64), np.arange(7, dtype=np.int64), 12),
        ("Pow", np.arange(-3, 4, dtype=np.int32), np.full(7, 2, np.int8), 12),
        ("MatMul", np.arange(6, dtype=np.int32).reshape(2, 3), np.ones((3, 2), np.int32), 9),
    ],
)
def test_integer_types_follow_the_model_opset(op, x, y, allowed_opset):
    feeds = {"x": x, "y": y}
    (z,) = ReferenceEvaluator(_one_node_model(op, feeds, allowed_opset), new_ops=reference.OPS).run(
        None, feeds
    )
    (plain,) = ReferenceEvaluator(_one_node_model(op, feeds, allowed_opset)).run(None, feeds)
    assert z.dtype == x.dtype
    np.testing.assert_array_equal(z, plain)

    older = ReferenceEvaluator(_one_node_model(op, feeds, allowed_opset - 1), new_ops=reference.OPS)
    # OpRun.run would replace the kernel's TypeError by its generic "Issues with types ...": the
    # message raised must be ours, naming the node, the opset and the refused dtype.
    with pytest.raises(TypeError) as info:
        older.run(None, feeds)
    message = str(info.value)
    assert f"{op} node '{op.lower()}0' at opset {allowed_opset - 1}: {op}-" in message
    assert str(x.dtype) in message and "Issues with types" not in message
    assert f"{op}-" in str(info.value.__cause__)


def test_other_operators_keep_onnx_implementations():
    model = mlp_gelu(13)
    sess = ReferenceEvaluator(model, new_ops=reference.OPS)
    kinds = {node.op_type: type(node).__module__ for node in sess.rt_nodes_}
    assert kinds["MatMul"] == kinds["Pow"] == "numba_onnx_ops.integrations.onnx_evaluator"
    assert kinds["Tanh"].startswith("onnx.reference")


def test_eval_classmethod_runs_newest_version():
    x = np.array([1.0, 2.0, 3.0], np.float32)
    np.testing.assert_array_equal(reference.Pow.eval(x, np.float32(2.0)), [1.0, 4.0, 9.0])
    a = np.arange(6, dtype=np.int64).reshape(2, 3)
    np.testing.assert_array_equal(reference.MatMul.eval(a, a.T), a @ a.T)


# ---------------------------------------------------------------------------------------------
# Speed: reference evaluator with and without our operators (run as a script, not a test)
# ---------------------------------------------------------------------------------------------


def measure_speedup(
    model: onnx.ModelProto, feeds: dict[str, np.ndarray], runs: int = 7, warmup: int = 2
) -> tuple[float, float]:
    """Median seconds per ``run`` of the plain evaluator and of the one with our operators.

    Both evaluators are timed interleaved in this one process (alternating which goes first),
    after ``warmup`` untimed runs each, so numba's compilation is excluded and drifts in machine
    load hit both alike.
    """
    plain = ReferenceEvaluator(model)
    ours = ReferenceEvaluator(model, new_ops=reference.OPS)
    for _ in range(warmup):
        plain.run(None, feeds)
        ours.run(None, feeds)
    times: dict[str, list[float]] = {"plain": [], "ours": []}
    for i in range(runs):
        order = [("plain", plain), ("ours", ours)]
        for key, sess in order if i % 2 == 0 else order[::-1]:
            start = time.perf_counter()
            sess.run(None, feeds)
            times[key].append(time.perf_counter() - start)
    return statistics.median(times["plain"]), statistics.median(times["ours"])


def _main() -> None:
    parser = argparse.ArgumentParser(description=measure_speedup.__doc__)
    parser.add_argument("--model", choices=sorted(MODELS), default="mlp_gelu")
    parser.add_argument("--opset", type=int, default=18)
    parser.add_argument("--batch", type=int, default=4096)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    model = MODELS[args.model](args.opset)
    feeds = _feeds(args.model, batch=args.batch, seq=args.seq)
    plain, ours = measure_speedup(model, feeds, runs=args.runs)
    shapes = ", ".join(f"{k}{list(v.shape)}" for k, v in feeds.items())
    print(
        f"{args.model} opset {args.opset} ({shapes}), median of {args.runs}: "
        f"plain {plain * 1e3:.2f} ms, with numba_onnx_ops {ours * 1e3:.2f} ms, "
        f"speed-up x{plain / ours:.2f}"
    )


if __name__ == "__main__":
    _main()
