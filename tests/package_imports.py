"""The package's modules and the imports between them, read from the sources with ``ast``: what
the layout and cache-stamp tests hold the package to.  Imports inside functions count (they run
when called); those under ``if TYPE_CHECKING:`` do not (they never run)."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import numba_onnx_ops

PACKAGE = Path(numba_onnx_ops.__file__).parent
NAME = numba_onnx_ops.__name__


def _modules() -> dict[str, Path]:
    modules = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join((NAME, *parts))] = path
    return modules


#: Every module of the package, by its full name: its source file.
MODULES = _modules()


@functools.cache
def tree(module: str) -> ast.Module:
    path = MODULES[module]
    return ast.parse(path.read_bytes(), str(path))


def _runtime_nodes(node: ast.AST):
    """Every node below ``node`` but those under ``if TYPE_CHECKING:``."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and ast.unparse(child.test).endswith("TYPE_CHECKING"):
            for other in child.orelse:
                yield other
                yield from _runtime_nodes(other)
            continue
        yield child
        yield from _runtime_nodes(child)


def imported(module: str) -> set[tuple[str, str | None]]:
    """``(module, name)`` for each ``from module import name`` that ``module`` runs, relative
    imports resolved; ``(module, None)`` for ``import module``."""
    package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in _runtime_nodes(tree(module)):
        if isinstance(node, ast.Import):
            found.update((alias.name, None) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            source = node.module or ""
            if node.level:
                base = package.rsplit(".", node.level - 1)[0]
                source = f"{base}.{source}" if source else base
            found.update((source, alias.name) for alias in node.names)
    return found


def imports(module: str) -> set[str]:
    """The package modules ``module`` imports: a name imported from a package is its submodule
    where it has one, else the package's own ``__init__``."""
    found = set()
    for source, name in imported(module):
        sub = f"{source}.{name}"
        found.add(sub if sub in MODULES else source)
    return {m for m in found if m in MODULES and m != module}
