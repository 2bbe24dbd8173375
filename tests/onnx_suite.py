"""onnx's backend test suite as the tests here build it: its node cases without the operators
no test here selects.

onnx builds its node cases by importing one module per operator, and each module computes its
cases' expected outputs as it is imported. Its pooling operators' take 7 of those 9-12 s (AMD
Zen 3), paid at every pytest worker's collection; no test here selects a pooling case. Importing
this module makes onnx's loader (``load_model_tests(kind="node")``, which ``BackendTest`` calls)
leave those modules out.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

import onnx.backend.test.case.node as _node
import onnx.backend.test.loader as _loader
from onnx.backend.test.case.utils import ONNX_ML

LEFT_OUT = ("averagepool", "lppool", "maxpool")


def _import_cases(package: ModuleType) -> None:
    # onnx's own ``import_recursive``, but for the modules left out
    for _, name, ispkg in pkgutil.iter_modules(package.__path__):
        module_name = f"{package.__name__}.{name}"
        if name in LEFT_OUT or (not ONNX_ML and ".ai_onnx_ml" in module_name):
            continue
        module = importlib.import_module(module_name)
        if ispkg:
            _import_cases(module)


def _load_node_model_tests():
    _import_cases(_node)
    return _node._NodeTestCases


_loader.load_node_model_tests = _load_node_model_tests
