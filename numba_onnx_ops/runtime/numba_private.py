"""Every use of numba internals that are not public API, each with its fallback.

Checked against the sources of numba 0.60.0 and 0.68.1 (the oldest and newest versions this
package was tried with); the attributes below exist and behave as described in both.

- ``Dispatcher._cache._cache_file`` (a ``numba.core.caching.IndexDataCacheFile``) and its
  ``_source_stamp``: the index of a cached kernel is saved with this stamp and ignored when the
  stamp read back differs (``_load_index``).  :func:`stamp_cache_index` widens it to every file a
  kernel inlines.  Without it numba would check only the kernel's own file and could load stale
  machine code after an edit or upgrade of an inlined helper, so where the attributes are missing
  the kernels are compiled without the on-disk cache (slower first calls, never stale code).
- ``Dispatcher._cache.load_overload`` (the ``numba.core.caching.FunctionCache`` method that
  ``Dispatcher.compile`` calls for a signature it has not compiled), the ``signature`` of the
  ``CompileResult`` it returns, and ``numba.core.sigutils.normalize_signature``:
  :func:`check_cache_loads` refuses a loaded result compiled for other argument types.  The index
  names one data file per signature, but two processes that save new signatures of one kernel at
  once can take the same file name, and the index one of them writes can then name the data file
  the other wrote: another signature's machine code, which numba would register and call with
  the arguments (a ``TypeError``, "can't unbox array", where an array's item size differs; wrong
  values where it does not).  Where these are missing, the kernels are compiled without the
  on-disk cache.
- ``numba.core.config.reload_config``, ``numba.core.config.SLP_VECTORIZE`` and
  ``numba.core.compiler_lock.global_compiler_lock``: :func:`compile_with_slp` turns LLVM's SLP
  vectorizer on for one compilation.  Where they are missing, the kernel compiles without SLP:
  the same results, slower small products.
- ``numba.core.cgutils`` and ``numba.np.arrayobj.make_array``/``populate_array``
  (``runtime.stack``): the helpers numba's low-level extension examples use for code
  generation and to build an array over memory they own; an import error there names the module.
- The C symbol ``set_parallel_chunksize`` (``runtime.schedule``): the function behind
  ``numba.set_parallel_chunksize``, which numba registers with LLVM when it starts its threading
  layer and which its own parfor code calls by that name.  A kernel calls it the same way, since
  the public function, called from a kernel, goes through a ctypes pointer that numba's on-disk
  cache refuses.
- The C symbols ``get_thread_id`` and ``get_num_threads`` (``runtime.schedule``): the
  functions numba's own ``numba.get_thread_id()`` and internal ``_iget_num_threads`` compile to,
  registered by the same start of the threading layer (which ``spread`` forces at compile time
  through the public ``numba.get_num_threads()``).
- ``CompileResult.library.get_pointer_to_function``, ``CompileResult.fndesc.llvm_func_name`` and
  the CPU calling convention's ``get_function_type``, ``get_return_type``, ``_get_arg_packer``
  and ``_get_return_status`` (:func:`compiled_address`, :func:`call_compiled`): the own pool's
  workers call a kernel's twin by the address of its machine code, as numba's own calls of one
  compiled function from another do by name.  Where they are missing, the pool is not used
  (``runtime.pool.available``) and kernels launch on the threading layer.
- ``numba.np.ufunc.parallel._get_num_threads`` (:func:`threads_now`): the ctypes function
  ``numba.get_num_threads`` returns after starting the layer and checking the count, the calling
  thread's count of threads for parallel loops (a seventh of the public function's cost).
  Where missing, the public function.
- ``Dispatcher.overloads[signature].entry_point`` (:func:`entry_point`): the compiled wrapper
  of one signature, which numba's dispatcher itself calls once it has matched the arguments'
  types.  Called directly by a plan whose arguments always have those types, it skips the
  matching, a third of a small call's dispatch.  The wrapper still unboxes each argument as its
  type says (a wrong type raises ``TypeError``).  Where missing, the dispatcher is called.

- Helpers compiled for linking only (:func:`link_only_jit`, :data:`LINK_ONLY_OPTIONS`): numba
  compiles every ``@njit`` function and ``@overload`` implementation a kernel calls as if it
  were called from Python: a CPython and a C wrapper, then the whole module (with everything it
  links) optimized and turned into machine code, only for the kernel to link the LLVM module and
  inline it.  The helpers here take the path numba's own ``BaseContext.compile_subroutine``
  takes for its internal implementations: the ``no_compile`` lowering (``_LowerResult``,
  ``BaseContext.insert_user_function``), a ``CPUCodeLibrary`` whose finalization stops after
  linking (no ``_optimize_final_module``, no ``_finalize_final_module``: the kernel optimizes
  the whole once), and ``numba._dynfunc.make_function``
  for the entry the dispatcher's table needs, which, as for numba's own overloads, has no
  Python wrapper behind it: njit helpers therefore use a dispatcher that refuses calls from
  Python.  A Pow kernel's first compile is markedly shorter.  The overloads that users'
  ``@njit`` functions call are compiled the same way: the user's function is the kernel that
  links and optimizes them once.  Where any of these is missing,
  helpers compile as plain ``numba.njit`` functions (the same results, slower first calls).
- Kernels compiled with deferred libraries (:data:`KERNEL_OPTIONS`): numba lowers a parallel
  loop as a body function, a gufunc wrapper that links the body and a parallel wrapper that
  links that, each a ``JITCodeLibrary`` whose ``finalize`` links what it uses, optimizes the
  result (``_optimize_final_module``) and makes it machine code (``_finalize_final_module``),
  and then the kernel's library does all that once more over everything.  A kernel's pipeline
  here is numba's nopython pipeline whose ``NativeParforLowering`` runs with the codegen's
  ``_library_class`` set to ``_DeferredLibrary``, which postpones both steps until its machine
  code is asked for (``get_pointer_to_function``, ``serialize_using_object_code``,
  ``get_asm_str``).  The wrappers' never is: their code is optimized and made machine code as
  part of the kernel.  (The body's is: ``CPUContext.get_executable`` takes the address of its
  Python entry and stores its environment in the body's own machine code.)  Where any of these
  is missing, kernels compile with numba's own pipeline.

  With both, and the kernels' arrays made in place (``runtime.stack``), first calls in a fresh
  process take markedly less time than with numba's own pipelines, and the kernels run as fast
  (the measurements: docs/design.md, "Compile time"; ``bench --targets``, first calls).

- Functions compiled from LLVM IR built here (:func:`native_function`): the CPU target's code
  generator (``numba.core.registry.cpu_target.target_context.codegen()``), a code library it
  makes (``create_library``, ``create_ir_module``, ``add_ir_module``, ``finalize``,
  ``get_pointer_to_function``: the calls numba's own lowering makes), under numba's compiler
  lock.  Kernels call such a function through its address, passed as an integer; where these
  are missing, the caller takes a path that needs none (the same results, slower tiny
  products).

The threading layer is read through the public ``numba.threading_layer()`` (see
``runtime.parallel``).
"""

from __future__ import annotations

import contextlib
import warnings

import numba
from numba import types
from numba.core import cgutils

CHECKED_ON = ("0.60.0", "0.68.1")

try:
    from numba.core import config as _config
    from numba.core.compiler_lock import global_compiler_lock as _compiler_lock

    _HAVE_SLP_SWITCH = hasattr(_config, "reload_config") and hasattr(_config, "SLP_VECTORIZE")
except ImportError:
    _HAVE_SLP_SWITCH = False

_cache_warned = False


def stamp_cache_index(dispatcher, stamp: bytes) -> bool:
    """Add ``stamp`` to the freshness stamp of ``dispatcher``'s on-disk cache index.

    Returns ``False`` (after one warning per process) when this numba keeps the stamp elsewhere:
    the caller must then not use the on-disk cache.
    """
    try:
        index = dispatcher._cache._cache_file
        own = index._source_stamp
        callable(index._load_index)  # the method that compares the stamp read back
    except AttributeError:
        _warn_uncached()
        return False
    index._source_stamp = (own, stamp)
    return True


def check_cache_loads(dispatcher) -> bool:
    """Make ``dispatcher``'s on-disk cache serve only machine code compiled for the argument types
    asked for: a cached result of other types counts as a miss, so the kernel compiles, and
    numba's save then replaces the data file the index names.

    Returns ``False`` (after one warning per process) when this numba loads cached kernels
    elsewhere: the caller must then not use the on-disk cache.
    """
    try:
        from numba.core.sigutils import normalize_signature

        cache = dispatcher._cache
        load = cache.load_overload
    except (ImportError, AttributeError):
        _warn_uncached()
        return False

    def load_overload(sig, target_context):
        cres = load(sig, target_context)
        loaded = getattr(getattr(cres, "signature", None), "args", None)
        if loaded is None or tuple(loaded) != tuple(normalize_signature(sig)[0]):
            return None
        return cres

    cache.load_overload = load_overload
    return True


def _warn_uncached() -> None:
    global _cache_warned
    if not _cache_warned:
        _cache_warned = True
        warnings.warn(
            f"numba_onnx_ops: numba {numba.__version__} keeps its on-disk cache differently from "
            f"the versions this package was checked on ({', '.join(CHECKED_ON)}); its kernels "
            "compile without the on-disk cache (slower first calls, same results)",
            RuntimeWarning,
            stacklevel=3,
        )


try:
    from numba.np.ufunc import parallel as _parallel
except ImportError:
    _parallel = None


_threads_raw = None  # numba's ctypes function, once its layer has set it


def threads_now() -> int:
    """The calling thread's count of threads for parallel loops (``numba.set_num_threads``).
    numba sets the ctypes function it reads when its threading layer starts; until then, and
    where it is missing, the public function (which starts the layer)."""
    global _threads_raw
    if _threads_raw is None:
        _threads_raw = getattr(_parallel, "_get_num_threads", None)
        if _threads_raw is None:
            return numba.get_num_threads()
    return _threads_raw()


def entry_point(dispatcher, args: tuple):
    """The compiled entry of ``dispatcher`` for arguments of ``args``' types (compiled now if
    need be), to call directly with arguments of exactly those types; else the dispatcher."""
    sig = tuple(dispatcher.typeof_pyval(a) for a in args)
    dispatcher.compile(sig)
    try:
        return dispatcher.overloads[sig].entry_point
    except (AttributeError, KeyError):
        return dispatcher


def compile_with_slp(kernel, sig: tuple) -> None:
    """Compile ``kernel`` for ``sig`` with LLVM's SLP vectorizer, which numba turns off by default
    (``NUMBA_SLP_VECTORIZE``); without numba's switch for it, compile as numba would."""
    if not _HAVE_SLP_SWITCH:
        kernel.compile(sig)
        return
    # The flag is set only while this one signature compiles, under numba's compiler lock, so no
    # other compilation sees it.
    with _compiler_lock:
        # numba re-reads NUMBA_* variables at each compilation when they changed since it last
        # looked, which would reset the flag set below: let it look first.
        _config.reload_config()
        saved = _config.SLP_VECTORIZE
        _config.SLP_VECTORIZE = 1
        try:
            kernel.compile(sig)
        finally:
            _config.SLP_VECTORIZE = saved


try:
    from numba import _dynfunc
    from numba.core import compiler as _compiler
    from numba.core.codegen import JITCodeLibrary as _JITCodeLibrary
    from numba.core.compiler_machinery import register_pass as _register_pass
    from numba.core.registry import CPUDispatcher as _CPUDispatcher
    from numba.core.typed_passes import NativeLowering as _NativeLowering

    _HAVE_LINK_ONLY = all(
        (
            callable(getattr(_dynfunc, "make_function", None)),
            callable(getattr(_JITCodeLibrary, "_finalize_final_module", None)),
            callable(getattr(_compiler.DefaultPassBuilder, "define_nopython_pipeline", None)),
            "no_compile" in getattr(_compiler.Flags, "options", {}),
            hasattr(_compiler, "_LowerResult"),
        )
    )
except ImportError:
    _HAVE_LINK_ONLY = False

if _HAVE_LINK_ONLY:

    class _LinkOnlyLibrary(_JITCodeLibrary):
        """A code library that is only ever linked into kernels: its finalization links the
        module, and neither optimizes it as a whole nor emits machine code of its own."""

        def _finalize_final_module(self):
            self._finalized = True

        def _optimize_final_module(self):
            pass  # the kernel that links it optimizes the whole once

    @_register_pass(mutates_CFG=True, analysis_only=False)
    class _LinkOnlyLowering(_NativeLowering):
        """numba's lowering with the flags of ``compile_subroutine``: no wrappers, no machine
        code; callers find the implementation under a stand-in entry point."""

        _name = "numba_onnx_ops_link_only_lowering"

        def run_pass(self, state):
            flags = state.flags
            flags.no_compile = flags.no_cpython_wrapper = flags.no_cfunc_wrapper = True
            if state.library is None:
                name = state.func_id.func_qualname
                state.library = _LinkOnlyLibrary(state.targetctx.codegen(), name)
            super().run_pass(state)
            lowered = state.cr
            fndesc = lowered.fndesc
            # A null function pointer, like the entries of numba's own overloads (which have
            # no Python wrapper either): the dispatcher's table needs a builtin function here.
            entry = _dynfunc.make_function(
                fndesc.lookup_module(),
                fndesc.qualname.split(".")[-1],
                "linked into compiled kernels only",
                0,
                lowered.env,
                (state.library,),
            )
            state.targetctx.insert_user_function(entry, fndesc, [state.library])
            state.cr = lowered._replace(cfunc=entry)
            return True

    def _nopython_pipelines(state, replaced, replacement):
        """numba's nopython pipeline for ``state``, with the pass ``replacement`` in place of
        ``replaced``: what a ``CompilerBase.define_pipelines`` returns."""
        pm = _compiler.DefaultPassBuilder.define_nopython_pipeline(state)
        pm.passes = [
            (replacement if pass_ is replaced else pass_, description)
            for pass_, description in pm.passes
        ]
        pm.finalize()
        return [pm]

    class _LinkOnlyCompiler(_compiler.CompilerBase):
        """numba's nopython pipeline with ``_LinkOnlyLowering`` in place of its lowering."""

        def define_pipelines(self):
            return _nopython_pipelines(self.state, _NativeLowering, _LinkOnlyLowering)

    class _LinkOnlyDispatcher(_CPUDispatcher):
        """A dispatcher whose compiled versions kernels link, and Python cannot call."""

        def add_overload(self, cres):
            self.overloads[tuple(cres.signature.args)] = cres

        def _compile_for_args(self, *args, **kws):
            raise TypeError(
                f"{self.py_func.__qualname__} is compiled into numba_onnx_ops kernels only; "
                "call it from a numba.njit function"
            )

    #: ``jit_options`` of an ``@overload`` whose implementation is only linked into kernels.
    LINK_ONLY_OPTIONS = {"pipeline_class": _LinkOnlyCompiler, "no_cfunc_wrapper": True}

    def link_only_jit(**options):
        """``numba.njit(**options)`` for a helper only ever called from compiled code."""

        def decorate(func):
            targetoptions = {"nopython": True, "boundscheck": None, **options}
            return _LinkOnlyDispatcher(
                py_func=func,
                locals={},
                targetoptions=targetoptions,
                pipeline_class=_LinkOnlyCompiler,
            )

        return decorate

else:  # pragma: no cover - depends on numba's internals
    LINK_ONLY_OPTIONS = {}

    def link_only_jit(**options):
        return numba.njit(**options)


try:
    from numba.core.codegen import JITCPUCodegen as _JITCPUCodegen
    from numba.core.typed_passes import NativeParforLowering as _NativeParforLowering

    _HAVE_DEFERRED = (
        _HAVE_LINK_ONLY
        and getattr(_JITCPUCodegen, "_library_class", None) is _JITCodeLibrary
        and all(
            callable(getattr(_JITCodeLibrary, name, None))
            for name in ("_optimize_final_module", "_finalize_final_module", "_ensure_finalized")
        )
    )
except ImportError:
    _HAVE_DEFERRED = False

if _HAVE_DEFERRED:

    class _DeferredLibrary(_JITCodeLibrary):
        """A code library whose last optimization and machine code wait until something asks
        for its machine code.  A library that is only linked into another never does: its code is
        optimized and turned into machine code once, as part of the library that links it."""

        _deferred = False

        def _optimize_final_module(self):
            self._deferred = True

        def _finalize_final_module(self):
            if self._deferred:
                self._finalized = True
            else:
                super()._finalize_final_module()

        def _realize(self):
            self._ensure_finalized()
            if self._deferred:
                self._deferred = False
                super()._optimize_final_module()
                self._final_module.verify()
                super()._finalize_final_module()

        def get_pointer_to_function(self, name):
            self._realize()
            return super().get_pointer_to_function(name)

        def serialize_using_object_code(self):
            self._realize()
            return super().serialize_using_object_code()

        def get_asm_str(self):
            self._realize()
            return super().get_asm_str()

    @contextlib.contextmanager
    def _deferring_libraries(codegen):
        """Within the block, ``codegen.create_library`` makes :class:`_DeferredLibrary` s.  Only
        for the duration of one compilation: the caller holds numba's compiler lock, which every
        compilation (and so every ``create_library``) takes."""
        own = codegen.__dict__.get("_library_class")
        codegen._library_class = _DeferredLibrary
        try:
            yield
        finally:
            if own is None:
                del codegen._library_class
            else:
                codegen._library_class = own

    @_register_pass(mutates_CFG=True, analysis_only=False)
    class _DeferringParforLowering(_NativeParforLowering):
        """numba's lowering of a function with parallel loops, whose libraries defer their
        optimization and machine code (:class:`_DeferredLibrary`).  numba builds each parallel
        loop as a body function, a gufunc wrapper around it and a parallel wrapper around that,
        each a library that links the one before; it optimized the whole and made it machine
        code once per library, four times, where the kernel needs it once."""

        _name = "numba_onnx_ops_deferring_parfor_lowering"

        def run_pass(self, state):
            with _deferring_libraries(state.targetctx.codegen()):
                return super().run_pass(state)

    class _KernelCompiler(_compiler.CompilerBase):
        """numba's nopython pipeline with ``_DeferringParforLowering`` in place of its parfor
        lowering."""

        def define_pipelines(self):
            return _nopython_pipelines(self.state, _NativeParforLowering, _DeferringParforLowering)

    #: ``njit`` options of a kernel, the functions called from Python.
    KERNEL_OPTIONS = {"pipeline_class": _KernelCompiler}

else:  # pragma: no cover - depends on numba's internals
    KERNEL_OPTIONS = {}


try:
    from numba.core.registry import cpu_target as _cpu_target

    _HAVE_NATIVE = all(
        callable(getattr(_JITCodeLibrary, name, None))
        for name in ("create_ir_module", "add_ir_module", "finalize", "get_pointer_to_function")
    ) and hasattr(_compiler_lock, "__enter__")
except (ImportError, NameError):  # pragma: no cover - depends on numba's internals
    _HAVE_NATIVE = False


def native_function(name: str, define):
    """Machine code of the LLVM function ``name`` that ``define(module)`` adds to an empty
    module, compiled by numba's own code generator (its host CPU, optimization level and
    execution engine): ``(address, library)``, the address valid while ``library`` lives.
    ``None`` where this numba's code libraries differ from the versions checked."""
    if not _HAVE_NATIVE:
        return None
    with _compiler_lock:  # numba's code generator is not thread-safe
        library = _cpu_target.target_context.codegen().create_library(name)
        module = library.create_ir_module(name)
        define(module)
        library.add_ir_module(module)
        library.finalize()
        address = library.get_pointer_to_function(name)
    return (address, library) if address else None


try:
    from numba.core.callconv import CPUCallConv as _CPUCallConv

    HAVE_ADDRESS_CALLS = all(
        callable(getattr(_CPUCallConv, name, None))
        for name in ("get_function_type", "get_return_type", "_get_arg_packer",
                     "_get_return_status")
    ) and callable(getattr(_JITCodeLibrary, "get_pointer_to_function", None))  # fmt: skip
except (ImportError, NameError):  # pragma: no cover - depends on numba's internals
    HAVE_ADDRESS_CALLS = False


def compiled_address(dispatcher, args: tuple) -> int | None:
    """The address of ``dispatcher``'s machine code for arguments of ``args``' types (compiled
    for them already), in numba's calling convention (``call_compiled``); valid while the
    dispatcher lives.  ``None`` where this numba differs from the versions checked."""
    if not HAVE_ADDRESS_CALLS:
        return None
    sig = tuple(dispatcher.typeof_pyval(a) for a in args)
    try:
        cres = dispatcher.overloads[sig]
        return cres.library.get_pointer_to_function(cres.fndesc.llvm_func_name) or None
    except (AttributeError, KeyError):
        return None


def call_compiled(context, builder, address, argtypes, args):
    """IR: call the compiled function at ``address`` (an i64; ``compiled_address``), which
    returns nothing, with ``args`` of the numba types ``argtypes``; an i1, true where it
    raised (its exception stays behind)."""
    conv = context.call_conv
    fnty = conv.get_function_type(types.none, argtypes)
    callee = builder.inttoptr(address, fnty.as_pointer())
    ret = cgutils.alloca_once(builder, conv.get_return_type(types.none).pointee)
    builder.store(cgutils.get_null_value(ret.type.pointee), ret)
    excinfo = cgutils.alloca_once(builder, fnty.args[1].pointee, name="excinfo")
    packed = list(conv._get_arg_packer(argtypes).as_arguments(builder, args))
    code = builder.call(callee, [ret, excinfo, *packed])
    return conv._get_return_status(builder, code, builder.load(excinfo)).is_error
