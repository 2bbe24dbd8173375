"""numba_onnx_ops.backend on whole exporter-shaped models: MatMul and Pow on our kernels, every
other operator on onnx's reference implementation, against onnx's ReferenceEvaluator and
onnxruntime.

Each model is checked four ways:

- every MatMul output is within the summation error bound of the float64 (or exact integer)
  product of its actual inputs, every Pow output within 1 ulp of the exact power;
- every value of the graph (all node outputs made graph outputs) is bit-equal to onnx's evaluator
  running the same model with our MatMul and Pow everywhere (``reference.ReferenceEvaluator``):
  the other nodes run the same onnx code on the same inputs, our MatMul and Pow the same kernels
  on the same operands, and the backend wires them the same way, so the bits agree on any CPU;
- the final outputs agree with the plain evaluator (onnx's MatMul and Pow) and with onnxruntime
  within a tolerance derived from the dtype, bit for bit where they compute exactly (integer
  values);
- :meth:`BackendRep.placement` puts MatMul and Pow on numba_onnx_ops, and a spy shows that they
  ran there (onnx's own MatMul and Pow made to fail), through the backend and through the
  evaluator alike.

Also a speed measurement (not a test): ``python tests/test_backend_models.py --help``.
"""

from __future__ import annotations

import argparse
import functools
import gc
import math
import re
import statistics
import time
import unittest
import warnings
import weakref
from collections import Counter
from collections.abc import Callable

import ml_dtypes
import numpy as np
import pytest
from oracles import assert_matmul_close, assert_pow_matches, assert_same_values

pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import onnx  # noqa: E402
import onnx.backend.test  # noqa: E402
import onnx_suite  # noqa: E402, F401 - (onnx's node cases without pooling)
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402
from onnx.reference.op_run import OpRun  # noqa: E402
from onnx.reference.ops import op_matmul, op_pow  # noqa: E402

import numba_onnx_ops  # noqa: E402
from numba_onnx_ops import reference  # noqa: E402
from numba_onnx_ops.backend import Backend  # noqa: E402

OPSETS = (13, 15, 17, 18, 21)
OURS = ("MatMul", "Pow")

# ---------------------------------------------------------------------------------------------
# Building models the way exporters write them: weights as initializers, scalars and shapes as
# Constant nodes, symbolic batch dimensions, Identity for shared tensors.
# ---------------------------------------------------------------------------------------------


class _Builder:
    """Collects nodes and initializers of one graph, naming the values it makes."""

    def __init__(self, opset: int, dtype=np.float32, seed: int = 0) -> None:
        self.opset = opset
        self.dtype = np.dtype(dtype)
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._count = Counter()

    def _name(self, op: str) -> str:
        self._count[op] += 1
        return f"{op.lower()}{self._count[op]}"

    def node(self, op: str, inputs: list[str], **attrs) -> str:
        """Add a node of one output, named as the node; return that name."""
        name = self._name(op)
        self.nodes.append(helper.make_node(op, inputs, [name], name=name, **attrs))
        return name

    def constant(self, value, dtype=None) -> str:
        array = np.asarray(value, dtype=dtype or self.dtype)
        return self.node("Constant", [], value=numpy_helper.from_array(array))

    def weight(self, name: str, shape, scale: float | None = None) -> str:
        scale = 1.0 / math.sqrt(shape[0]) if scale is None else scale
        value = (scale * self.rng.standard_normal(shape)).astype(self.dtype)
        self.initializers.append(numpy_helper.from_array(value, name))
        return name

    def linear(self, x: str, prefix: str, d_in: int, d_out: int) -> str:
        w = self.weight(f"{prefix}.weight", (d_in, d_out))
        b = self.weight(f"{prefix}.bias", (d_out,), scale=0.1)
        return self.node("Add", [self.node("MatMul", [x, w]), b])

    def axes(self, *axes: int) -> str:
        return self.constant(list(axes), np.int64)

    def reduce_mean(self, x: str) -> str:
        # ReduceMean takes its axes as an input from version 18, as an attribute before.
        if self.opset >= 18:
            return self.node("ReduceMean", [x, self.axes(-1)], keepdims=1)
        return self.node("ReduceMean", [x], axes=[-1], keepdims=1)

    def layer_norm_decomposed(self, x: str, prefix: str, d: int) -> str:
        """LayerNorm as exporters wrote it before LayerNormalization-17, with Pow(., 2)."""
        centered = self.node("Sub", [x, self.reduce_mean(x)])
        variance = self.reduce_mean(self.node("Pow", [centered, self.constant(2.0)]))
        std = self.node("Sqrt", [self.node("Add", [variance, self.constant(1e-5)])])
        normalized = self.node("Div", [centered, std])
        gamma = self.weight(f"{prefix}.weight", (d,), scale=0.1)
        beta = self.weight(f"{prefix}.bias", (d,), scale=0.1)
        return self.node("Add", [self.node("Mul", [normalized, gamma]), beta])

    def layer_norm(self, x: str, prefix: str, d: int) -> str:
        if self.opset < 17:
            return self.layer_norm_decomposed(x, prefix, d)
        gamma = self.weight(f"{prefix}.weight", (d,), scale=0.1)
        beta = self.weight(f"{prefix}.bias", (d,), scale=0.1)
        return self.node("LayerNormalization", [x, gamma, beta], axis=-1, epsilon=1e-5)

    def gelu(self, x: str) -> str:
        """GELU: the Gelu operator from opset 20, the exact Erf form before."""
        if self.opset >= 20:
            return self.node("Gelu", [x])
        erf = self.node("Erf", [self.node("Div", [x, self.constant(math.sqrt(2.0))])])
        gate = self.node("Mul", [x, self.node("Add", [erf, self.constant(1.0)])])
        return self.node("Mul", [gate, self.constant(0.5)])

    def model(self, inputs, outputs, name: str, extra_opsets=(), functions=()) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, inputs, outputs, initializer=self.initializers)
        opsets = [helper.make_opsetid("", self.opset), *extra_opsets]
        model = helper.make_model(
            graph,
            opset_imports=opsets,
            producer_name="numba_onnx_ops-tests",
            functions=list(functions),
        )
        # The oldest IR version the opsets allow: onnxruntime reads only so new ones.
        model.ir_version = helper.find_min_ir_version_for(opsets, ignore_unknown=True)
        onnx.checker.check_model(model, full_check=True)
        return model


def _tensor(name: str, dtype, shape) -> onnx.ValueInfoProto:
    elem_type = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    value_info = helper.make_tensor_value_info(name, elem_type, shape)
    # make_tensor_value_info leaves a rank-0 shape unset, which means "unknown rank".
    value_info.type.tensor_type.shape.SetInParent()
    return value_info


def mlp(opset: int, dtype=np.float32, gelu: bool = True) -> onnx.ModelProto:
    """An initializer-heavy MLP: Linear, GELU (Tanh if not ``gelu``), Linear, Relu, an L2
    normalisation with Pow(., 2), a Gemm head (``transB=1``, as exporters write ``nn.Linear`` on
    2-D inputs) and an Identity."""
    b = _Builder(opset, dtype)
    h = b.linear("x", "fc1", 64, 128)
    h = b.gelu(h) if gelu else b.node("Tanh", [h])
    r = b.node("Relu", [b.linear(h, "fc2", 128, 128)])
    squares = b.node("Pow", [r, b.constant(2.0)])
    norm = b.node("Sqrt", [b.node("ReduceSum", [squares, b.axes(-1)], keepdims=1)])
    normalized = b.node("Div", [r, b.node("Add", [norm, b.constant(1e-6)])])
    head_w = b.weight("head.weight", (16, 128))
    head_b = b.weight("head.bias", (16,), scale=0.1)
    logits = b.node("Gemm", [normalized, head_w, head_b], transB=1)
    b.nodes.append(helper.make_node("Identity", [logits], ["y"], name="output"))
    return b.model(
        [_tensor("x", dtype, ["batch", 64])], [_tensor("y", dtype, ["batch", 16])], "mlp"
    )


def attention_block(opset: int, d: int = 32, heads: int = 4) -> onnx.ModelProto:
    """A pre-LayerNorm transformer block: multi-head self-attention with a padding mask (int64,
    Cast to float), then a GELU feed-forward, both with residual connections."""
    b = _Builder(opset, seed=1)
    d_head = d // heads
    ln1 = b.layer_norm("x", "ln1", d)

    def split_heads(x: str, perm: list[int]) -> str:
        shaped = b.node("Reshape", [x, b.constant([0, 0, heads, d_head], np.int64)])
        return b.node("Transpose", [shaped], perm=perm)

    q = split_heads(b.linear(ln1, "q", d, d), [0, 2, 1, 3])
    k_t = split_heads(b.linear(ln1, "k", d, d), [0, 2, 3, 1])
    v = split_heads(b.linear(ln1, "v", d, d), [0, 2, 1, 3])
    scores = b.node("Div", [b.node("MatMul", [q, k_t]), b.constant(math.sqrt(d_head))])
    # mask [batch, seq] of 1 (attend) and 0 (padding) -> additive bias [batch, 1, 1, seq]
    keep = b.node("Cast", ["mask"], to=TensorProto.FLOAT)
    bias = b.node("Mul", [b.node("Sub", [b.constant(1.0), keep]), b.constant(-1e4)])
    bias = b.node("Unsqueeze", [bias, b.axes(1, 2)])
    weights = b.node("Softmax", [b.node("Add", [scores, bias])], axis=-1)
    context = b.node("Transpose", [b.node("MatMul", [weights, v])], perm=[0, 2, 1, 3])
    context = b.node("Reshape", [context, b.constant([0, 0, d], np.int64)])
    residual = b.node("Add", ["x", b.linear(context, "out", d, d)])
    ln2 = b.layer_norm_decomposed(residual, "ln2", d)
    ffn = b.linear(b.gelu(b.linear(ln2, "ffn1", d, 4 * d)), "ffn2", 4 * d, d)
    b.nodes.append(helper.make_node("Add", [residual, ffn], ["y"], name="residual2"))
    return b.model(
        [
            _tensor("x", np.float32, ["batch", "seq", d]),
            _tensor("mask", np.int64, ["batch", "seq"]),
        ],
        [_tensor("y", np.float32, ["batch", "seq", d])],
        "attention_block",
    )


def integer_valued(opset: int) -> onnx.ModelProto:
    """float32 with small integer weights and inputs, so that MatMul and Pow(., 2) are exact in
    any summation order: every contender must agree bit for bit, Softmax included."""
    b = _Builder(opset, seed=2)
    w1 = numpy_helper.from_array(b.rng.integers(-3, 4, (8, 16)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(b.rng.integers(-3, 4, (16, 4)).astype(np.float32), "w2")
    b.initializers += [w1, w2]
    h = b.node("Relu", [b.node("MatMul", ["x", "w1"])])
    s = b.node("MatMul", [b.node("Pow", [h, b.constant(2.0)]), "w2"])
    p = b.node("Softmax", [b.node("Div", [s, b.constant(1000.0)])], axis=-1)
    b.nodes.append(helper.make_node("Transpose", [p], ["y"], perm=[1, 0]))
    return b.model(
        [_tensor("x", np.float32, ["batch", 8])],
        [_tensor("y", np.float32, [4, "batch"])],
        "integer_valued",
    )


def int64_model(opset: int) -> onnx.ModelProto:
    """int64 MatMul and Pow (Pow-12 on) among Add, Reshape, Transpose, Identity and Cast."""
    b = _Builder(opset, np.int64, seed=3)
    w = numpy_helper.from_array(b.rng.integers(-4, 5, (6, 5)), "w")
    bias = numpy_helper.from_array(b.rng.integers(-4, 5, (5,)), "bias")
    b.initializers += [w, bias]
    h = b.node(
        "Pow", [b.node("Add", [b.node("MatMul", ["x", "w"]), "bias"]), b.constant(3, np.int64)]
    )
    flat = b.node("Reshape", [b.node("Transpose", [h], perm=[1, 0]), b.constant([-1], np.int64)])
    b.nodes.append(
        helper.make_node("Cast", [b.node("Identity", [flat])], ["y"], to=TensorProto.DOUBLE)
    )
    return b.model([_tensor("x", np.int64, [3, 6])], [_tensor("y", np.float64, [15])], "int64")


def _body(name, nodes, inputs, outputs) -> onnx.GraphProto:
    return helper.make_graph(nodes, name, inputs, outputs)


def control_flow(opset: int) -> onnx.ModelProto:
    """If, Loop and Scan whose subgraphs run MatMul and Pow on values of the outer graph (graph
    inputs, initializers, and a value a node computes that only the Loop's body reads)."""
    b = _Builder(opset, seed=4)
    w = b.weight("w", (8, 8))
    w_half = b.node("Mul", [w, b.constant(0.5)])
    b.initializers.append(numpy_helper.from_array(np.array(2.0, np.float32), "two"))
    f32 = np.float32
    then_branch = _body(
        "then",
        [helper.make_node("MatMul", ["x", w], ["then_y"])],
        [],
        [_tensor("then_y", f32, ["batch", 8])],
    )
    else_branch = _body(
        "else",
        [helper.make_node("Pow", ["x", "two"], ["else_y"])],
        [],
        [_tensor("else_y", f32, ["batch", 8])],
    )
    chosen = b.node("If", ["flag"], then_branch=then_branch, else_branch=else_branch)
    loop_body = _body(
        "loop_body",
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("MatMul", ["acc_in", w_half], ["acc_mm"]),
            helper.make_node("Tanh", ["acc_mm"], ["acc_out"]),
        ],
        [
            _tensor("i", np.int64, []),
            _tensor("cond_in", np.bool_, []),
            _tensor("acc_in", f32, ["batch", 8]),
        ],
        [
            _tensor("cond_out", np.bool_, []),
            _tensor("acc_out", f32, ["batch", 8]),
        ],
    )
    looped = b.node(
        "Loop", [b.constant(3, np.int64), b.constant(True, np.bool_), chosen], body=loop_body
    )
    scan_body = _body(
        "scan_body",
        [
            helper.make_node("Pow", ["row", "two"], ["row_sq"]),
            helper.make_node("Add", ["state_in", "row_sq"], ["state_out"]),
            helper.make_node("MatMul", ["row", w], ["row_out"]),
        ],
        [
            _tensor("state_in", f32, [8]),
            _tensor("row", f32, [8]),
        ],
        [
            _tensor("state_out", f32, [8]),
            _tensor("row_out", f32, [8]),
        ],
    )
    zeros = b.constant(np.zeros(8))
    b.nodes.append(
        helper.make_node(
            "Scan",
            [zeros, looped],
            ["sum_sq", "rows"],
            name="scan",
            body=scan_body,
            num_scan_inputs=1,
        )
    )
    return b.model(
        [_tensor("x", np.float32, ["batch", 8]), _tensor("flag", np.bool_, [])],
        [_tensor("sum_sq", np.float32, [8]), _tensor("rows", np.float32, ["batch", 8])],
        "control_flow",
    )


def with_function(opset: int) -> onnx.ModelProto:
    """A node of a model-local function (domain ``custom``) whose body has MatMul and Pow, and a
    Scaler of the ``ai.onnx.ml`` domain."""
    body = [
        helper.make_node("MatMul", ["a", "b"], ["ab"]),
        helper.make_node("Pow", ["ab", "e"], ["out"]),
    ]
    function = helper.make_function(
        "custom", "MatMulPow", ["a", "b", "e"], ["out"], body, [helper.make_opsetid("", opset)]
    )
    b = _Builder(opset, seed=5)
    w = b.weight("w", (8, 8))
    b.initializers.append(numpy_helper.from_array(np.array(3.0, np.float32), "three"))
    b.nodes.append(
        helper.make_node("MatMulPow", ["x", w, "three"], ["cubed"], domain="custom", name="fn")
    )
    b.nodes.append(
        helper.make_node(
            "Scaler",
            ["cubed"],
            ["y"],
            domain="ai.onnx.ml",
            name="scaler",
            offset=[0.5],
            scale=[2.0],
        )
    )
    return b.model(
        [_tensor("x", np.float32, ["batch", 8])],
        [_tensor("y", np.float32, ["batch", 8])],
        "with_function",
        extra_opsets=[helper.make_opsetid("custom", 1), helper.make_opsetid("ai.onnx.ml", 3)],
        functions=[function],
    )


def chain(width: int = 64) -> onnx.ModelProto:
    """MatMul -> Pow(., 2) -> MatMul, float32, the weights as initializers (the speed model)."""
    b = _Builder(18, seed=6)
    w1 = b.weight("w1", (width, width))
    w2 = b.weight("w2", (width, width))
    squared = b.node("Pow", [b.node("MatMul", ["x", w1]), b.constant(2.0)])
    b.nodes.append(helper.make_node("MatMul", [squared, w2], ["y"], name="mm_out"))
    return b.model(
        [_tensor("x", np.float32, ["batch", width])],
        [_tensor("y", np.float32, ["batch", width])],
        "chain",
    )


def _feeds(name: str, seed: int = 7) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    if name == "mlp":
        return {"x": rng.standard_normal((5, 64)).astype(np.float32)}
    if name == "attention_block":
        mask = np.ones((3, 10), np.int64)
        mask[1, 7:] = 0
        return {"x": rng.standard_normal((3, 10, 32)).astype(np.float32), "mask": mask}
    if name == "integer_valued":
        return {"x": rng.integers(-3, 4, (6, 8)).astype(np.float32)}
    if name == "int64":
        return {"x": rng.integers(-3, 4, (3, 6))}
    if name == "control_flow":
        return {"x": rng.standard_normal((4, 8)).astype(np.float32), "flag": np.array(True)}
    return {"x": rng.standard_normal((4, 8)).astype(np.float32)}


MODELS: dict[str, Callable[[int], onnx.ModelProto]] = {
    "mlp": mlp,
    "attention_block": attention_block,
    "integer_valued": integer_valued,
    "int64": int64_model,
    "control_flow": control_flow,
    "with_function": with_function,
}

#: Models whose every value onnx's evaluator computes exactly, as we do (the same bits).
EXACT_REFERENCE = ("integer_valued", "int64")
#: Models whose every value onnxruntime computes exactly too (no exp, no division).
EXACT_ONNXRUNTIME = ("int64",)

# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------


def _expose_all(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> onnx.ModelProto:
    """``model`` with every named node output of its graph also a graph output (typed after a
    run of onnx's evaluator: shape inference leaves some values of subgraph nodes untyped)."""
    values = ReferenceEvaluator(model).run(None, feeds, intermediate=True)
    exposed = onnx.ModelProto()
    exposed.CopyFrom(model)
    known = {output.name for output in model.graph.output}
    for node in model.graph.node:
        for name in node.output:
            if name and name not in known:
                shape = [f"{name}_{i}" for i in range(np.ndim(values[name]))]
                exposed.graph.output.append(_tensor(name, values[name].dtype, shape))
                known.add(name)
    return exposed


def _initializers(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def _tolerance(dtype, terms: int) -> dict[str, float]:
    """rtol and atol for results whose values are O(1): the forward error bound of a sum of
    ``terms`` products, ``terms * eps`` (with a factor 4 for the layers and transcendental
    functions the contenders compute their own way)."""
    bound = 4 * terms * float(np.finfo(dtype).eps)
    return {"rtol": bound, "atol": bound}


#: The longest dot product in each float model (MatMul's K, Gemm's, the ReduceSum's).
TERMS = {
    "mlp": 128,
    "attention_block": 128,
    "integer_valued": 16,
    "control_flow": 8,
    "with_function": 8,
}


def _onnxruntime(model: onnx.ModelProto, threads: int = 1) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    return ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )


def _check_matmul_and_pow_nodes(model: onnx.ModelProto, values: dict[str, np.ndarray]) -> int:
    """Check each MatMul and Pow output of the graph against its oracle; return how many."""
    checked = 0
    for node in model.graph.node:
        if node.op_type not in OURS:
            continue
        what = f"{node.op_type} {node.name}"
        a, b = (values[name] for name in node.input)
        if node.op_type == "MatMul":
            assert_matmul_close(values[node.output[0]], a, b, what=what)
        else:
            assert_pow_matches(values[node.output[0]], a, b, what=what)
        checked += 1
    return checked


# ---------------------------------------------------------------------------------------------
# Whole models
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("opset", OPSETS)
@pytest.mark.parametrize("name", sorted(MODELS))
def test_model_matches_onnx_evaluator_and_onnxruntime(name, opset):
    model = MODELS[name](opset)
    feeds = _feeds(name)
    exposed = _expose_all(model, feeds)

    rep = Backend.prepare(exposed)
    got = rep.run(feeds)
    names = rep.output_names
    # 1. Each MatMul and Pow of the graph within its accuracy, on the inputs it actually got.
    values = {**_initializers(model), **feeds, **dict(zip(names, got))}
    assert _check_matmul_and_pow_nodes(model, values) == sum(
        node.op_type in OURS for node in model.graph.node
    )
    # 2. Every value as onnx's evaluator computes it with our MatMul and Pow: the same bits (the
    # same kernels on the same operands; which nodes ran where is counted below).
    with_ours = reference.ReferenceEvaluator(exposed).run(None, feeds)
    for value_name, value, expected in zip(names, got, with_ours):
        assert_same_values(value, expected, what=value_name)
    # The model itself (values dropped after their last use) gives the same outputs, from a
    # mapping of inputs and from a list of them (the run written for the graph).
    final_rep = Backend.prepare(model)
    final = final_rep.run(feeds)
    listed = final_rep.run([feeds[input_name] for input_name in final_rep.input_names])
    for output, value, from_list in zip(model.graph.output, final, listed):
        assert_same_values(value, got[output.name], what=output.name)
        assert_same_values(from_list, value, what=output.name)

    # 3. The outputs against onnx's own MatMul and Pow, and against onnxruntime.
    plain = ReferenceEvaluator(model).run(None, feeds)
    runtime = _onnxruntime(model).run(None, feeds)
    for output, ours, theirs, ort_value in zip(model.graph.output, final, plain, runtime):
        assert ours.dtype == theirs.dtype == ort_value.dtype and ours.shape == ort_value.shape
        if name in EXACT_REFERENCE:
            assert_same_values(ours, theirs, what=output.name)
        if name in EXACT_ONNXRUNTIME:
            assert_same_values(ours, ort_value, what=output.name)
            continue
        assert np.isfinite(ours).all()
        tolerance = _tolerance(ours.dtype, TERMS[name])
        np.testing.assert_allclose(ours, theirs, **tolerance, err_msg=output.name)
        np.testing.assert_allclose(ours, ort_value, **tolerance, err_msg=output.name)


@pytest.mark.parametrize("opset", (13, 18))
def test_float64_mlp_matches_onnxruntime(opset):
    # onnxruntime has no float64 Erf.
    model = mlp(opset, np.float64, gelu=False)
    x = np.random.default_rng(8).standard_normal((5, 64))
    (ours,) = Backend.prepare(model).run([x])
    (plain,) = ReferenceEvaluator(model).run(None, {"x": x})
    (runtime,) = _onnxruntime(model).run(None, {"x": x})
    assert ours.dtype == np.float64
    np.testing.assert_allclose(ours, plain, **_tolerance(np.float64, 128))
    np.testing.assert_allclose(ours, runtime, **_tolerance(np.float64, 128))


# ---------------------------------------------------------------------------------------------
# Which node runs where
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def kernel_calls(monkeypatch) -> Counter:
    """Counts the calls of numba_onnx_ops.matmul and .pow (for models prepared during the test),
    and makes onnx's own MatMul and Pow fail, so a node silently running there cannot pass."""
    calls: Counter = Counter()

    def counting(op: str) -> Callable[..., object]:
        real = getattr(numba_onnx_ops, op)

        def spy(*args, **kwargs):
            calls[op] += 1
            return real(*args, **kwargs)

        return spy

    for op in ("matmul", "pow"):
        monkeypatch.setattr(numba_onnx_ops, op, counting(op))

    def refuse(self, *args, **kwargs):
        raise AssertionError(f"{type(self).__name__} ran on onnx's reference implementation")

    monkeypatch.setattr(op_matmul.MatMul, "_run", refuse)
    monkeypatch.setattr(op_pow.Pow, "_run", refuse)
    return calls


@pytest.mark.parametrize(
    ("name", "matmuls", "pows"),
    [
        ("mlp", 2, 1),
        ("attention_block", 6 + 2, 1),  # q, k, v, out, 2 FFN, 2 in attention; one LN with Pow
        ("control_flow", 1 + 3 + 4, 4),  # If's then branch, 3 loop turns, 4 scanned rows
        ("with_function", 1, 1),
    ],
)
def test_matmul_and_pow_run_on_our_kernels(name, matmuls, pows, kernel_calls):
    model = MODELS[name](18)
    rep = Backend.prepare(model)
    expected = [
        (node.name, node.op_type if not node.domain else f"{node.domain}::{node.op_type}")
        for node in model.graph.node
    ]
    placement = rep.placement()
    assert [(p.node, p.op_type) for p in placement] == expected
    for p in placement:
        assert p.runtime == ("numba_onnx_ops" if p.op_type in OURS else "onnx.reference"), p
    rep.run(_feeds(name))
    assert kernel_calls == {"matmul": matmuls, "pow": pows}

    # The same nodes through the evaluator, model-local functions and subgraphs included.
    kernel_calls.clear()
    reference.ReferenceEvaluator(model).run(None, _feeds(name))
    assert kernel_calls == {"matmul": matmuls, "pow": pows}


@pytest.mark.parametrize(("name", "matmuls", "pows"), [("mlp", 2, 1), ("control_flow", 8, 4)])
def test_onnx_evaluator_with_ops_runs_graphs_and_subgraphs_on_our_kernels(
    name, matmuls, pows, kernel_calls
):
    ReferenceEvaluator(MODELS[name](18), new_ops=reference.OPS).run(None, _feeds(name))
    assert kernel_calls == {"matmul": matmuls, "pow": pows}


def test_onnx_evaluator_with_ops_leaves_function_bodies_to_onnx(monkeypatch):
    # onnx builds a model-local function's evaluator without new_ops: its MatMul and Pow run on
    # onnx's own code, which is why numba_onnx_ops.reference has an evaluator of its own.
    ran: Counter = Counter()
    for op_class in (op_matmul.MatMul, op_pow.Pow):
        real = op_class._run

        def counting(self, *args, real=real, **kwargs):
            ran[type(self).__name__] += 1
            return real(self, *args, **kwargs)

        monkeypatch.setattr(op_class, "_run", counting)
    model = with_function(18)
    ReferenceEvaluator(model, new_ops=reference.OPS).run(None, _feeds("with_function"))
    assert ran == {"MatMul": 1, "Pow": 1}
    ran.clear()
    reference.ReferenceEvaluator(model).run(None, _feeds("with_function"))
    assert ran == {}


def test_evaluator_new_ops_reach_function_bodies(kernel_calls):
    class Pow(OpRun):  # replaces ours, in the graph and in the function body alike
        op_domain = ""

        def _run(self, x, y):
            return (np.zeros_like(x),)

    sess = reference.ReferenceEvaluator(with_function(18), new_ops=[Pow])
    # The Scaler after the function: (0 - offset 0.5) * scale 2.
    assert sess.run(None, _feeds("with_function"))[0].tolist() == [[-1.0] * 8] * 4
    assert kernel_calls == {"matmul": 1}
    # The evaluator class itself stays as it was: a later evaluator runs our Pow again.
    reference.ReferenceEvaluator(with_function(18)).run(None, _feeds("with_function"))
    assert kernel_calls == {"matmul": 2, "pow": 1}


def test_unnamed_nodes_are_placed_by_operator_and_position():
    b = _Builder(18)
    b.nodes.append(helper.make_node("MatMul", ["x", b.weight("w", (4, 4))], ["p"]))
    b.nodes.append(helper.make_node("Relu", ["p"], ["r"]))
    b.nodes.append(helper.make_node("Pow", ["r", b.constant(2.0)], ["y"], name="square"))
    model = b.model([_tensor("x", np.float32, [2, 4])], [_tensor("y", np.float32, [2, 4])], "u")
    assert Backend.prepare(model).placement() == [
        ("MatMul#0", "MatMul", "numba_onnx_ops"),
        ("Relu#1", "Relu", "onnx.reference"),
        ("constant1", "Constant", "onnx.reference"),
        ("square", "Pow", "numba_onnx_ops"),
    ]


def test_constant_folded_and_reference_nodes_placed():
    rep = Backend.prepare(attention_block(17))
    runtimes = Counter((p.op_type, p.runtime) for p in rep.placement())
    assert runtimes[("LayerNormalization", "onnx.reference")] == 1
    assert runtimes[("Softmax", "onnx.reference")] == 1
    assert runtimes[("MatMul", "numba_onnx_ops")] == 8
    assert runtimes[("Pow", "numba_onnx_ops")] == 1


def test_intermediate_values_are_dropped_after_their_last_use(monkeypatch):
    # The second Pow must not find the first Pow's input still referenced by the backend.
    seen: list[weakref.ref] = []
    real_pow = numba_onnx_ops.pow

    def pow_spy(x, y, **kwargs):
        gc.collect()
        alive = [ref() is not None for ref in seen]
        seen.append(weakref.ref(x))
        pow_spy.alive.append(alive)
        return real_pow(x, y, **kwargs)

    pow_spy.alive = []
    monkeypatch.setattr(numba_onnx_ops, "pow", pow_spy)
    b = _Builder(18)
    first = b.node("Pow", [b.node("MatMul", ["x", b.weight("w", (4, 4))]), b.constant(2.0)])
    b.nodes.append(helper.make_node("Pow", [first, b.constant(3.0)], ["y"]))
    model = b.model([_tensor("x", np.float32, [2, 4])], [_tensor("y", np.float32, [2, 4])], "pows")
    Backend.prepare(model).run([np.ones((2, 4), np.float32)])
    assert pow_spy.alive == [[], [False]]


# ---------------------------------------------------------------------------------------------
# Graph features: optional inputs and outputs, other domains, run_node, dask
# ---------------------------------------------------------------------------------------------


def _optional_io(unnamed: bool) -> onnx.ModelProto:
    """LayerNormalization and Dropout leaving optional outputs unnamed (or naming them), and
    Clip omitting its optional ``min`` input: Clip must see no minimum at all."""
    b = _Builder(17, seed=9)
    gamma = b.weight("gamma", (8,), scale=1.0)
    b.initializers.append(numpy_helper.from_array(np.array(0.5, np.float32), "max"))
    outputs = ["ln", "" if unnamed else "ln_mean", "ln_inv_std"]
    b.nodes.append(helper.make_node("LayerNormalization", ["x", gamma], outputs, name="ln"))
    product = b.node("MatMul", ["ln", b.weight("w", (8, 8))])
    clipped = b.node("Clip", [product, "", "max"])
    dropout = ["dropped", "" if unnamed else "dropout_mask"]
    b.nodes.append(helper.make_node("Dropout", [clipped], dropout, name="dropout"))
    b.nodes.append(helper.make_node("Clip", ["dropped", "", "max"], ["y"], name="clip_out"))
    return b.model(
        [_tensor("x", np.float32, [4, 8])],
        [_tensor("y", np.float32, [4, 8]), _tensor("ln_inv_std", np.float32, [4, 1])],
        "optional_io",
    )


def test_unnamed_outputs_never_reach_omitted_inputs():
    model = _optional_io(unnamed=True)
    x = _feeds("optional_io")["x"]
    y, inv_std = Backend.prepare(model).run([x])
    # onnx's evaluator files an unnamed output under "", where an omitted input later reads it
    # (Clip would take LayerNormalization's mean as its minimum): compare with the same model
    # with every output named, and with onnxruntime.
    named = ReferenceEvaluator(_optional_io(unnamed=False), new_ops=reference.OPS)
    expected_y, expected_inv_std = named.run(None, {"x": x})
    assert_same_values(y, expected_y)
    assert_same_values(inv_std, expected_inv_std)
    runtime_y, _ = _onnxruntime(model).run(None, {"x": x})
    np.testing.assert_allclose(y, runtime_y, **_tolerance(np.float32, 8))
    assert (y < 0).any() and (y <= 0.5).all()


def test_unknown_operator_of_another_domain_is_refused_at_prepare():
    b = _Builder(18)
    b.nodes.append(helper.make_node("Frobnicate", ["x"], ["y"], domain="com.example", name="frob"))
    model = b.model(
        [_tensor("x", np.float32, [2])],
        [_tensor("y", np.float32, [2])],
        "custom",
        extra_opsets=[helper.make_opsetid("com.example", 1)],
    )
    assert not Backend.is_compatible(model)
    with pytest.raises(
        NotImplementedError,
        match=r"operator 'com.example::Frobnicate' \(node 'frob'\).* at com.example opset 1",
    ):
        Backend.prepare(model)
    del model.opset_import[1]
    with pytest.raises(NotImplementedError, match="imports no opset of domain 'com.example'"):
        Backend.prepare(model)


def test_unknown_operator_inside_a_subgraph_is_refused_at_prepare():
    b = _Builder(18)
    branch = _body(
        "branch",
        [helper.make_node("Frobnicate", ["x"], ["z"], name="frob")],
        [],
        [_tensor("z", np.float32, [2])],
    )
    b.nodes.append(helper.make_node("If", ["flag"], ["y"], then_branch=branch, else_branch=branch))
    model = helper.make_model(
        helper.make_graph(
            b.nodes,
            "g",
            [_tensor("x", np.float32, [2]), _tensor("flag", np.bool_, [])],
            [_tensor("y", np.float32, [2])],
        ),
        opset_imports=[helper.make_opsetid("", 18)],
    )
    with pytest.raises(NotImplementedError, match=r"operator 'Frobnicate' \(node 'frob'\)"):
        Backend.prepare(model)


def test_other_operators_are_compatible():
    assert Backend.is_compatible(attention_block(17))
    assert Backend.is_compatible(control_flow(18))


def test_error_in_a_reference_node_names_it():
    b = _Builder(18)
    b.nodes.append(
        helper.make_node("Reshape", ["x", b.constant([3, -1], np.int64)], ["y"], name="reshape0")
    )
    model = b.model([_tensor("x", np.float32, ["n"])], [_tensor("y", np.float32, [3, "m"])], "bad")
    rep = Backend.prepare(model)
    np.testing.assert_array_equal(rep.run([np.arange(6, dtype=np.float32)])[0].shape, (3, 2))
    with pytest.raises(ValueError, match="Reshape node 'reshape0' at opset 18"):
        rep.run([np.arange(7, dtype=np.float32)])


def test_run_node_runs_other_operators():
    x = np.random.default_rng(10).standard_normal((2, 3, 4)).astype(np.float32)
    (y,) = Backend.run_node(helper.make_node("Relu", ["x"], ["y"]), [x])
    assert_same_values(y, np.maximum(x, 0))
    # Clip-6 takes its bounds as attributes (Clip-11 as inputs): the opset decides.
    node = helper.make_node("Clip", ["x"], ["y"], min=-0.5, max=0.25)
    (clipped,) = Backend.run_node(node, {"x": x}, opset_version=6)
    assert_same_values(clipped, np.clip(x, np.float32(-0.5), np.float32(0.25)))
    with pytest.raises(onnx.checker.ValidationError, match="attribute"):
        Backend.run_node(node, {"x": x}, opset_version=11)
    # An omitted optional input, and a node with several outputs.
    clip = helper.make_node("Clip", ["x", "", "hi"], ["y"])
    (clipped,) = Backend.run_node(clip, [x, None, np.float32(0.25)])
    assert_same_values(clipped, np.minimum(x, np.float32(0.25)))
    ln = helper.make_node("LayerNormalization", ["x", "g"], ["y", "mean"], axis=-1)
    result = Backend.run_node(ln, [x, np.ones(4, np.float32)], opset_version=17)
    assert len(result) == 2 and result.mean.shape == (2, 3, 1)
    np.testing.assert_allclose(result.mean[..., 0], x.mean(axis=-1), rtol=1e-5)


def test_dask_input_through_reference_nodes():
    da = pytest.importorskip("dask.array")
    model = mlp(18)
    x = _feeds("mlp")["x"]
    (expected,) = Backend.prepare(model).run([x])
    (y,) = Backend.prepare(model).run([da.from_array(x, chunks=(2, 64))])
    # Rows in blocks of 2 may take another kernel than all 5 at once: not the same bits.
    np.testing.assert_allclose(np.asarray(y), expected, **_tolerance(np.float32, 128))


# ---------------------------------------------------------------------------------------------
# onnx's own node cases of the other operators exporter models use, If, Loop and Scan with their
# subgraphs and the function-expanded variants included: the backend runs them on onnx's
# reference classes and must pass them as onnx's evaluator does.  Only these CPU cases are
# collected (the other ~3400 are dropped, not reported as skipped).
# ---------------------------------------------------------------------------------------------
_OTHER_OPERATORS = re.compile(
    r"^test_(identity|add|sub|mul|div|relu|tanh|erf|gelu|sqrt|softmax|reshape|transpose|gemm|"
    r"cast|constant|unsqueeze|where|clip|dropout|reduce_mean|reduce_sum|layer_normalization|"
    r"if|loop|scan)(\d+)?(_.*)?_cpu$"
)
# Cases onnx's reference evaluator fails too (its If with an optional output, its Loop over an
# empty sequence, its Scan-8 with a sequence-length input it ignores).
_REFERENCE_FAILS = {"test_if_opt_cpu", "test_loop16_seq_none_cpu", "test_scan_sum_cpu"}


def _comparable(output, reference_output):
    """``output`` and ``reference_output``, both widened to float32 where numpy cannot promote
    their dtype with a Python float and float32 holds each of its values exactly.

    onnx's runner compares through ``numpy.testing.assert_allclose``, which needs that promotion:
    numpy 1.x has none for most of ml_dtypes' float8, float4 and e8m0 types (numpy 2 has), and
    onnx widens bfloat16 itself for the same reason.  Arrays of different dtypes are left alone,
    for the runner's dtype check to see them.
    """
    if not (
        isinstance(output, np.ndarray)
        and isinstance(reference_output, np.ndarray)
        and output.dtype == reference_output.dtype
        and np.can_cast(output.dtype, np.float32, "safe")
    ):
        return output, reference_output
    try:
        np.result_type(reference_output, 1.0)
    except TypeError:
        return output.astype(np.float32), reference_output.astype(np.float32)
    return output, reference_output


class _Runner(onnx.backend.test.BackendTest):
    """onnx's backend test runner, comparing outputs of every dtype onnx's cases produce on
    every numpy the package supports (:func:`_comparable`)."""

    @classmethod
    def assert_similar_outputs(cls, ref_outputs, outputs, rtol, atol, model_dir=None):
        if (
            isinstance(outputs, (list, tuple))
            and isinstance(ref_outputs, (list, tuple))
            and len(outputs) == len(ref_outputs)
        ):
            pairs = [_comparable(out, ref) for out, ref in zip(outputs, ref_outputs)]
            outputs, ref_outputs = [out for out, _ in pairs], [ref for _, ref in pairs]
        super().assert_similar_outputs(ref_outputs, outputs, rtol, atol, model_dir=model_dir)


with warnings.catch_warnings():
    # Building onnx's node cases runs its own numpy code, which warns (casts) at import.
    warnings.simplefilter("ignore", RuntimeWarning)
    OnnxNodeCasesOfOtherOperators = _Runner(Backend, __name__).test_cases[
        "OnnxBackendNodeModelTest"
    ]
for _name in unittest.defaultTestLoader.getTestCaseNames(OnnxNodeCasesOfOtherOperators):
    if not _OTHER_OPERATORS.search(_name) or _name in _REFERENCE_FAILS:
        delattr(OnnxNodeCasesOfOtherOperators, _name)
del _name
# onnx's Cast casts the NaN of its cases to 2- and 4-bit integers, as those cases mean it to.
OnnxNodeCasesOfOtherOperators.pytestmark = [
    pytest.mark.filterwarnings("ignore:invalid value encountered in cast:RuntimeWarning")
]


@pytest.mark.parametrize(
    "dtype",
    [ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2fnuz, ml_dtypes.float4_e2m1fn, np.float16],
)
def test_runner_compares_outputs_of_narrow_float_types(dtype):
    ref = np.array([0.5, 1.5, -2.0, np.nan], np.float32).astype(dtype)
    _Runner.assert_similar_outputs([ref], [ref.copy()], rtol=1e-3, atol=1e-7)
    wrong = ref.copy()
    wrong[1] = wrong[2]
    with pytest.raises(AssertionError):
        _Runner.assert_similar_outputs([ref], [wrong], rtol=1e-3, atol=1e-7)
    with pytest.raises(AssertionError):  # the dtype is checked, not widened away
        _Runner.assert_similar_outputs([ref], [ref.astype(np.float32)], rtol=1e-3, atol=1e-7)


def test_onnx_node_cases_selected():
    # Guards against a pattern typo silently leaving the selection empty or thin.
    names = unittest.defaultTestLoader.getTestCaseNames(OnnxNodeCasesOfOtherOperators)
    assert len(names) >= 250
    expected = {
        "test_if_cpu",
        "test_loop11_cpu",
        "test_scan9_sum_cpu",
        "test_gemm_default_no_bias_cpu",
        "test_layer_normalization_4d_axis0_expanded_cpu",
        "test_softmax_axis_0_cpu",
    }
    assert expected <= set(names)


# ---------------------------------------------------------------------------------------------
# Speed: Backend.run against onnxruntime (run as a script, not a test)
# ---------------------------------------------------------------------------------------------


def measure(
    contenders: dict[str, Callable[[], object]], calls: int, rounds: int, pause: float = 0.05
) -> dict[str, float]:
    """Median seconds per call of each contender, over ``rounds`` rounds of ``calls`` calls.

    The contenders take turns round by round in this one process, with ``pause`` seconds of
    sleep before each turn: onnxruntime's pool threads spin for a while after each run, and
    would otherwise steal the cores from whoever runs next.
    """
    for run in contenders.values():  # warm-up: numba compiles, onnxruntime allocates
        for _ in range(3):
            run()
    times: dict[str, list[float]] = {key: [] for key in contenders}
    for _ in range(rounds):
        for key, run in contenders.items():
            time.sleep(pause)
            for _ in range(calls):
                start = time.perf_counter()
                run()
                times[key].append(time.perf_counter() - start)
    return {key: statistics.median(values) for key, values in times.items()}


def _report(batch: int, width: int, calls: int, rounds: int, profile: bool) -> None:
    """Print the medians of :func:`measure` for :func:`chain` (or a profile of Backend.run)."""
    model = chain(width)
    x = np.random.default_rng(0).standard_normal((batch, width)).astype(np.float32)
    ours = functools.partial(Backend.prepare(model).run, [x])
    if profile:
        import cProfile
        import pstats

        ours()
        profiler = cProfile.Profile()
        for _ in range(calls):
            profiler.runcall(ours)
        print(f"batch {batch} width {width}, {calls} calls of Backend.run:")
        pstats.Stats(profiler).sort_stats("tottime").print_stats(12)
        return
    w1, w2 = (numpy_helper.to_array(tensor) for tensor in model.graph.initializer)
    two = np.array(2.0, np.float32)

    def direct() -> np.ndarray:
        # The same three calls without the backend: what Backend.run adds is the difference.
        squared = numba_onnx_ops.pow(numba_onnx_ops.matmul(x, w1, opset=18), two, opset=18)
        return numba_onnx_ops.matmul(squared, w2, opset=18)

    contenders = {
        "Backend.run": ours,
        "nox calls": direct,
        "onnxruntime": functools.partial(_onnxruntime(model, 0).run, None, {"x": x}),
        "onnxruntime 1 thread": functools.partial(_onnxruntime(model, 1).run, None, {"x": x}),
    }
    medians = measure(contenders, calls, rounds)
    shown = ", ".join(f"{key} {seconds * 1e6:.1f} us" for key, seconds in medians.items())
    print(f"batch {batch} width {width}: {shown}")


def _main() -> None:
    parser = argparse.ArgumentParser(description=measure.__doc__)
    parser.add_argument("--calls", type=int, default=200, help="calls per round and contender")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--profile", action="store_true", help="profile Backend.run instead")
    args = parser.parse_args()
    for batch, width in ((1, 64), (32, 256)):
        _report(batch, width, args.calls, args.rounds, args.profile)


if __name__ == "__main__":
    _main()
