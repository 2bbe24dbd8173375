"""A register-blocked MatMul micro-kernel written as LLVM vector code.

numba's loop and SLP vectorizers turn the plain register-blocked loops of ``kernels.py`` into
vector code, but not into a schedule that keeps the FMA units busy (docs/design.md, "The
micro-kernel and register blocks per CPU").
Here the whole K loop of one MR x (NV * W) block of C is emitted directly: per step, NV vector
loads of a B row, MR scalar loads of A splatted across a vector, MR * NV calls of
``llvm.fma``, all accumulators carried as phi nodes (they stay in registers), and the C block
stored once at the end.  The block's shape comes from the type of a tuple argument, so each
shape is its own (cached) specialization and the shapes are chosen by the caller.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from ...runtime.jit import helper_overload
from ...runtime.vectors import vector_fma, vector_splat


class _BFloat16(ir.types.Type):
    """LLVM's ``bfloat`` (llvmlite's IR builder has no such type): only the operand type of
    AVX512_BF16's dot-product intrinsic, reached by bitcasts of 32-bit lanes."""

    def _to_string(self):
        return "bfloat"

    def __eq__(self, other):
        return isinstance(other, _BFloat16)

    def __hash__(self):
        return hash(_BFloat16)


# Tile dimensions travel in the type of a flat tuple (a nested one cannot enter a prange body):
# MR Python ints, NV floats and W bools (int64, float64 and boolean to numba); the values are
# never read.  Python scalars, because numba's dispatcher types such a tuple several times
# faster than one of numpy int8/int16/int32 scalars, on every call.
_DIM_TYPES = (types.int64, types.float64, types.boolean)

# Columns of B that ``copy_cols`` reads at once (its docstring says why).
COLS_AT_ONCE = 16


def tile_shape(mr: int, nv: int, lanes: int) -> tuple:
    """The tile argument of ``vector_tile``: MR rows, NV vectors of ``lanes`` elements a row."""
    return (0,) * mr + (0.0,) * nv + (False,) * lanes


def _dims(shape, kinds) -> tuple[int, ...] | None:
    """How many of each of ``kinds`` a flat tuple type holds; ``None`` unless it holds only
    those, each at least once."""
    if not isinstance(shape, types.BaseTuple):
        return None
    dims = tuple(sum(t == d for t in shape.types) for d in kinds)
    if sum(dims) != len(shape) or 0 in dims:
        return None
    return dims


def _tile_dims(tile) -> tuple[int, int, int] | None:
    return _dims(tile, _DIM_TYPES)


def tile_rows(tile):  # pragma: no cover - overloaded below
    raise NotImplementedError


def tile_cols(tile):  # pragma: no cover - overloaded below
    raise NotImplementedError


@helper_overload(tile_rows, inline="always")
def _tile_rows_ov(tile):
    """MR of a tile, as a constant."""
    dims = _tile_dims(tile)
    if dims is None:
        return None
    mr = dims[0]
    return lambda tile: mr


@helper_overload(tile_cols, inline="always")
def _tile_cols_ov(tile):
    """NV * W of a tile (the columns of a block), as a constant."""
    dims = _tile_dims(tile)
    if dims is None:
        return None
    nr = dims[1] * dims[2]
    return lambda tile: nr


@intrinsic
def vector_tile(typingctx, a, ao, a_rs, a_cs, b, bo, b_rs, c, co, c_rs, K, rows, tile, onto, skip):
    """C block ``c[co + r * c_rs + j]`` (r < ``rows``, j < NV * W) =
    ``sum_k a[ao + min(r, rows - 1) * a_rs + k * a_cs] * b[bo + k * b_rs + j]``, k < ``K``,
    or with ``onto`` (a run-time flag) that sum continued from the block's stored values: each
    row's accumulators start from its row of C (a row past ``rows`` from the last row's), so
    blocks of k run one after another extend every element's chain of fused multiply-adds in
    order of k, the same chain as one block of all of K.  The first ``skip`` columns of each
    row are computed but not stored (masked stores where ``skip`` > 0).

    ``a``, ``b`` and ``c`` are 1-D arrays of one type (float32/64 with fused multiply-adds, or
    32/64-bit integers with wrapping multiplies and adds); B rows and C rows are unit-stride
    (vector loads and stores), A is read one element at a time with any strides.  Rows past
    ``rows`` re-read the last row and are not stored, so every block runs at full height.
    ``K`` must be at least 1.  The sum runs in order of k, one FMA (one rounding) per term.

    bfloat16 pairs: with ``a`` and ``b`` uint32 arrays and ``c`` uint16 (bfloat16 bits; 16
    lanes, AVX512_BF16 only), each element of ``a`` and ``b`` holds two bfloat16 values, those
    of k = 2p (low half) and k = 2p + 1 (high half), and ``K`` counts pairs.  Each step is one
    ``vdpbf16ps``: ``acc = (acc + a_hi * b_hi) + a_lo * b_lo``, each product exact in float32
    and each sum rounded to nearest, which is two FMAs in that order, except that subnormal
    inputs read as zero and subnormal sums are flushed to zero: the caller makes sure neither
    can occur.  The float32 sums are rounded once to bfloat16 (``vcvtneps2bf16``: to nearest
    even, NaN stays NaN) as they are stored; ``onto`` must be false (C holds rounded sums).
    """
    dims = _tile_dims(tile)
    if dims is None:
        return None
    if not all(isinstance(x, types.Array) and x.ndim == 1 for x in (a, b, c)):
        return None
    dtype = a.dtype
    mr, nv, lanes = dims
    pairs = (dtype, b.dtype, c.dtype) == (types.uint32, types.uint32, types.uint16)
    if pairs:
        if lanes != 16:
            return None
    elif b.dtype != dtype or c.dtype != dtype:
        return None
    floating = dtype in (types.float32, types.float64)
    if not (floating or (isinstance(dtype, types.Integer) and dtype.bitwidth in (32, 64))):
        return None
    ints = (ao, a_rs, a_cs, bo, b_rs, co, c_rs, K, rows, skip)
    if not all(isinstance(x, types.Integer) for x in ints) or not isinstance(onto, types.Boolean):
        return None
    sig = types.void(a, ao, a_rs, a_cs, b, bo, b_rs, c, co, c_rs, K, rows, tile, onto, skip)

    def codegen(context, builder, signature, args):
        i64 = ir.IntType(64)
        argtys = signature.args

        def as_i64(i):
            return context.cast(builder, args[i], argtys[i], types.int64)

        def data(i):
            return context.make_array(argtys[i])(context, builder, args[i]).data

        ap, bp, cp = data(0), data(4), data(7)
        ao_, a_rs_, a_cs_, bo_, b_rs_, co_, c_rs_, k_, rows_, skip_ = (
            as_i64(i) for i in (1, 2, 3, 5, 6, 8, 9, 10, 11, 14)
        )
        ft = context.get_value_type(dtype)
        vt = ir.VectorType(ft, lanes)  # the operands' vectors
        vptr = vt.as_pointer()
        align = dtype.bitwidth // 8
        acct = vt  # the accumulators'
        c_vec = vt  # C's

        def finish(acc):
            return acc

        if pairs:
            acct = ir.VectorType(ir.FloatType(), lanes)
            bft = ir.VectorType(_BFloat16(), 2 * lanes)
            dot = cgutils.get_or_insert_function(
                builder.module,
                ir.FunctionType(acct, [acct, bft, bft]),
                "llvm.x86.avx512bf16.dpbf16ps.512",
            )
            to_bf16 = cgutils.get_or_insert_function(
                builder.module,
                ir.FunctionType(ir.VectorType(_BFloat16(), lanes), [acct]),
                "llvm.x86.avx512bf16.cvtneps2bf16.512",
            )
            c_vec = ir.VectorType(ir.IntType(16), lanes)

            def madd(x, y, acc):
                return builder.call(dot, [acc, builder.bitcast(x, bft), builder.bitcast(y, bft)])

            def finish(acc):  # noqa: F811 - the pairs' C is bfloat16
                return builder.bitcast(builder.call(to_bf16, [acc]), c_vec)

        elif floating:
            fma = vector_fma(builder, vt)

            def madd(x, y, acc):
                return builder.call(fma, [x, y, acc])
        else:  # integers wrap: vpmullq/vpmulld and vpaddq/vpaddd, exact modulo 2**bits

            def madd(x, y, acc):
                return builder.add(acc, builder.mul(x, y))

        zero = ir.Constant(acct, None)

        last = builder.sub(rows_, ir.Constant(i64, 1))
        starts = [zero] * (mr * nv)
        if not pairs:  # (the pairs' C holds rounded sums: their blocks take all of K)
            # the sums so far from C's rows (clamped as A's) with ``onto``, else zero
            flag = context.cast(builder, args[13], argtys[13], types.boolean)
            before = builder.block
            loaded = []
            with builder.if_then(flag):
                for r in range(mr):
                    rr = ir.Constant(i64, r)
                    rr = builder.select(builder.icmp_signed("<", rr, last), rr, last)
                    crow = builder.gep(cp, [builder.add(co_, builder.mul(rr, c_rs_))])
                    for v in range(nv):
                        ptr = builder.gep(crow, [ir.Constant(i64, v * lanes)])
                        loaded.append(builder.load(builder.bitcast(ptr, vptr), align=align))
                from_c = builder.block
            starts = []
            for x in loaded:
                phi = builder.phi(acct)
                phi.add_incoming(x, from_c)
                phi.add_incoming(zero, before)
                starts.append(phi)

        # Row pointers of A, the rows past ``rows`` clamped to the last one.
        arows = []
        for r in range(mr):
            rr = ir.Constant(i64, r)
            rr = builder.select(builder.icmp_signed("<", rr, last), rr, last)
            arows.append(builder.gep(ap, [builder.add(ao_, builder.mul(rr, a_rs_))]))
        bbase = builder.gep(bp, [bo_])

        entry = builder.block
        loop = builder.append_basic_block("k_loop")
        done = builder.append_basic_block("k_done")
        builder.branch(loop)
        builder.position_at_end(loop)
        k = builder.phi(i64)
        k.add_incoming(ir.Constant(i64, 0), entry)
        accs = []
        for start in starts:
            phi = builder.phi(acct)
            phi.add_incoming(start, entry)
            accs.append(phi)
        brow = builder.gep(bbase, [builder.mul(k, b_rs_)])
        bvecs = [
            builder.load(
                builder.bitcast(builder.gep(brow, [ir.Constant(i64, v * lanes)]), vptr),
                align=align,
            )
            for v in range(nv)
        ]
        ak = builder.mul(k, a_cs_)
        new = []
        for r in range(mr):
            x = builder.load(builder.gep(arows[r], [ak]), align=align)
            xs = vector_splat(builder, x, vt)
            for v in range(nv):
                new.append(madd(xs, bvecs[v], accs[r * nv + v]))
        k1 = builder.add(k, ir.Constant(i64, 1))
        k.add_incoming(k1, loop)
        for phi, val in zip(accs, new, strict=True):
            phi.add_incoming(val, loop)
        builder.cbranch(builder.icmp_signed("<", k1, k_), loop, done)

        builder.position_at_end(done)
        c_align = context.get_abi_alignment(c_vec.element)
        whole_rows = builder.icmp_signed("<=", skip_, ir.Constant(i64, 0))
        masked_store = cgutils.get_or_insert_function(
            builder.module,
            ir.FunctionType(ir.VoidType(), [c_vec, c_vec.as_pointer(), ir.IntType(32),
                                            ir.VectorType(ir.IntType(1), lanes)]),
            _masked_store_name(c_vec),
        )  # fmt: skip
        for r in range(mr):
            crow = builder.gep(cp, [builder.add(co_, builder.mul(ir.Constant(i64, r), c_rs_))])
            store_row = builder.icmp_signed("<", ir.Constant(i64, r), rows_)
            with builder.if_then(store_row, likely=True):
                for v in range(nv):
                    ptr = builder.gep(crow, [ir.Constant(i64, v * lanes)])
                    value, ptr = finish(new[r * nv + v]), builder.bitcast(ptr, c_vec.as_pointer())
                    with builder.if_else(whole_rows, likely=True) as (plain, masked):
                        with plain:
                            builder.store(value, ptr, align=c_align)
                        with masked:  # (lanes j with v * W + j >= skip)
                            lane = ir.Constant(ir.VectorType(i64, lanes),
                                               [v * lanes + j for j in range(lanes)])  # fmt: skip
                            mask = builder.icmp_signed(
                                ">=", lane, vector_splat(builder, skip_, lane.type)
                            )
                            builder.call(
                                masked_store,
                                [value, ptr, ir.Constant(ir.IntType(32), c_align), mask],
                            )
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def copy_rows(typingctx, dst, at, src, origin, stride, K, tile):
    """``dst[at + k * NR + j] = src[origin + k * stride + j]`` for k < ``K``, j < NR (the
    tile's columns): ``K`` rows of a strip of B copied to consecutive rows, one vector load and
    store a row (the plain loop stays scalar: LLVM cannot rule out that ``dst`` and ``src``
    overlap)."""
    dims = _tile_dims(tile)
    if dims is None or not all(isinstance(x, types.Array) and x.ndim == 1 for x in (dst, src)):
        return None
    ints = (at, origin, stride, K)
    if dst.dtype != src.dtype or not all(isinstance(x, types.Integer) for x in ints):
        return None
    nr = dims[1] * dims[2]
    sig = types.void(dst, at, src, origin, stride, K, tile)

    def codegen(context, builder, signature, args):
        i64 = ir.IntType(64)
        argtys = signature.args
        dp = context.make_array(argtys[0])(context, builder, args[0]).data
        sp = context.make_array(argtys[2])(context, builder, args[2]).data
        at_, origin_, stride_, k_ = (
            context.cast(builder, args[i], argtys[i], types.int64) for i in (1, 3, 4, 5)
        )
        vt = ir.VectorType(context.get_value_type(dst.dtype), nr)
        align = context.get_abi_alignment(vt.element)
        entry = builder.block
        loop = builder.append_basic_block("copy_rows")
        done = builder.append_basic_block("copy_done")
        builder.cbranch(builder.icmp_signed(">", k_, ir.Constant(i64, 0)), loop, done)
        builder.position_at_end(loop)
        k = builder.phi(i64)
        k.add_incoming(ir.Constant(i64, 0), entry)
        from_ = builder.gep(sp, [builder.add(origin_, builder.mul(k, stride_))])
        row = builder.load(builder.bitcast(from_, vt.as_pointer()), align=align)
        to = builder.gep(dp, [builder.add(at_, builder.mul(k, ir.Constant(i64, nr)))])
        builder.store(row, builder.bitcast(to, vt.as_pointer()), align=align)
        k1 = builder.add(k, ir.Constant(i64, 1))
        k.add_incoming(k1, loop)
        builder.cbranch(builder.icmp_signed("<", k1, k_), loop, done)
        builder.position_at_end(done)
        return context.get_dummy_value()

    return sig, codegen


class _Columns:
    """Code that reads a strip of a B of unit row stride (each column contiguous) a W x W
    block at a time (W the vector's elements) and transposes each block in registers:
    ``copy_cols`` and ``dot_cols``."""

    def __init__(self, context, builder, dtype, lanes: int, src, origin, stride):
        self.builder = builder
        self.lanes = lanes
        self.per_lane = min(lanes, 128 // dtype.bitwidth)  # (elements in 128 bits)
        self.vt = ir.VectorType(context.get_value_type(dtype), lanes)
        self.align = context.get_abi_alignment(self.vt.element)
        self.src, self.origin, self.stride = src, origin, stride

    def const(self, v):
        return ir.Constant(ir.IntType(64), v)

    def column(self, j):
        """Where column ``j`` of the strip starts in the source."""
        return self.builder.add(self.origin, self.builder.mul(self.const(j), self.stride))

    def load(self, start, k, vector: bool):
        """The vector (or the element) at ``start + k``."""
        b = self.builder
        ptr = b.gep(self.src, [b.add(start, k)])
        if vector:
            ptr = b.bitcast(ptr, self.vt.as_pointer())
        return b.load(ptr, align=self.align)

    def loop(self, name, first, last, step: int, body):
        """``for k in range(first, last, step): body(k)``."""
        b = self.builder
        before = b.block
        head = b.append_basic_block(name)
        after = b.append_basic_block(name + "_done")
        b.cbranch(b.icmp_signed("<", first, last), head, after)
        b.position_at_end(head)
        k = b.phi(ir.IntType(64))
        k.add_incoming(first, before)
        body(k)
        k1 = b.add(k, self.const(step))
        k.add_incoming(k1, b.block)
        b.cbranch(b.icmp_signed("<", k1, last), head, after)
        b.position_at_end(after)

    def walk(self, name, k_, block, row):
        """``block(k)`` for the W x W blocks of K, then ``row(k)`` for its last ``K % W``
        rows."""
        w = self.const(self.lanes)
        blocks = self.builder.mul(self.builder.sdiv(k_, w), w)
        self.loop(name, self.const(0), blocks, self.lanes, block)
        self.loop(name + "_rows", blocks, k_, 1, row)

    def transposed(self, rows):
        """``rows[r][p]`` as ``out[p][r]`` within each 128-bit lane (``per_lane`` vectors of
        ``per_lane`` elements a lane): the rounds of x86's unpacks (``_in_lane_rounds``),
        each output one two-vector shuffle."""
        b = self.builder

        def mask(m):
            return ir.Constant(ir.VectorType(ir.IntType(32), self.lanes), m)

        for (lo, hi), pairs in _in_lane_rounds(self.lanes, self.per_lane):
            lo, hi = mask(lo), mask(hi)
            out = list(rows)
            for g in range(0, len(rows), 2 * pairs):
                for q in range(pairs):
                    x, y = rows[g + q], rows[g + q + pairs]
                    out[g + 2 * q] = b.shuffle_vector(x, y, lo)
                    out[g + 2 * q + 1] = b.shuffle_vector(x, y, hi)
            rows = out
        return rows

    def block(self, starts, k):
        """The W x W block of rows ``k`` to ``k + W`` of the columns starting at ``starts``,
        in groups of E rows (E the elements in 128 bits): ``(first row, E vectors)``.  Vector
        ``i`` of a group is built from E elements of columns ``i``, ``i + E``, ... (one load
        of 128 bits each, the lanes put together as the loads are: ``vinsertf128`` from
        memory), then transposed within its lanes, so that only E vectors of a group are live
        at once and no shuffle crosses a lane: W / E - 1 shuffles put a vector together and
        log2(E) rounds transpose the lanes, 3 shuffles a vector with float32 on AVX2, as
        few as any transpose of 8 x 8 by two-input shuffles takes."""
        b, per_lane, lanes = self.builder, self.per_lane, self.lanes
        piece = ir.VectorType(self.vt.element, per_lane)
        for g in range(0, lanes, per_lane):
            at = b.add(k, self.const(g))
            vectors = []
            for i in range(per_lane):
                parts = []
                for c in range(i, lanes, per_lane):
                    ptr = b.bitcast(b.gep(self.src, [b.add(starts[c], at)]), piece.as_pointer())
                    parts.append(b.load(ptr, align=self.align))
                while len(parts) > 1:  # (pairs of pieces put together, halves, then wholes)
                    width = 2 * parts[0].type.count
                    both = ir.Constant(ir.VectorType(ir.IntType(32), width), list(range(width)))
                    parts = [b.shuffle_vector(parts[j], parts[j + 1], both)
                             for j in range(0, len(parts), 2)]  # fmt: skip
                vectors.append(parts[0])
            yield g, self.transposed(vectors)

    def row(self, starts, k):
        """Row ``k`` of the columns starting at ``starts``, as a vector, element by element."""
        b = self.builder
        v = ir.Constant(self.vt, ir.Undefined)
        for r, start in enumerate(starts):
            v = b.insert_element(v, self.load(start, k, False), self.const(r))
        return v


def _column_types(tile, arrays, ints):
    """``(NV, W)`` of ``tile`` where ``arrays`` are 1-D arrays of one dtype and ``ints``
    integers, else ``None`` (the typing of ``copy_cols`` and ``dot_cols``)."""
    dims = _tile_dims(tile)
    if dims is None or not all(isinstance(x, types.Array) and x.ndim == 1 for x in arrays):
        return None
    if len({x.dtype for x in arrays}) != 1 or not all(isinstance(x, types.Integer) for x in ints):
        return None
    return dims[1], dims[2]


@intrinsic
def copy_cols(typingctx, dst, at, dst_rs, src, origin, stride, K, tile):
    """``dst[at + k * dst_rs + j] = src[origin + k + j * stride]`` for k < ``K``, j < NR (the
    tile's columns): ``K`` rows of a strip of a B of unit row stride, each column contiguous
    (a transposed or Fortran-ordered B, the weights of ``x @ W.T``), copied to rows
    ``dst_rs`` apart (NR: consecutive rows, as ``copy_rows`` copies a B of unit column
    stride).

    The strip's columns are copied in groups of ``COLS_AT_ONCE`` (or one vector's), each
    group over all of K before the next: as many streams along B's columns as the
    prefetchers follow, their cache lines in distinct L1 ways (64 columns at once, a set
    of L1 took more lines than it has ways when the columns were 3 KiB apart, and the copy
    ran at half the speed).  Per W x W block (W the vector's elements): W vector loads along
    k, a transpose in registers (``_Columns.transposed``), W vector stores; the last
    ``K % W`` rows one element at a time."""
    dims = _column_types(tile, (dst, src), (at, dst_rs, origin, stride, K))
    if dims is None:
        return None
    nv, lanes = dims
    group = max(1, COLS_AT_ONCE // lanes)  # (vectors of columns a group)
    sig = types.void(dst, at, dst_rs, src, origin, stride, K, tile)

    def codegen(context, builder, signature, args):
        argtys = signature.args
        dp = context.make_array(argtys[0])(context, builder, args[0]).data
        sp = context.make_array(argtys[3])(context, builder, args[3]).data
        at_, dst_rs_, origin_, stride_, k_ = (
            context.cast(builder, args[i], argtys[i], types.int64) for i in (1, 2, 4, 5, 6)
        )
        cols = _Columns(context, builder, dst.dtype, lanes, sp, origin_, stride_)
        const = cols.const

        def store(value, row, j, vector):  # dst[at + row * dst_rs + j] = value
            to = builder.add(builder.add(at_, builder.mul(row, dst_rs_)), const(j))
            ptr = builder.gep(dp, [to])
            if vector:
                ptr = builder.bitcast(ptr, cols.vt.as_pointer())
            builder.store(value, ptr, align=cols.align)

        for g0 in range(0, nv, group):
            vectors = range(g0, min(nv, g0 + group))
            starts = {v: [cols.column(j) for j in range(v * lanes, (v + 1) * lanes)]
                      for v in vectors}  # fmt: skip

            def blocks(k, vectors=vectors, starts=starts):
                for v in vectors:
                    for g, rows in cols.block(starts[v], k):
                        for r, row in enumerate(rows):
                            store(row, builder.add(k, const(g + r)), v * lanes, True)

            def rest(k, vectors=vectors, starts=starts):
                for v in vectors:
                    for r, start in enumerate(starts[v]):
                        store(cols.load(start, k, False), k, v * lanes + r, False)

            cols.walk("copy_cols", k_, blocks, rest)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def dot_cols(typingctx, a, ao, a_cs, b, origin, stride, K, c, co, tile):
    """``c[co + j] = sum_k a[ao + k * a_cs] * b[origin + k + j * stride]`` for j < NR (the
    tile's columns), k < ``K`` (at least 1): one row of A times a strip of a B of unit row
    stride (``copy_cols``'s B), each element the chain of fused multiply-adds over k in
    order, from zero, as every path keeps it.  Each W x W block of B is transposed in
    registers and its W rows feed the NV accumulators' chains in turn, so B is read once,
    never stored: the NV chains, one per vector of columns, carry the latency (a chain does
    W dependent FMAs a block).  The last ``K % W`` rows are read one element at a time."""
    dims = _column_types(tile, (a, b, c), (ao, a_cs, origin, stride, K, co))
    if dims is None or not isinstance(a.dtype, types.Float):
        return None
    nv, lanes = dims
    sig = types.void(a, ao, a_cs, b, origin, stride, K, c, co, tile)

    def codegen(context, builder, signature, args):
        argtys = signature.args
        ap, bp, cp = (context.make_array(argtys[i])(context, builder, args[i]).data
                      for i in (0, 3, 7))  # fmt: skip
        ao_, acs_, origin_, stride_, k_, co_ = (
            context.cast(builder, args[i], argtys[i], types.int64) for i in (1, 2, 4, 5, 6, 8)
        )
        cols = _Columns(context, builder, a.dtype, lanes, bp, origin_, stride_)
        const, vt = cols.const, cols.vt
        fma = vector_fma(builder, vt)
        starts = [[cols.column(j) for j in range(v * lanes, (v + 1) * lanes)] for v in range(nv)]
        acc = [ir.Constant(vt, None) for _ in range(nv)]
        slots = [cgutils.alloca_once_value(builder, x) for x in acc]  # (promoted to registers)

        def a_at(k):
            at = builder.add(ao_, builder.mul(k, acs_))
            return vector_splat(builder, builder.load(builder.gep(ap, [at])), vt)

        def blocks(k):
            for v, slot in enumerate(slots):  # (one block's vectors live at a time)
                total = builder.load(slot)
                for g, rows in cols.block(starts[v], k):
                    for r, row in enumerate(rows):
                        total = builder.call(fma, [a_at(builder.add(k, const(g + r))), row, total])
                builder.store(total, slot)

        def rest(k):
            x = a_at(k)
            for v, slot in enumerate(slots):
                builder.store(builder.call(fma, [x, cols.row(starts[v], k), builder.load(slot)]),
                              slot)  # fmt: skip

        cols.walk("dot_cols", k_, blocks, rest)
        for v, slot in enumerate(slots):
            ptr = builder.gep(cp, [builder.add(co_, const(v * lanes))])
            builder.store(builder.load(slot), builder.bitcast(ptr, vt.as_pointer()),
                          align=cols.align)  # fmt: skip
        return context.get_dummy_value()

    return sig, codegen


def _in_lane_rounds(lanes: int, per_lane: int) -> list:
    """The rounds of ``copy_cols``'s transpose inside each 128-bit lane of ``per_lane``
    elements, as x86's unpack instructions do them, one instruction per output: ``((lo, hi),
    pairs)``, the two shuffle masks that the vectors ``r`` and ``r + pairs`` of each group of
    ``2 * pairs`` give.  Four elements a lane: 32-bit then 64-bit unpacks; two: 64-bit ones.
    Then each vector's lane ``l`` holds one column of the lane's rows."""
    rounds = []
    lanes_of = range(lanes // per_lane)
    if per_lane == 4:  # (vunpcklps / vunpckhps)
        lo = [i for b in lanes_of for i in (4 * b, lanes + 4 * b, 4 * b + 1, lanes + 4 * b + 1)]
        hi = [i + 2 for i in lo]
        rounds.append(((lo, hi), 1))
    if per_lane >= 2:  # (vunpcklpd / vunpckhpd, or their 32-bit pairs)
        h = per_lane // 2
        lo = [per_lane * b + x + side for b in lanes_of for side in (0, lanes) for x in range(h)]
        hi = [i + h for i in lo]
        rounds.append(((lo, hi), per_lane // 2))
    return rounds


def _masked_store_name(vt) -> str:
    """LLVM's masked store intrinsic for vectors of type ``vt`` (typed pointers)."""
    e = vt.element
    kind = f"i{e.width}" if isinstance(e, ir.IntType) else {"float": "f32", "double": "f64"}[str(e)]
    return f"llvm.masked.store.v{vt.count}{kind}.p0v{vt.count}{kind}"


# --- whole tiny matrices ----------------------------------------------------------------------
# A tiny product's shape is compiled into a function of its own (``define_whole``), which the
# one parallel kernel per dtype calls through its address (``call_whole``).  As a type
# parameter of the kernel, every new (M, K, N) cost a whole parallel kernel's compilation; a
# function of straight-line vector code compiles in tens of milliseconds, once per process: it
# is not kept in numba's cache (the figures: docs/design.md, "Compile time").


def define_whole(module, name: str, ft, m: int, k: int, nv: int, lanes: int, group: int):
    """Define in ``module`` the function ``name``, ``void (T* a, i64* a_off, i64 a_rs, T* b,
    i64* b_off, i64 b_rs, T* c, i64 first, i64 last)`` over the float type ``ft``: ``c[bi]`` =
    A[bi] @ B[bi] for batch entries ``first <= bi < last`` of M x K times K x (NV * W)
    matrices, W = ``lanes``, in groups of ``group`` rows of C.

    A is ``a[a_off[bi] + i * a_rs + k]`` (unit column stride), B ``b[b_off[bi] + k * b_rs +
    j]``, C the C-contiguous ``c[bi * M * N + i * N + j]``.  The whole product is straight-line
    code: per group of rows and k, NV vector loads of a B row and a splat of A per row, NV fused
    multiply-adds per row (in order of k, as ``vector_tile``), the group's sums in registers,
    each C row stored once.  With nothing left per matrix but two offset loads, consecutive
    products overlap in the core, faster than on ``vector_tile``'s blocks, whose per-block
    setup outweighed 64 FMAs of an 8 x 8 x 8 product.  (A's unit stride as a constant lets
    every load of A take an immediate offset, which is faster.  With 8 rows or more, row
    pointers spill from the general registers; the row strides as constants too spilled none,
    and ran no faster.)  The measurements: docs/design.md, "Tiny matrices whole".
    """
    i64 = ir.IntType(64)
    ptr, iptr = ft.as_pointer(), i64.as_pointer()
    fnty = ir.FunctionType(ir.VoidType(), [ptr, iptr, i64, ptr, iptr, i64, ptr, i64, i64])
    fn = ir.Function(module, fnty, name)
    fn.attributes.add("nounwind")
    ap, aoff, a_rs, bp, boff, b_rs, cp, first, last = fn.args
    vt = ir.VectorType(ft, lanes)
    align = 8 if isinstance(ft, ir.DoubleType) else 4
    n = nv * lanes

    def const(v):
        return ir.Constant(i64, v)

    entry = fn.append_basic_block("entry")
    loop = fn.append_basic_block("batch_loop")
    done = fn.append_basic_block("batch_done")
    builder = ir.IRBuilder(entry)
    fma = vector_fma(builder, vt)
    builder.cbranch(builder.icmp_signed("<", first, last), loop, done)
    builder.position_at_end(loop)
    bi = builder.phi(i64)
    bi.add_incoming(first, entry)
    abase = builder.gep(ap, [builder.load(builder.gep(aoff, [bi]))])
    bbase = builder.gep(bp, [builder.load(builder.gep(boff, [bi]))])
    cbase = builder.gep(cp, [builder.mul(bi, const(m * n))])
    arows = [builder.gep(abase, [builder.mul(const(r), a_rs)]) for r in range(m)]
    for r0 in range(0, m, group):
        rows = range(r0, min(m, r0 + group))
        acc = {r: [None] * nv for r in rows}
        for kk in range(k):
            brow = builder.gep(bbase, [builder.mul(const(kk), b_rs)])
            bvecs = [
                builder.load(
                    builder.bitcast(builder.gep(brow, [const(v * lanes)]), vt.as_pointer()),
                    align=align,
                )  # fmt: skip
                for v in range(nv)
            ]
            for r in rows:
                x = builder.load(builder.gep(arows[r], [const(kk)]), align=align)
                xs = vector_splat(builder, x, vt)
                for v in range(nv):
                    prev = acc[r][v] if kk else ir.Constant(vt, None)
                    acc[r][v] = builder.call(fma, [xs, bvecs[v], prev])
        for r in rows:
            for v in range(nv):
                ptr_ = builder.gep(cbase, [const(r * n + v * lanes)])
                builder.store(acc[r][v], builder.bitcast(ptr_, vt.as_pointer()), align=align)
    nxt = builder.add(bi, const(1))
    bi.add_incoming(nxt, builder.block)
    builder.cbranch(builder.icmp_signed("<", nxt, last), loop, done)
    builder.position_at_end(done)
    builder.ret_void()
    return fn


@intrinsic
def call_whole(typingctx, fn, a, a_off, a_rs, b, b_off, b_rs, c, first, last):
    """Call the function at address ``fn`` (made by ``define_whole``) on the 1-D arrays
    ``a``, ``a_off``, ``b``, ``b_off``, ``c`` and integers ``a_rs``, ``b_rs``, ``first``,
    ``last``."""
    arrays = (a, a_off, b, b_off, c)
    if not all(isinstance(x, types.Array) and x.ndim == 1 for x in arrays):
        return None
    dtype = a.dtype
    if dtype not in (types.float32, types.float64) or b.dtype != dtype or c.dtype != dtype:
        return None
    if a_off.dtype != types.int64 or b_off.dtype != types.int64:
        return None
    if not all(isinstance(x, types.Integer) for x in (fn, a_rs, b_rs, first, last)):
        return None
    sig = types.void(fn, a, a_off, a_rs, b, b_off, b_rs, c, first, last)

    def codegen(context, builder, signature, args):
        argtys = signature.args
        values = []
        for i, ty in enumerate(argtys[1:], 1):
            if isinstance(ty, types.Array):
                values.append(context.make_array(ty)(context, builder, args[i]).data)
            else:
                values.append(context.cast(builder, args[i], ty, types.int64))
        fnty = ir.FunctionType(ir.VoidType(), [v.type for v in values])
        target = builder.inttoptr(context.cast(builder, args[0], argtys[0], types.int64),
                                  fnty.as_pointer())  # fmt: skip
        builder.call(target, values)
        return context.get_dummy_value()

    return sig, codegen
