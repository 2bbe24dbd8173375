"""A small, bounded, thread-safe cache of Pow result tables for half-type bases.

A float16 or bfloat16 base has 65,536 bit patterns, so with one exponent the whole operator is
a table of 65,536 results (128 KiB, in L2 while a tensor streams through it).  ``plan``
builds a table with the ordinary kernels and keeps the few most recently used ones here.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable

import numpy as np

MAX_TABLES = 8  # 1 MiB at most; a model rarely has more distinct half-type exponents than this
MAX_PENDING = 64  # exponents whose elements are counted toward building a table


class TableCache:
    """Least-recently-used tables, at most ``capacity`` of them, safe to share across threads.

    A table is built outside the lock (two threads missing at once both build it, and one copy
    is kept), so a slow build never blocks other callers.  Tables are read-only arrays.
    """

    def __init__(self, capacity: int = MAX_TABLES) -> None:
        self.capacity = capacity
        self._tables: OrderedDict[Hashable, np.ndarray] = OrderedDict()
        self._pending: OrderedDict[Hashable, int] = OrderedDict()
        self._lock = threading.Lock()

    def count(self, key: Hashable, elements: int, threshold: int) -> bool:
        """Add ``elements`` computed without a table to ``key``'s tally; whether the tally has
        reached ``threshold`` (and is reset).  Repeated small calls with one exponent so earn
        a table once the work they spent would have paid for building it."""
        with self._lock:
            total = self._pending.pop(key, 0) + elements
            if total >= threshold:
                return True
            self._pending[key] = total
            while len(self._pending) > MAX_PENDING:
                self._pending.popitem(last=False)
            return False

    def get(self, key: Hashable) -> np.ndarray | None:
        """The table of ``key``, marked as most recently used, or ``None``."""
        with self._lock:
            table = self._tables.get(key)
            if table is not None:
                self._tables.move_to_end(key)
            return table

    def get_or_build(self, key: Hashable, build: Callable[[], np.ndarray]) -> np.ndarray:
        """The table of ``key``, built by ``build()`` and kept if it is not cached yet."""
        table = self.get(key)
        if table is not None:
            return table
        table = build()
        table.flags.writeable = False
        with self._lock:
            table = self._tables.setdefault(key, table)
            self._tables.move_to_end(key)
            while len(self._tables) > self.capacity:
                self._tables.popitem(last=False)
        return table

    def __len__(self) -> int:
        with self._lock:
            return len(self._tables)

    def clear(self) -> None:
        with self._lock:
            self._tables.clear()
            self._pending.clear()
