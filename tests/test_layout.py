"""The package's layout: calls flow down its layers, and no module imports itself back.

Layers, from the bottom: ``runtime`` and ``tuning`` (what every kernel stands on), ``core``
(rules both operators share), ``ops`` (each operator: entry point, decisions, dispatch,
kernels), the public API (the package itself and ``precompile``), then what builds on the API
(``integrations``, ``bench``), the public ONNX modules and the command line.  A module imports
from its own layer or below; the two operators do not import each other.  One edge goes up:
an operator's entry point hands dask operands to ``integrations.dask_arrays``, which imports
only the operators' decisions and calls back through the function it is given.
"""

from __future__ import annotations

import ast

from package_imports import MODULES, NAME, imports, tree

_LAYERS = {
    "runtime": 0,
    "tuning": 0,
    "core": 1,
    "ops": 2,
    "": 3,  # the package's __init__
    "precompile": 3,
    "integrations": 4,
    "bench": 4,
    "backend": 5,
    "reference": 5,
    "__main__": 6,
}
_HAND_OFF = {
    ("numba_onnx_ops.ops.matmul.api", "numba_onnx_ops.integrations.dask_arrays"),
    ("numba_onnx_ops.ops.pow.api", "numba_onnx_ops.integrations.dask_arrays"),
}

GRAPH = {m: imports(m) for m in MODULES}


def _layer(module: str) -> tuple[int, str]:
    parts = module.split(".")[1:]
    top = parts[0] if parts else ""
    return _LAYERS[top], ".".join(parts[:2]) if top == "ops" else top


def test_every_module_has_a_layer_and_a_docstring():
    for module in MODULES:
        _layer(module)
        assert ast.get_docstring(tree(module)), f"{module} says nothing of what it owns"


def test_no_import_cycles():
    # Tarjan's strongly connected components: any with two or more modules is a cycle.
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in GRAPH:
        if v not in index:
            visit(v)
    assert cycles == []


def test_calls_flow_down_the_layers():
    upward = []
    for module, targets in GRAPH.items():
        rank, room = _layer(module)
        for target in targets:
            t_rank, t_room = _layer(target)
            crosses = rank == t_rank == 2 and room != t_room  # one operator into the other
            if (t_rank > rank or crosses) and (module, target) not in _HAND_OFF:
                upward.append(f"{module} -> {target}")
    assert upward == []


def test_the_dask_layer_imports_no_entry_point():
    dask_layer = "numba_onnx_ops.integrations.dask_arrays"
    assert GRAPH[dask_layer] and all(
        not t.endswith(".api") and t != NAME for t in GRAPH[dask_layer]
    ), GRAPH[dask_layer]


def test_the_import_graph_is_read():
    # The checks above pass vacuously on an empty graph: the entry points must be seen to
    # import the layer below them, and a relative import inside a function must count.
    assert "numba_onnx_ops.ops.pow.plan" in GRAPH["numba_onnx_ops.ops.pow.api"]
    assert "numba_onnx_ops.ops.matmul.dispatch" in GRAPH["numba_onnx_ops.ops.matmul.api"]
    assert "numba_onnx_ops.ops.matmul.decisions" in GRAPH["numba_onnx_ops.ops.matmul.dispatch"]
    assert "numba_onnx_ops.integrations.dask_arrays" in GRAPH["numba_onnx_ops.ops.pow.api"]
