"""How a ``prange`` loop is split among the threads, set from inside a kernel.

numba cuts a ``prange`` into as many equal parts as there are threads unless a chunk size is set
(``numba.set_parallel_chunksize``).  Equal parts make the call wait for the slowest thread, and
on a shared machine the pool thread is often slow: its core busy with another process, or (2
vCPUs, virtual machine) still coming up after a pause.  With one loop iteration per part, the
TBB layer balances the parts as they run: the calling thread starts at once and takes what a
late thread has not.  Measured on 2 Zen 4 vCPUs shared with other work, kernel calls in the
peer comparison's pattern (a pause, then a sample of calls), medians of five runs against equal
parts: 2048 x 16^3 float32 139/180, 163/231, 178/175, 185/177, 191/182 us; 4096 x 8^3
100/116, 131/125, 95/91, 97/93, 100/94 us; 64 x 128x64x128 within 10% either way.

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
