"""How a ``prange`` loop is split among the threads, set from inside a kernel.

numba cuts a ``prange`` into as many equal parts as there are threads unless a chunk size is set
(``numba.set_parallel_chunksize``).  Equal parts make the call wait for the slowest thread, and a
pool thread that has slept (after about a millisecond of idle) starts late: on 2 Zen 4 cores
(a virtual machine) the first call after a 50 ms pause took 230-370 us where the next took
70-120 us.  With one loop iteration per part, the TBB layer balances the parts as they run: the
calling thread starts at once and takes what a late thread has not.

``numba.set_parallel_chunksize`` itself, called from a kernel, goes through a ctypes pointer,
which numba's on-disk cache refuses; ``set_chunksize`` calls the same C function by the symbol
name numba's own parfor code links against (see ``_numba_private``).
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic


@intrinsic
def set_chunksize(typingctx, n):
    """Set the calling thread's parallel chunk size to ``n``; return the previous one."""
    if not isinstance(n, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        size_t = context.get_value_type(types.uintp)
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(size_t, [size_t]), "set_parallel_chunksize"
        )
        return builder.call(fn, [context.cast(builder, args[0], n, types.uintp)])

    return types.uintp(n), codegen
