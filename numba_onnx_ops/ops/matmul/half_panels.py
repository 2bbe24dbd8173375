"""float16/bfloat16 products as float32 sgemm over bounded panels, rounded once.

The kernels widen panels of the half operands to float32 (in parallel, F16C for float16),
numpy's BLAS multiplies them accumulating in float32, and each C tile is narrowed into the
result with one rounding: "accumulate in float32, round once" at BLAS speed.  The panels of A
and B are bounded whatever the operands' size; the float32 tiles of C grow as K gets shorter,
up to the result's shape (see ``PANEL``).
"""

from __future__ import annotations

import numpy as np

from ...core.broadcast import flat_buffer
from ...core.dtypes import kernel_view
from ...runtime import parallel
from . import blas
from . import kernels as _k

_F32 = np.dtype(np.float32)

# float32 panels of A and B: at most this many elements each (4 MiB), whatever the operands'
# size; a 1024x1024 operand fits in one panel.  The tile of C and the one of partial sums are
# mb x nb each, mb and nb at most max(PANEL_MIN, PANEL // kc) with kc = min(K, PANEL_KMAX):
# 4 MiB each from K = 1024 on, but for shorter K up to the result's shape in float32 (a
# 4096 x 4096 result with K = 16: about 134 MB of scratch).
PANEL = 1 << 20
PANEL_MIN = 256  # rows or columns of a tile at the least, however long K is
PANEL_KMAX = PANEL // PANEL_MIN  # K is walked in blocks beyond this, partial sums added


def run_half_blas(a2, b2, batch, m, n, k, target) -> None:
    """``target[...] = a2 @ b2`` for validated 2-D-promoted half operands (batch dimensions
    ``batch``) into a C-contiguous ``target``.

    Per tile of C (mb x nb, all of K): widen a panel of A and of B to float32, sgemm them,
    accumulating in float32, and narrow the tile into the result.  A B panel serves every row
    tile; an A panel is widened once per column tile (once in all when one tile spans the
    columns).
    """
    kind = kernel_view(a2)[1]
    kc = min(k, PANEL_KMAX)
    nb = min(n, max(PANEL_MIN, PANEL // kc))
    mb = min(m, max(PANEL_MIN, PANEL // kc))
    scratch = np.empty(mb * kc + kc * nb + 2 * mb * nb, _F32)
    out = kernel_view(target)[0].reshape(-1)
    a3 = np.broadcast_to(a2, batch + a2.shape[-2:])
    b3 = np.broadcast_to(b2, batch + b2.shape[-2:])
    for bi, index in enumerate(np.ndindex(*batch)):
        abuf, aorg, (ars, acs) = flat_buffer(kernel_view(a3[index])[0])
        bbuf, borg, (brs, bcs) = flat_buffer(kernel_view(b3[index])[0])
        for j0 in range(0, n, nb):
            nj = min(nb, n - j0)
            for i0 in range(0, m, mb):
                mi = min(mb, m - i0)
                for k0 in range(0, k, kc):
                    kk = min(kc, k - k0)
                    af, bf, cf, part = _panels(scratch, (mb, kc, nb), mi, kk, nj)
                    # Widen only what changed (a panel with no rows is skipped): B, unless
                    # this column tile's is still there; A, unless it is whole in one panel.
                    new_b = bf if i0 == 0 or kc < k else bf[:0]
                    new_a = af if j0 == 0 or mb < m or kc < k else af[:0]
                    ao = aorg + i0 * ars + k0 * acs
                    bo = borg + k0 * brs + j0 * bcs
                    parallel.launch(
                        _k.widen_panels,
                        abuf, ao, ars, acs, new_a, bbuf, bo, brs, bcs, new_b, kind,
                    )  # fmt: skip
                    with np.errstate(all="ignore"):  # IEEE results, as the own kernels
                        if k0 == 0:
                            blas.matmul(af, bf, out=cf)
                        else:
                            blas.matmul(af, bf, out=part)
                            cf += part
                parallel.launch(_k.narrow_panel, cf, kind, out, bi * m * n + i0 * n + j0, n)


def _panels(scratch: np.ndarray, tile: tuple[int, int, int], mi: int, kk: int, nj: int):
    """C-contiguous views of ``scratch`` of exactly this tile's shapes: A panel (mi, kk),
    B panel (kk, nj), C tile and partial sums (mi, nj).  Offsets come from the largest tile
    ``(mb, kc, nb)``, so a panel kept for the next tile stays where it was."""
    mb, kc, nb = tile
    ob = mb * kc
    oc = ob + kc * nb
    op = oc + mb * nb
    return (
        scratch[: mi * kk].reshape(mi, kk),
        scratch[ob : ob + kk * nj].reshape(kk, nj),
        scratch[oc : oc + mi * nj].reshape(mi, nj),
        scratch[op : op + mi * nj].reshape(mi, nj),
    )
