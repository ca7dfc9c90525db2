"""Global state a learner's code may change, saved before each call into it and put back afterwards.

A wrong answer that calls ``torch.set_default_dtype(torch.float64)``,
``torch.set_default_device("npu")``, ``torch.set_grad_enabled(False)``, seeds or
draws random numbers, flips a ``torch.backends`` flag, turns the NPU's CPU
fallback on, changes NumPy's print options, the warnings filters, a signal
handler, ``sys.stdout``, the working directory, an environment variable, enters
a ``TorchFunctionMode``, lazy mode or ``torch.autocast`` and never leaves it,
replaces ``torch.allclose`` (or any attribute of ``torch``, ``torch.Tensor``,
``math``, ``builtins``..., or of the grading code itself), registers a compiler
pass or a kernel and keeps it: none of that may reach the check's own
reference computations, or a later check of a correct answer.

:func:`snapshot` records everything; :meth:`Snapshot.restore` puts back what
changed and says what it was (the check tells the learner). Each call into
the learner's code is wrapped in one (see :class:`~npu_lab.grading.tester.Tester`),
and so is each whole check.
"""

from __future__ import annotations

import builtins
import math
import operator
import os
import random
import signal
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

_MISSING = object()


@dataclass
class _Item:
    """One piece of global state: how to read it, how to put it back, and its name for the learner."""

    name: str
    get: Callable[[], Any]
    set: Callable[[Any], None]
    same: Callable[[Any, Any], bool] = lambda a, b: a == b  # noqa: E731
    notable: bool = True  # worth telling the learner about (random state is not)
    first: bool = False  # put back before the others (the mode stacks: a mode left on intercepts the rest)
    per_call: bool = True  # also saved around each call (False: only around the whole check; costly to read)


def _tensor_same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and (not isinstance(a, torch.Tensor) or torch.equal(a, b))


def _list_same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(_tensor_same(x, y) for x, y in zip(a, b))


def _np_state_same(a: Any, b: Any) -> bool:
    return a[0] == b[0] and np.array_equal(a[1], b[1]) and a[2:] == b[2:]


def _identity_list_same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b))


def _set_default_device(device: torch.device | None) -> None:
    torch.set_default_device(device)


def _get_default_device() -> torch.device | None:
    context = getattr(torch._GLOBAL_DEVICE_CONTEXT, "device_context", None)
    return None if context is None else context.device


def _set_deterministic(value: tuple[bool, bool]) -> None:
    torch.use_deterministic_algorithms(value[0], warn_only=value[1])


def _set_anomaly(value: tuple[bool, bool]) -> None:
    torch.set_anomaly_enabled(value[0], value[1])


def _set_flag(module: Any, name: str, value: Any) -> None:
    """Set a ``torch.backends`` flag even after ``torch.backends.disable_global_flags()`` (PyTorch's test
    utilities freeze them on import; a learner can still change them through ``flags()``)."""
    if getattr(module, name) == value:
        return
    with getattr(torch.backends, "__allow_nonbracketed_mutation")():
        setattr(module, name, value)


def _backend_flags() -> list[tuple[str, Any, str]]:
    out = []
    for label, module, names in (
            ("mkldnn", torch.backends.mkldnn, ("enabled", "deterministic")),
            ("cudnn", torch.backends.cudnn, ("enabled", "benchmark", "deterministic", "allow_tf32")),
            ("opt_einsum", torch.backends.opt_einsum, ("enabled", "strategy")),
            ("nnpack", getattr(torch.backends, "nnpack", None), ("enabled",)),
            ("cuda.matmul", getattr(torch.backends.cuda, "matmul", None),
             ("allow_tf32", "allow_fp16_reduced_precision_reduction", "allow_bf16_reduced_precision_reduction"))):
        for n in names:
            try:
                getattr(module, n)
            except Exception:  # noqa: BLE001,S112 - a flag this build does not have
                continue
            out.append((label, module, n))
    return out


def _autocast_items() -> list[_Item]:
    items = []
    for dev in ("cpu", "npu"):
        try:
            torch.is_autocast_enabled(dev)
            torch.get_autocast_dtype(dev)
        except Exception:  # noqa: BLE001,S112 - no autocast for this device type
            continue
        items.append(_Item(f"torch.autocast({dev!r}) left on", lambda d=dev: torch.is_autocast_enabled(d),
                           lambda v, d=dev: torch.set_autocast_enabled(d, v)))
        items.append(_Item(f"the autocast dtype of {dev}", lambda d=dev: torch.get_autocast_dtype(d),
                           lambda v, d=dev: torch.set_autocast_dtype(d, v)))
    return items


def _mode_stack(length: Callable[[], int], pop: Callable[[], Any]) -> tuple[Callable[[], int], Callable[[int], None]]:
    def restore(n: int) -> None:
        while length() > n:
            pop()
    return length, restore


def _printopts_torch() -> dict[str, Any]:
    from torch._tensor_str import PRINT_OPTS

    return dict(vars(PRINT_OPTS))


def _set_printopts_torch(values: dict[str, Any]) -> None:
    from torch._tensor_str import PRINT_OPTS

    for k, v in values.items():
        setattr(PRINT_OPTS, k, v)


def _set_env(values: dict[str, str]) -> None:
    for k in [k for k in os.environ if k not in values]:
        del os.environ[k]
    for k, v in values.items():
        if os.environ.get(k) != v:
            os.environ[k] = v


def _signal_numbers() -> list[int]:
    out = []
    for s in signal.valid_signals():
        if s in (signal.SIGKILL, signal.SIGSTOP):
            continue
        try:
            signal.getsignal(s)
        except (ValueError, OSError):
            continue
        out.append(s)
    return out


_SIGNALS = _signal_numbers()


def _get_signals() -> dict[int, Any]:
    return {s: signal.getsignal(s) for s in _SIGNALS}


def _set_signals(values: dict[int, Any]) -> None:
    for s, handler in values.items():
        if handler is None:
            continue  # installed from C: nothing Python can put back
        try:
            if signal.getsignal(s) is not handler:
                signal.signal(s, handler)
        except (ValueError, OSError, TypeError):
            pass


def _signals_same(a: dict[int, Any], b: dict[int, Any]) -> bool:
    return all(b.get(s) is h for s, h in a.items())


def _logging_levels() -> dict[str, tuple[int, bool]]:
    import logging

    out = {"": (logging.root.level, logging.root.disabled), "<disable>": (logging.root.manager.disable, False)}
    for name, lg in list(logging.root.manager.loggerDict.items()):
        if isinstance(lg, logging.Logger):
            out[name] = (lg.level, lg.disabled)
    return out


def _set_logging_levels(values: dict[str, tuple[int, bool]]) -> None:
    import logging

    for name, (level, disabled) in values.items():
        if name == "<disable>":
            logging.disable(level)
            continue
        lg = logging.root if name == "" else logging.getLogger(name)
        if lg.level != level:
            lg.setLevel(level)
        lg.disabled = disabled


def _logging_same(a: dict, b: dict) -> bool:
    return all(b.get(k, v) == v for k, v in a.items())


def _npu_items() -> list[_Item]:
    items: list[_Item] = []
    npu = getattr(torch, "npu", None)
    if npu is None:
        return items
    from ..device import fallback, native

    c = native.load()
    items.append(_Item("npu_lab.set_cpu_fallback (the NPU's CPU fallback)", fallback.cpu_fallback_enabled,
                       fallback.set_cpu_fallback))
    items.append(_Item("the current npu device (torch.npu.set_device)", npu.current_device, npu.set_device))
    items.append(_Item("the npu random number generators", npu.get_rng_state_all, npu.set_rng_state_all,
                       same=_list_same, notable=False))
    if hasattr(c, "get_cost_model"):
        items.append(_Item("npu_lab.cost_model (the simulated chip's figures)", c.get_cost_model, c.set_cost_model))
    if hasattr(c, "mem_get_info"):
        count = npu.device_count()
        items.append(_Item("the npu memory capacity (npu_lab.set_memory_capacity)",
                           lambda: [c.mem_get_info(i)[1] for i in range(count)],
                           lambda v: [c.set_capacity(i, n) for i, n in enumerate(v)]))
    try:
        streams = [npu.current_stream(i) for i in range(npu.device_count())]
        del streams
        items.append(_Item("the current npu stream (torch.npu.set_stream)",
                           lambda: [npu.current_stream(i) for i in range(npu.device_count())],
                           lambda v: [npu.set_stream(s) for s in v]))
    except Exception:  # noqa: BLE001 - no streams in this runtime
        pass
    return items


def _lab_items() -> list[_Item]:
    items = []
    lazy = sys.modules.get("npu_lab.lazy.trace")
    if lazy is not None:
        items.append(_Item("npu_lab.lazy.mode() left on", lambda: list(lazy._stack),
                           lambda v: lazy._stack.__setitem__(slice(None), v), same=_identity_list_same))
    passes = sys.modules.get("npu_lab.compiler.custom_passes")
    if passes is not None:
        items.append(_Item("a pass registered with the npu compiler", lambda: dict(passes.REGISTERED),
                           lambda v: (passes.REGISTERED.clear(), passes.REGISTERED.update(v)),
                           same=lambda a, b: a.keys() == b.keys() and all(a[k] is b[k] for k in a)))
    return items


def _config_items() -> list[_Item]:
    items = []
    for name in ("torch._dynamo.config", "torch._inductor.config", "torch._functorch.config",
                 "torch.fx.experimental._config"):
        module = sys.modules.get(name)
        if module is None or not hasattr(module, "get_config_copy"):
            continue
        items.append(_Item(name, module.get_config_copy, lambda v, m=module: _load_changed(m, v),
                           same=lambda a, b: a.keys() == b.keys() and all(_value_same(a[k], b[k]) for k in a),
                           per_call=False))
    return items


def _load_changed(module: Any, saved: dict[str, Any]) -> None:
    now = module.get_config_copy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # deprecated options warn when set, even to their old value
        for k, v in saved.items():
            if not _value_same(now.get(k, _MISSING), v):
                setattr(module, k, v)


def _value_same(a: Any, b: Any) -> bool:
    try:
        return a is b or bool(a == b)
    except Exception:  # noqa: BLE001 - e.g. tensors in a config
        return False


def _items() -> list[_Item]:
    items = [
        _Item("torch's default dtype (torch.set_default_dtype)", torch.get_default_dtype, torch.set_default_dtype),
        _Item("torch's default device (torch.set_default_device)", _get_default_device, _set_default_device),
        _Item("grad mode (torch.set_grad_enabled / no_grad)", torch.is_grad_enabled, torch._C._set_grad_enabled),
        _Item("anomaly detection", lambda: (torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled()),
              _set_anomaly),
        _Item("deterministic algorithms",
              lambda: (torch.are_deterministic_algorithms_enabled(),
                       torch.is_deterministic_algorithms_warn_only_enabled()), _set_deterministic),
        _Item("float32 matmul precision", torch.get_float32_matmul_precision, torch.set_float32_matmul_precision),
        _Item("torch's CPU threads (torch.set_num_threads)", torch.get_num_threads, torch.set_num_threads),
        _Item("torch's random number generator", torch.get_rng_state, torch.set_rng_state, same=_tensor_same,
              notable=False),
        _Item("NumPy's random state", np.random.get_state, np.random.set_state, same=_np_state_same, notable=False),
        _Item("Python's random state", random.getstate, random.setstate, notable=False),
        _Item("NumPy's print options", np.get_printoptions, lambda v: np.set_printoptions(**v)),
        _Item("NumPy's error handling (np.seterr)", np.geterr, lambda v: np.seterr(**v)),
        _Item("torch's print options", _printopts_torch, _set_printopts_torch),
        _Item("the warnings filters", lambda: list(warnings.filters),
              lambda v: (warnings.filters.__setitem__(slice(None), v), warnings._filters_mutated()),
              same=_identity_list_same),
        _Item("warnings.showwarning", lambda: warnings.showwarning, lambda v: setattr(warnings, "showwarning", v),
              same=lambda a, b: a is b),
        _Item("logging levels", _logging_levels, _set_logging_levels, same=_logging_same),
        _Item("sys.stdout", lambda: sys.stdout, lambda v: setattr(sys, "stdout", v), same=lambda a, b: a is b),
        _Item("sys.stderr", lambda: sys.stderr, lambda v: setattr(sys, "stderr", v), same=lambda a, b: a is b),
        _Item("sys.stdin", lambda: sys.stdin, lambda v: setattr(sys, "stdin", v), same=lambda a, b: a is b),
        _Item("sys.displayhook", lambda: sys.displayhook, lambda v: setattr(sys, "displayhook", v),
              same=lambda a, b: a is b),
        _Item("sys.excepthook", lambda: sys.excepthook, lambda v: setattr(sys, "excepthook", v),
              same=lambda a, b: a is b),
        _Item("a trace function (sys.settrace)", sys.gettrace, sys.settrace, same=lambda a, b: a is b),
        _Item("a profile function (sys.setprofile)", sys.getprofile, sys.setprofile, same=lambda a, b: a is b),
        _Item("the recursion limit", sys.getrecursionlimit, sys.setrecursionlimit),
        _Item("the working directory (os.chdir)", os.getcwd, os.chdir),
        _Item("environment variables", lambda: dict(os.environ), _set_env),
        _Item("signal handlers", _get_signals, _set_signals, same=_signals_same),
        _Item("the blocked signals", lambda: signal.pthread_sigmask(signal.SIG_BLOCK, []),
              lambda v: signal.pthread_sigmask(signal.SIG_SETMASK, v)),
        _Item("a TorchFunctionMode left on", *_mode_stack(torch._C._len_torch_function_stack,
                                                          torch._C._pop_torch_function_stack), first=True),
        _Item("a TorchDispatchMode left on", *_mode_stack(torch._C._len_torch_dispatch_stack,
                                                          lambda: torch._C._pop_torch_dispatch_stack(None)),
              first=True),
        _Item("saved-tensor hooks left on", lambda: torch._C._autograd._top_saved_tensors_default_hooks(True),
              lambda v: _pop_saved_hooks(v), same=lambda a, b: a == b),
    ]
    for label, module, name in _backend_flags():
        items.append(_Item(f"torch.backends.{label}.{name}",
                           lambda m=module, n=name: getattr(m, n), lambda v, m=module, n=name: _set_flag(m, n, v)))
    items += _autocast_items()
    items += _npu_items()
    items += _lab_items()
    items += _config_items()
    return items


def _pop_saved_hooks(target: Any) -> None:
    for _ in range(100):
        if torch._C._autograd._top_saved_tensors_default_hooks(True) == target:
            return
        torch._C._autograd._pop_saved_tensors_default_hooks()


# --- attributes of modules and classes --------------------------------------------------------------

_NAMESPACES: tuple[int, list[tuple[str, Any, bool]]] | None = None


def _namespaces() -> list[tuple[str, Any, bool]]:
    """(name, module or class, strict), made again when modules have been imported since."""
    global _NAMESPACES
    if _NAMESPACES is None or _NAMESPACES[0] != len(sys.modules):
        _NAMESPACES = (len(sys.modules), _find_namespaces())
    return _NAMESPACES[1]


def _find_namespaces() -> list[tuple[str, Any, bool]]:
    """(name, module or class, strict): strict ones also lose attributes the learner's code added."""
    out: list[tuple[str, Any, bool]] = [
        ("torch", torch, False), ("torch.Tensor", torch.Tensor, True), ("torch.nn.functional", torch.nn.functional,
                                                                        False),
        ("torch.testing", torch.testing, False), ("torch.nn.Module", torch.nn.Module, False),
        ("math", math, True), ("operator", operator, True), ("builtins", builtins, True), ("numpy", np, False),
        ("torch.fx.GraphModule", torch.fx.GraphModule, False), ("torch.fx.Graph", torch.fx.Graph, False),
        ("torch.fx.Node", torch.fx.Node, False), ("torch.fx.Interpreter", torch.fx.Interpreter, False),
        ("torch.library.Library", torch.library.Library, False),
    ]
    for name, module in list(sys.modules.items()):
        if module is None or not name.startswith(("npu_lab.grading", "npu_lab.exercises")):
            continue
        out.append((name, module, False))
        for value in list(vars(module).values()):
            if isinstance(value, type) and getattr(value, "__module__", None) == name:
                out.append((f"{name}.{value.__name__}", value, False))
    return out


#: Attributes PyTorch changes itself when a setting changes (torch.Storage follows the default dtype).
_FOLLOWERS = frozenset({"torch.Storage"})
#: Module globals of the grading code that it changes itself (caches, the watchdog thread...).
_VOLATILE = frozenset({"_loaded", "_PRISTINE", "_ITEMS", "_NAMESPACES", "_watchdog", "_saved_handler",
                       "_saved_watchdog_handler", "_saved_hooks"})


def _attrs(obj: Any) -> dict[str, Any]:
    attrs = dict(vars(obj))
    if getattr(obj, "__name__", "").startswith("npu_lab."):
        for k in _VOLATILE & attrs.keys():
            del attrs[k]
    return attrs


#: Patches PyTorch itself makes on first use, kept when they appear during a check: Dynamo wraps
#: ``nn.Module.__init__``/``__setstate__`` once, on its first compile, to tag modules it sees created.
_PYTORCH_PATCHES = {("__init__", "torch._dynamo.mutation_guard"), ("__setstate__", "torch._dynamo.mutation_guard")}


def _pytorch_patch(obj: Any, name: str, value: Any) -> bool:
    return obj is torch.nn.Module and (name, getattr(value, "__module__", None)) in _PYTORCH_PATCHES


def _runtime_cache(name: str) -> bool:
    """A name Python or Dynamo adds on its own, kept when it appears during a check: ``copyreg``'s
    ``__slotnames__`` cache on a class that was copied or pickled, and the globals Dynamo installs in the
    module of a function it compiles (``__builtins_dict___42``, ``__compiled_fn_3``, ``__resume_at_..``:
    its compiled code reads them, so removing them would break it)."""
    return name == "__slotnames__" or (name.startswith("__") and not name.endswith("__"))


def _restore_attrs(obj: Any, saved: dict[str, Any], strict: bool) -> list[str]:
    changed = []
    now = vars(obj)
    for k, v in saved.items():
        if now.get(k, _MISSING) is not v and not _pytorch_patch(obj, k, now.get(k)) and not _runtime_cache(k):
            changed.append(k)
            try:
                setattr(obj, k, v) if not isinstance(obj, dict) else obj.__setitem__(k, v)
            except (AttributeError, TypeError):
                pass
    if strict:
        for k in [k for k in now if k not in saved and not _runtime_cache(k)]:
            changed.append(k)
            try:
                delattr(obj, k)
            except (AttributeError, TypeError):
                pass
    return changed


# --- registrations with the dispatcher ----------------------------------------------------------
#
# While the learner's code runs, ``torch.library.Library.__init__`` notes every library made and who made
# it: the first frame outside torch.library's own API (``torch.library.custom_op`` makes libraries too)
# decides. A library the learner's code made is destroyed when its call returns (or, for an exercise about
# registering a kernel, when the check ends); one that PyTorch or the lab makes on first use, even during
# the learner's call (a module imported lazily), is left alone. ``torch.library._impls`` is then made to
# say what the live libraries hold: destroying a library removes its keys from that set even when another
# library holds them too.

_API_FILES = ("torch/library.py", "torch/_library/")


def _made_by_learner(frame: Any) -> bool:
    from .guard import _is_learner_frame

    f = frame
    while f is not None:
        name = f.f_code.co_filename.replace(os.sep, "/")
        if not any(part in name for part in _API_FILES):
            return _is_learner_frame(f.f_code.co_filename)
        f = f.f_back
    return False


class LibraryWatch:
    """``with LibraryWatch() as watch:`` notes the ``torch.library.Library`` objects the learner's code makes."""

    def __init__(self) -> None:
        self.made: list[Any] = []  # weak references to the learner's libraries

    def __enter__(self) -> LibraryWatch:
        import weakref

        library = torch.library.Library
        self._original = library.__dict__["__init__"]
        original, made = self._original, self.made

        def __init__(lib: Any, *args: Any, **kwargs: Any) -> None:  # noqa: N807
            original(lib, *args, **kwargs)
            if _made_by_learner(sys._getframe(1)):
                made.append(weakref.ref(lib))

        __init__.__wrapped__ = original  # type: ignore[attr-defined]
        library.__init__ = __init__
        return self

    def __exit__(self, *exc: object) -> None:
        torch.library.Library.__init__ = self._original

    def alive(self) -> list[Any]:
        return [lib for lib in (r() for r in self.made) if lib is not None and getattr(lib, "m", None) is not None]


def live_registrations() -> frozenset[str]:
    """What the live ``torch.library.Library`` objects have registered ("ns/op/DispatchKey")."""
    import weakref

    out: set[str] = set()
    for info in list(weakref.finalize._registry.values()):
        if info.func is torch.library._del_library:
            obj = info.weakref()
            if obj is not None and getattr(obj, "m", None) is not None:
                out |= set(obj._op_impls)
    return frozenset(out)


def destroy_libraries(libraries: list[Any]) -> list[str]:
    """Destroy these libraries (the learner's); the keys they had registered."""
    destroyed: list[str] = []
    for lib in libraries:
        try:
            if getattr(lib, "m", None) is None:
                continue
            destroyed += sorted(lib._op_impls) or [f"a library of namespace {lib.ns!r}"]
            lib._destroy()
        except Exception:  # noqa: BLE001,S112 - a half-made library: leave it
            continue
    if destroyed:
        live = live_registrations()
        if set(torch.library._impls) != live:
            torch.library._impls.clear()
            torch.library._impls.update(live)
    return destroyed


# --- the snapshot ----------------------------------------------------------------------------------

_OPTIONAL_MODULES = ("npu_lab.lazy.trace", "npu_lab.compiler.custom_passes", "torch._dynamo.config",
                     "torch._inductor.config", "torch._functorch.config", "torch.fx.experimental._config")
_ITEMS: tuple[tuple[bool, ...], list[_Item]] | None = None
_PRISTINE: list[tuple[str, Any, bool, dict[str, Any]]] | None = None


def _all_items() -> list[_Item]:
    """The items, made again when a module with state of its own has been imported since."""
    global _ITEMS
    key = tuple(sys.modules.get(n) is not None for n in _OPTIONAL_MODULES)
    if _ITEMS is None or _ITEMS[0] != key:
        _ITEMS = (key, _items())
    return _ITEMS[1]


@dataclass
class Snapshot:
    """The global state at one moment; :meth:`restore` puts it back."""

    values: list[tuple[_Item, Any]] = field(default_factory=list)
    namespaces: list[tuple[str, Any, bool, dict[str, Any]]] = field(default_factory=list)

    def restore(self) -> list[str]:
        """Put back what changed since the snapshot; the names of what had changed (for the learner).

        (Kernel registrations are handled by :class:`LibraryWatch` and :func:`destroy_libraries`.)
        """
        changed: list[str] = []
        for name, obj, strict, saved in self.namespaces:
            keys = [k for k in _restore_attrs(obj, saved, strict) if f"{name}.{k}" not in _FOLLOWERS]
            changed += [f"{name}.{k}" for k in sorted(keys)[:3]] + ([f"{len(keys) - 3} more in {name}"]
                                                                    if len(keys) > 3 else [])
        # the mode stacks first: torch.set_default_device pushes a mode the default-device item pops
        for item, value in sorted(self.values, key=lambda iv: not iv[0].first):
            try:
                now = item.get()
                if item.same(value, now):
                    continue
            except Exception:  # noqa: BLE001 - cannot read it back: put it back anyway
                pass
            try:
                item.set(value)
            except Exception:  # noqa: BLE001,S112 - best effort: the rest still gets restored
                continue
            if item.notable:
                changed.append(item.name)
        return changed


def snapshot(namespaces: bool = True, per_call: bool = False) -> Snapshot:
    """The global state now (``namespaces``: also the attributes of torch, math, the grading code...;
    ``per_call``: leave out what is only saved around a whole check)."""
    values = []
    for item in _all_items():
        if per_call and not item.per_call:
            continue
        try:
            values.append((item, item.get()))
        except Exception:  # noqa: BLE001,S112 - a piece of state this build cannot read
            continue
    spaces = [(n, o, s, _attrs(o)) for n, o, s in _namespaces()] if namespaces else []
    return Snapshot(values, spaces)


def pristine() -> list[tuple[str, Any, bool, dict[str, Any]]]:
    """The grading code's own modules as first loaded, so a patch made before a check is undone for it."""
    global _PRISTINE
    if _PRISTINE is None:
        _PRISTINE = [(n, o, s, _attrs(o)) for n, o, s in _namespaces() if n.startswith("npu_lab.")]
    return _PRISTINE


def reset_grading_code() -> list[str]:
    """Undo changes to the grading code's modules and classes (made in a notebook before the check)."""
    changed = []
    for name, obj, strict, saved in pristine():
        changed += [f"{name}.{k}" for k in sorted(_restore_attrs(obj, saved, strict))[:3]]
    return changed
