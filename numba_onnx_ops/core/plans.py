"""Call plans: what a call of one kind decided, kept so the next call of that kind only runs.

Every decision of a call (the version, the dtypes, weak scalars, the exponent class, the shapes
and strides, the kernel, BLAS or not, the calling thread or the pool) follows from a small key:
the operands' types, dtypes, shapes, strides and alignment, the exponent where its value
matters, and the keyword arguments.  An operator's entry point builds that key, and on a miss
runs its general path's decisions (which raise every error a call can raise) and keeps the
resulting *plan*, a function ``plan(A, B) -> result`` for operands of that key; on a hit it
calls the plan.  A call with an ndarray ``out`` has a plan of its own, ``plan(A, B, out)``, in a
second cache under the same key (``out`` is checked on every call).  A plan holds no state of a
call, so threads share it.

The caches are bounded: one that reaches ``MAX_PLANS`` entries starts again empty (a program
that makes calls of that many kinds in turn pays the decisions again, nothing else).  Plans read
``tuning`` when they are made: ``clear()`` makes every later call decide again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

MAX_PLANS = 512

_caches: list[dict] = []


def cache() -> dict:
    """A new plan cache, cleared with the others by ``clear``."""
    plans: dict = {}
    _caches.append(plans)
    return plans


def plain(*keywords) -> bool:
    """Whether keyword values can be part of a key: ``None`` or Python ``int`` s.  Others (a
    float, a bool, a numpy integer) compare equal to an ``int`` with the same hash, so a value
    the checks refuse (``opset=13.0``) would find the plan of one they accept (``opset=13``):
    such calls take the general path, whose checks decide each of them."""
    for value in keywords:
        if value is not None and value.__class__ is not int:
            return False
    return True


def keep(plans: dict, key: Any, plan: Callable) -> Callable:
    """Keep ``plan`` under ``key``; returns it."""
    if len(plans) >= MAX_PLANS:
        plans.clear()
    plans[key] = plan
    return plan


def clear() -> None:
    """Forget every plan: later calls decide again (after a change of ``tuning``, say)."""
    for plans in _caches:
        plans.clear()
