"""Arrays for kernels built in place: fixed-size scratch on the stack (no allocation, and no
aliasing doubts), heap scratch, and views.

numba compiles its own ``np.empty``, ``numba.carray`` and ``reshape`` as functions of their own
(with Python wrappers and machine code) on a kernel's first compile; these intrinsics emit the
few instructions each needs into the function that uses them (what each saves:
docs/design.md, "Compile time")."""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.core.imputils import impl_ret_borrowed, impl_ret_new_ref
from numba.extending import intrinsic
from numba.np.arrayobj import make_array, populate_array


def _dtype_of(proto):
    """The element type a prototype names: an array's dtype, or a scalar's own type."""
    return proto.dtype if isinstance(proto, types.Array) else proto


def _count_and_dtype(n, proto):
    """(element count, element type) of a scratch request, or None if ``n`` is not a literal."""
    if not isinstance(n, types.IntegerLiteral):
        return None
    return n.literal_value, _dtype_of(proto)


def _one_dim(context, builder, array_type, data, count, meminfo):
    """The value of a 1-D C-contiguous ``array_type`` over ``count`` elements at ``data``,
    owned through ``meminfo`` (None: owned by nobody)."""
    itemsize = context.get_constant(
        types.intp, context.get_abi_sizeof(context.get_value_type(array_type.dtype))
    )
    array = make_array(array_type)(context, builder)
    populate_array(
        array, data=data, shape=[count], strides=[itemsize], itemsize=itemsize, meminfo=meminfo
    )
    return array._getvalue()


def _alloca(context, builder, dtype, count):
    """A pointer to ``count`` uninitialised ``dtype`` elements in the current function's frame."""
    elem = context.get_value_type(dtype)
    buf = cgutils.alloca_once(builder, ir.ArrayType(elem, count))
    return builder.bitcast(buf, elem.as_pointer())


@intrinsic
def stack_array(typingctx, n, proto):
    """A 1-D array of ``n`` (a compile-time constant) uninitialised elements on the stack of
    the function it is compiled into, of ``proto``'s dtype (an array) or type (a scalar);
    ``c_view`` gives it more dimensions.

    Indexed by constants after unrolling, a stack array is promoted to registers; a heap array
    never is, since LLVM cannot prove it does not alias the kernel's other arrays.  Built in
    place: ``numba.carray`` over a pointer would compile its implementation (with a Python
    wrapper and machine code of its own) for each signature on first use, in a kernel's first
    compile.  The array owns nothing and must not outlive that function's frame.
    """
    request = _count_and_dtype(n, proto)
    if request is None:
        return None
    count, dtype = request
    array_type = types.Array(dtype, 1, "C")

    def codegen(context, builder, signature, args):
        data = _alloca(context, builder, dtype, count)
        size = context.get_constant(types.intp, count)
        return _one_dim(context, builder, array_type, data, size, None)

    return array_type(n, proto), codegen


@intrinsic
def c_view(typingctx, arr, shape):
    """A C-contiguous view with ``shape`` (an integer or a tuple of integers) of the first
    elements of the C-contiguous array ``arr``, sharing its memory.

    ``arr.reshape(shape)`` where the caller knows that the shape fits: numba compiles
    ``reshape``'s implementation and its shape check (with a Python wrapper and machine code of
    their own) on first use, in a kernel's first compile.
    """
    if not (isinstance(arr, types.Array) and arr.layout == "C"):
        return None
    dims = list(shape) if isinstance(shape, types.BaseTuple) else [shape]
    if not all(isinstance(d, types.Integer) for d in dims):
        return None
    view_type = arr.copy(ndim=len(dims), layout="C")

    def codegen(context, builder, signature, args):
        arrty, shapety = signature.args
        source = make_array(arrty)(context, builder, args[0])
        intp = types.intp
        if isinstance(shapety, types.BaseTuple):
            items = cgutils.unpack_tuple(builder, args[1], len(shapety))
            sizes = [context.cast(builder, v, t, intp) for v, t in zip(items, shapety)]
        else:
            sizes = [context.cast(builder, args[1], shapety, intp)]
        itemsize = source.itemsize
        strides = [itemsize]
        for size in reversed(sizes[1:]):
            strides.insert(0, builder.mul(strides[0], size))
        view = make_array(signature.return_type)(context, builder)
        populate_array(
            view,
            data=source.data,
            shape=sizes,
            strides=strides,
            itemsize=itemsize,
            meminfo=source.meminfo,
            parent=source.parent,
        )
        return impl_ret_borrowed(context, builder, signature.return_type, view._getvalue())

    return view_type(arr, shape), codegen


@intrinsic
def heap_array(typingctx, n, proto):
    """A 1-D C-contiguous array of ``n`` (at least 0, and small enough that its byte count does
    not overflow) uninitialised elements on the heap, of ``proto``'s dtype (an array) or type
    (a scalar), freed when its last reference goes, as any array numba allocates.

    ``np.empty(n, dtype)`` without numba's implementation of it and of its allocator, which
    would be compiled in a kernel's first compile.
    """
    if not isinstance(n, types.Integer):
        return None
    dtype = _dtype_of(proto)
    array_type = types.Array(dtype, 1, "C")

    def codegen(context, builder, signature, args):
        count = context.cast(builder, args[0], signature.args[0], types.intp)
        element = context.get_value_type(dtype)
        nbytes = builder.mul(
            count, context.get_constant(types.intp, context.get_abi_sizeof(element))
        )
        meminfo = context.nrt.meminfo_alloc_aligned(
            builder, nbytes, context.get_preferred_array_alignment(dtype)
        )
        data = builder.bitcast(context.nrt.meminfo_data(builder, meminfo), element.as_pointer())
        array = _one_dim(context, builder, array_type, data, count, meminfo)
        return impl_ret_new_ref(context, builder, array_type, array)

    return array_type(n, proto), codegen


@intrinsic
def view_as(typingctx, arr, like):
    """``arr`` (a 1-D C-contiguous array) typed as ``like``, a 1-D C-contiguous array of the
    same dtype that may differ in being read-only: a scratch buffer the kernel filled, passed
    where the operand it copies goes, so that the code that reads them is compiled once."""
    ok = all(isinstance(x, types.Array) and x.ndim == 1 and x.layout == "C" for x in (arr, like))
    if not ok or arr.dtype != like.dtype:
        return None

    def codegen(context, builder, signature, args):
        return impl_ret_borrowed(context, builder, like, args[0])

    return like(arr, like), codegen
