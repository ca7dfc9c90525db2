"""The one place where npu-lab touches PyTorch's private APIs.

Every function here was checked on torch 2.13.0 (CPU wheel). PyTorch's
internals move between releases: if an upgrade breaks the lab, this file is
where to look first.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch._C import DispatchKey, DispatchKeySet

#: The torch release line this file was checked against.
CHECKED_ON = "2.13"

_META_KEYSET = DispatchKeySet(DispatchKey.Meta)


def setup_python_backend(name: str, backend_module: Any, hooks: Any, guard: Any) -> None:
    """Rename PrivateUse1 to ``name`` and register a pure-Python backend (torch 2.13).

    ``torch.utils.backend_registration._setup_privateuseone_for_python_backend``
    installs Python objects as the C++ hooks and device guard PyTorch expects a
    backend to provide. npu-lab's device is a native runtime instead; chapter 7
    runs this 20-line prototype in a separate process to show what it can and
    cannot do (no real storage: ``data_ptr() == 0``).
    """
    from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

    _setup_privateuseone_for_python_backend(
        name, backend_module=backend_module, hook=hooks, device_guard=guard
    )


def backend_name() -> str:
    """The current name of the PrivateUse1 backend ("privateuseone" until renamed)."""
    return torch._C._get_privateuse1_backend_name()


def export_dlpack_device(device_type: str) -> None:
    """Let ``torch.from_dlpack`` take ``device_type`` tensors (works around torch 2.13).

    ``Tensor.__dlpack_device__`` maps PrivateUse1 to DLPack's ``kDLExtDev``
    only while the backend still has its default name, ``"privateuse1"``; once
    renamed it raises "Unknown device type". The C++ converters
    (``torch.utils.dlpack.to_dlpack``/``from_dlpack``) are right, so this asks
    the same of the Python protocol method, for ``device_type`` only.
    """
    original = torch.Tensor.__dlpack_device__
    if getattr(original, "_npu_lab_device", None) == device_type:
        return

    def __dlpack_device__(self: torch.Tensor) -> tuple[Any, int]:
        if type(self) is torch.Tensor and self.device.type == device_type:
            from torch.utils.dlpack import DLDeviceType

            return DLDeviceType.kDLExtDev, self.device.index or 0
        return original(self)

    __dlpack_device__._npu_lab_device = device_type  # type: ignore[attr-defined]
    torch.Tensor.__dlpack_device__ = __dlpack_device__  # type: ignore[method-assign]


#: ADInplaceOrView (the view's base and shared version counter) above the Meta kernel (its geometry).
_VIEW_KEYSET = DispatchKeySet(DispatchKey.ADInplaceOrView) | DispatchKeySet(DispatchKey.Meta)


def strided_view_below_autograd(base: torch.Tensor, size: Any, stride: Any, offset: int) -> torch.Tensor:
    """``base.as_strided(size, stride, offset)`` without the autograd and backend layers (torch 2.13).

    The result is a true view: it shares ``base``'s storage and version counter
    and has ``base`` as its ``_base``, as ADInplaceOrView makes it. It carries no
    autograd history, so only code that runs below autograd (a compiled graph)
    may use it, and only for tensors that do not require grad.
    """
    return torch.ops.aten.as_strided.default.redispatch(_VIEW_KEYSET, base, size, stride, offset)


def meta_redispatch(op: torch._ops.OpOverload, *args: Any, **kwargs: Any) -> Any:
    """Run ``op``'s Meta kernel on device tensors: metadata only, no data touched.

    For view operators this returns true views that share the input's storage,
    which is exactly what a device's view kernels must do.
    """
    return op.redispatch(_META_KEYSET, *args, **kwargs)


# -- Dynamo must not trace the device's own Python (checked on torch 2.13) ----------------------
#: The lab's runtime packages: kernels run here, called by the dispatcher. When a compiled function
#: graph-breaks, Dynamo's frame hook sees every new Python frame, including these kernels; tracing
#: them with fake tensors fails, so they go on Dynamo's skip list (like torch's own files).
DYNAMO_SKIP = ("npu_lab.ops", "npu_lab.kernels", "npu_lab.device", "npu_lab.profiler", "npu_lab.lazy",
               "npu_lab._torch_private", "npu_lab.inductor.runtime")


def _skip_runtime_in_dynamo(trace_rules: Any) -> None:
    for name in DYNAMO_SKIP:
        trace_rules.add(name)


class _AfterImport:
    """A meta-path finder that runs a callback right after one module is imported."""

    def __init__(self, name: str, callback: Any) -> None:
        self.name, self.callback = name, callback

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        import importlib.util
        import sys

        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        original = spec.loader.exec_module
        callback = self.callback

        def exec_module(module: Any) -> None:
            original(module)
            callback(module)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def after_import(module_name: str, callback: Any) -> None:
    """Call ``callback(module)`` once ``module_name`` is imported: now if it is, else right after its import.

    The lab configures parts of PyTorch (Dynamo) that take about a second to import, without
    importing them itself.
    """
    import sys

    module = sys.modules.get(module_name)
    if module is not None:
        callback(module)
    elif not any(isinstance(f, _AfterImport) and f.name == module_name and f.callback is callback
                 for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport(module_name, callback))


def dynamo_disabled(fn: Any) -> Any:
    """``fn`` wrapped so that Dynamo never traces it (torch 2.13: ``torch._disable_dynamo``, which
    ``torch.library.custom_op`` applies to the kernels it registers). A kernel registered with
    ``Library.impl`` is not wrapped so: when a compiled function graph-breaks (``loss.backward()`` in the
    step), Dynamo's frame hook meets the kernel's Python frame and tries to compile it with fake tensors."""
    return torch._disable_dynamo(fn)


def keep_dynamo_out_of_the_runtime() -> None:
    """Put the runtime packages on Dynamo's skip list, now or when Dynamo is first imported."""
    after_import("torch._dynamo.trace_rules", _skip_runtime_in_dynamo)


def real_tensors() -> Any:
    """A context in which no fake-tensor mode is active, so operators compute real values (torch 2.13).

    A backend compiling a graph with symbolic sizes is called while AOTAutograd's
    ``FakeTensorMode`` is still active; work the compiler does at compile time
    (constant folding) must leave it, or its results are fake tensors.
    """
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    return unset_fake_temporarily()


@contextlib.contextmanager
def tracing_paused() -> Iterator[None]:
    """Pause ``torch.jit.trace`` recording for a moment (torch 2.13: ``torch._C._get/_set_tracing_state``).

    The device's bookkeeping (sizes for its byte counters) must read plain numbers,
    not traced values, and must not add nodes or TracerWarnings to the user's trace.
    """
    state = torch._C._get_tracing_state()
    torch._C._set_tracing_state(None)
    try:
        yield
    finally:
        torch._C._set_tracing_state(state)


def dispatch_modes_active() -> bool:
    """Is any ``TorchDispatchMode`` on the stack? (torch 2.13: ``torch._C._len_torch_dispatch_stack``)"""
    return torch._C._len_torch_dispatch_stack() > 0


def dispatch_tls_on_entry() -> tuple[DispatchKeySet, DispatchKeySet]:
    """(include, exclude): the thread-local key sets in force when the call now in ``__torch_dispatch__`` entered.

    Inside ``__torch_dispatch__`` the thread-local sets exclude every key above ``Python`` (the Python key's
    fallback adds that guard), so reading them there says nothing about the call. The dispatcher keeps a
    snapshot of the sets from when the call came in from Python (its ``PythonTLSSnapshot`` key, torch 2.13);
    ``torch._C._RestorePythonTLSSnapshot`` puts that snapshot back for a moment. Outside a dispatched call
    (no snapshot exists) the current sets are returned.
    """
    try:
        with torch._C._RestorePythonTLSSnapshot():
            return torch._C._dispatch_tls_local_include_set(), torch._C._dispatch_tls_local_exclude_set()
    except RuntimeError:  # "Accessing torch dispatch state outside of '__torch_dispatch__' is not allowed."
        return torch._C._dispatch_tls_local_include_set(), torch._C._dispatch_tls_local_exclude_set()


def custom_op_function(op: torch._ops.OpOverload, device_type: str) -> Any:
    """The Python function a ``torch.library.custom_op`` runs for ``device_type``, or None (torch 2.13).

    Calling it directly skips the custom op's dispatcher wrappers (autograd,
    dynamo-disable, output checks), which cost tens of microseconds a call;
    only code that runs below autograd, such as a compiled graph, may do so.
    """
    import inspect

    from torch._library.custom_ops import OPDEFS

    opdef = OPDEFS.get(op._schema.name)
    if opdef is None or op._overloadname != "default":
        return None
    wrapped = opdef._backend_fns.get(device_type)
    if wrapped is None:
        return None
    if device_type in opdef._disabled_kernel:
        return opdef._init_fn
    # ``register_kernel`` stores ``torch._disable_dynamo(wrapped_fn)``; ``wrapped_fn`` closes over the kernel
    inner = getattr(wrapped, "__wrapped__", wrapped)
    return inspect.getclosurevars(inner).nonlocals.get("fn")


def provide_c_functions(functions: dict[str, Any]) -> None:
    """Set ``torch._C.<name>`` for each name this build of torch lacks (torch 2.13).

    ``torch.nn.parallel.comm`` (DataParallel's scatter, gather and broadcast) calls
    ``torch._C._scatter`` and friends, which PyTorch compiles only into CUDA builds; on
    the CPU wheel they do not exist, so npu-lab supplies them. Names the build has are left
    alone.
    """
    for name, fn in functions.items():
        if not hasattr(torch._C, name):
            setattr(torch._C, name, fn)


def cpu_identity() -> str:
    """A short name for the code this CPU runs: architecture, ATen's kernel level, LLVM's CPU and features.

    Two machines (or two settings of ``ATEN_CPU_CAPABILITY`` / ``NUMBA_CPU_NAME``) that would compile
    different machine code get different names.
    """
    import hashlib
    import platform

    import numba
    from llvmlite import binding

    cpu = numba.config.CPU_NAME or binding.get_host_cpu_name()
    features = numba.config.CPU_FEATURES or binding.get_host_cpu_features().flatten()
    digest = hashlib.sha1(f"{cpu}|{features}".encode()).hexdigest()[:8]
    return f"{platform.machine()}-{torch.backends.cpu.get_cpu_capability().lower()}-{digest}"


def _inductor_cache_dir_utils() -> Any:
    """``torch._inductor.runtime.cache_dir_utils`` without importing Inductor (torch 2.13).

    That module depends on nothing of torch but ``torch._environment``, while importing it by name runs
    ``torch._inductor/__init__.py``, which imports Dynamo: 0.8 s of ``import npu_lab``, in every kernel
    and worker. Loaded from its file under a private name unless Inductor is imported already.
    """
    import importlib.util
    import os
    import sys

    name = "torch._inductor.runtime.cache_dir_utils"
    if name in sys.modules:
        return sys.modules[name]
    path = os.path.join(os.path.dirname(torch.__file__), "_inductor", "runtime", "cache_dir_utils.py")
    spec = importlib.util.spec_from_file_location("npu_lab._inductor_cache_dir_utils", path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def key_inductor_cache_by_cpu() -> None:
    """Give TorchInductor's on-disk cache a folder per CPU identity, unless the user chose one (torch 2.13).

    Inductor caches generated C++ (vectorised for the CPU it found) under a key that does not name the
    CPU's vector instructions: a cache filled on an AVX2 machine, or before ``ATEN_CPU_CAPABILITY``
    changed, hands vector code to a build without the vector headers ("'at::vec' has not been
    declared"), and a kernel built with ``-march=native`` on one CPU may not run on another (a cache in
    a Docker image built on one node and run on another). A ``TORCHINDUCTOR_CACHE_DIR`` the user set is
    left alone; torch itself sets it to its default folder once Inductor is imported, and that one gets
    the CPU's folder below it (Inductor reads the variable again for every compile).
    """
    import os

    default = os.path.abspath(_inductor_cache_dir_utils().default_cache_dir())
    chosen = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if chosen and os.path.abspath(chosen) != default:
        return
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(default, cpu_identity())


def device_test_bases_with_privateuse1() -> None:
    """Let PyTorch's device-type tests instantiate for the renamed PrivateUse1 backend (torch 2.13).

    ``torch.testing._internal.common_device_type`` decides at import which device bases its
    ``instantiate_device_type_tests`` uses (``device_type_test_bases``); imported before the backend was
    registered, it leaves PrivateUse1 out, and every ``only_for=("npu",)`` test class comes out empty. This
    recomputes the list once the backend exists (a no-op when it is already there or the module is not imported).
    """
    import sys

    cdt = sys.modules.get("torch.testing._internal.common_device_type")
    if cdt is not None and cdt.PrivateUse1TestBase not in cdt.device_type_test_bases:
        cdt.device_type_test_bases = cdt.get_device_type_test_bases()


def extension_directory(name: str) -> str:
    """Where ``torch.utils.cpp_extension`` builds and caches the extension ``name`` (created if missing):
    ``$TORCH_EXTENSIONS_DIR/<name>``, by default ``~/.cache/torch_extensions/py<version>_<cpu|cuda...>/<name>``.
    Chapter 8a caches the wheel of its backend package there, beside the extensions ``load_inline`` builds."""
    from torch.utils.cpp_extension import _get_build_directory

    return _get_build_directory(name, verbose=False)


def post_accumulate_grad_hooks(param: torch.Tensor) -> list[Any]:
    """The hooks ``param.register_post_accumulate_grad_hook`` registered, in order (torch 2.13 keeps them in the
    tensor's ``_post_accumulate_grad_hooks`` dict; autograd's AccumulateGrad calls them after writing ``.grad``).

    Chapter 9's bucket check calls them itself to replay a backward in a forked process, where autograd's engine
    refuses to run once the parent has started its device threads."""
    hooks = getattr(param, "_post_accumulate_grad_hooks", None)
    return list(hooks.values()) if hooks else []


@contextlib.contextmanager
def partitioner_splits() -> Iterator[list[int]]:
    """``with partitioner_splits() as n:`` counts in ``n[0]`` the graphs PyTorch's own partitioners split in the block.

    ``default_partition`` and ``min_cut_rematerialization_partition`` both build their two graphs with
    ``torch._functorch.partitioners._extract_fwd_bwd_modules`` (torch 2.13), which they look up in their module
    when they run: counting its calls counts theirs, however they were imported. (Chapter 6's partitioner
    check: the exercise asks for the split to be written, not delegated.)"""
    from torch._functorch import partitioners

    count = [0]
    real = partitioners._extract_fwd_bwd_modules

    def counted(*args: Any, **kwargs: Any) -> Any:
        count[0] += 1
        return real(*args, **kwargs)

    partitioners._extract_fwd_bwd_modules = counted
    try:
        yield count
    finally:
        partitioners._extract_fwd_bwd_modules = real


def composite_implicit(op: torch._ops.OpOverload, *args: Any) -> Any:
    """Run ``op``'s CompositeImplicitAutograd kernel (ATen's C++ composite) straight, not through the dispatcher,
    so a kernel the npu registers for ``op`` is not reached again (torch 2.13: ``OpOverload._op_dk``).
    ``OpOverload.decompose`` would prefer a Python decomposition where one exists."""
    return op._op_dk(DispatchKey.CompositeImplicitAutograd, *args)


def below_autograd_plain(tensors: Any) -> bool:
    """No functorch transform is active and none of ``tensors`` has a dispatch of its own below autograd (fake
    tensors, ``__torch_dispatch__`` subclasses: the Python key). torch 2.13: ``_are_functorch_transforms_active``,
    ``_dispatch_keys``."""
    if torch._C._are_functorch_transforms_active():
        return False
    return not any(torch._C._dispatch_keys(t).has(DispatchKey.Python) for t in tensors)
