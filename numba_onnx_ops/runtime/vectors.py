"""LLVM vector and cache-line primitives that kernels of both operators emit: ``llvm.fma`` on
vectors, a scalar splatted across a vector, cache-line prefetches, an address's place in a
cache line or a page."""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

LINE = 64  # bytes in a cache line, and in one full AVX-512 store
PAGE = 4096  # bytes in a page


def vector_fma(builder, vt):
    """``llvm.fma`` on the float vector type ``vt``."""
    bits = 64 if isinstance(vt.element, ir.DoubleType) else 32
    name = f"llvm.fma.v{vt.count}f{bits}"
    return cgutils.get_or_insert_function(builder.module, ir.FunctionType(vt, [vt] * 3), name)


def vector_splat(builder, x, vt):
    """The scalar ``x`` in every lane of ``vt`` (insertelement and shufflevector: one
    broadcast, from memory where ``x`` was just loaded)."""
    undef = ir.Constant(vt, ir.Undefined)
    mask = ir.Constant(ir.VectorType(ir.IntType(32), vt.count), None)
    return builder.shuffle_vector(builder.insert_element(undef, x, ir.Constant(ir.IntType(64), 0)),
                                  undef, mask)  # fmt: skip


def _prefetch_rows_function(module, write: bool = True):
    """``void (i8* p, i64 rows, i64 stride, i64 bytes)``: ``prefetchw`` (or, for reading,
    ``prefetcht1``) on the cache lines of ``rows`` rows of ``bytes`` bytes from ``p``,
    ``stride`` bytes apart.  One function per module and kind, never inlined: its loops stay a
    call, out of every copy LLVM makes of the caller (inlined, the unrolled hints grew a
    kernel's machine code and its compile time: docs/design.md, "Compile time")."""
    name = "numba_onnx_ops.prefetch_rows_for_" + ("write" if write else "read")
    fn = module.globals.get(name)
    if fn is not None:
        return fn
    i8p, i32, i64 = ir.IntType(8).as_pointer(), ir.IntType(32), ir.IntType(64)
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [i8p, i64, i64, i64]), name)
    fn.linkage = "internal"
    fn.attributes.add("noinline")
    hint = cgutils.get_or_insert_function(
        module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]), "llvm.prefetch.p0i8"
    )
    p, rows, stride, nbytes = fn.args
    builder = ir.IRBuilder(fn.append_basic_block("entry"))
    zero, line = ir.Constant(i64, 0), ir.Constant(i64, LINE)
    # (read or write; kept in every cache level for writing, in L2 and beyond for reading)
    rw, locality = ir.Constant(i32, int(write)), ir.Constant(i32, 3 if write else 2)
    with cgutils.for_range(builder, rows) as row:
        start = builder.gep(p, [builder.mul(row.index, stride)])
        with cgutils.for_range_slice(builder, zero, nbytes, line) as (offset, _):
            at = builder.gep(start, [offset])
            builder.call(hint, [at, rw, locality, ir.Constant(i32, 1)])  # (data)
    builder.ret_void()
    return fn


def _prefetch_rows(write: bool):
    def typer(typingctx, arr, index, rows, stride, count):
        ints = (index, rows, stride, count)
        if not (isinstance(arr, types.Array) and all(isinstance(x, types.Integer) for x in ints)):
            return None
        sig = types.void(arr, index, rows, stride, count)

        def codegen(context, builder, signature, args):
            size = context.get_abi_sizeof(context.get_data_type(signature.args[0].dtype))
            i64 = ir.IntType(64)
            index_, rows_, stride_, count_ = (
                context.cast(builder, args[i], signature.args[i], types.int64) for i in range(1, 5)
            )
            data = context.make_array(signature.args[0])(context, builder, args[0]).data
            at = builder.bitcast(builder.gep(data, [index_]), ir.IntType(8).as_pointer())
            scale = ir.Constant(i64, size)
            nbytes, step = builder.mul(count_, scale), builder.mul(stride_, scale)
            fn = _prefetch_rows_function(builder.module, write)
            builder.call(fn, [at, rows_, step, nbytes])
            return context.get_dummy_value()

        return sig, codegen

    typer.__name__ = typer.__qualname__ = "prefetch_rows_for_" + ("write" if write else "read")
    return typer


prefetch_rows_for_write = intrinsic(_prefetch_rows(True))
prefetch_rows_for_write.__doc__ = """Ask for the cache lines of ``rows`` rows of ``count``
elements of ``arr``, the first at ``index`` and each ``stride`` elements after the one before,
in L1 and ready to be written (``prefetchw``): hints only, which never fault, whatever the
indices."""
prefetch_rows_for_read = intrinsic(_prefetch_rows(False))
prefetch_rows_for_read.__doc__ = """As ``prefetch_rows_for_write``, for data to be read, into
L2 (``prefetcht1``): a block to come, without evicting the one in L1."""


def _address_modulo(size: int, name: str):
    def typer(typingctx, arr, index):
        if not (isinstance(arr, types.Array) and isinstance(index, types.Integer)):
            return None

        def codegen(context, builder, signature, args):
            i64 = ir.IntType(64)
            data = context.make_array(signature.args[0])(context, builder, args[0]).data
            index_ = context.cast(builder, args[1], signature.args[1], types.int64)
            at = builder.ptrtoint(builder.gep(data, [index_]), i64)
            return builder.and_(at, ir.Constant(i64, size - 1))

        return types.int64(arr, index), codegen

    typer.__name__ = typer.__qualname__ = name
    return typer


line_misalignment = intrinsic(_address_modulo(LINE, "line_misalignment"))
line_misalignment.__doc__ = """The address of ``arr[index]`` modulo ``LINE``."""
page_offset = intrinsic(_address_modulo(PAGE, "page_offset"))
page_offset.__doc__ = """The address of ``arr[index]`` modulo ``PAGE``: the bits in which the
CPU first matches a load against the stores before it."""
