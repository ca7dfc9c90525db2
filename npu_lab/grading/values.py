"""Values from the learner's code, made plain before the check compares them.

A learner's value is compared by the check's own functions, never by methods
of the value: an object whose ``__eq__`` always returns ``True``, an ``int`` or
``str`` subclass, a ``torch.Tensor`` subclass whose ``__torch_function__``
answers ``allclose`` with ``True``, all would otherwise pass. :func:`plain`
accepts only exact built-in types (``int``, ``float``, ``bool``, ``str``,
``None``, ``torch.Tensor``, ``torch.dtype``...) and containers of them, and
copies containers through the built-in types' own methods (so a ``dict`` or
``tuple`` subclass cannot change what is read). NumPy scalars become Python
numbers, and the dict subclasses of the standard library (``Counter``,
``defaultdict``, ``OrderedDict``) plain dicts.

The comparison functions here (:data:`allclose`, :data:`equal`, :data:`isclose`)
were taken when the grading code was imported: replacing ``torch.allclose``
from an answer does not change them.
"""

from __future__ import annotations

import collections
import math
from typing import Any

import numpy as np
import torch

#: The functions the checks compare with, captured at import.
allclose = torch.allclose
equal = torch.equal
isclose = math.isclose
isnan = math.isnan

_SCALARS = (int, float, bool, str, bytes, complex, type(None))
_TORCH_ATOMS = (torch.dtype, torch.device, torch.layout, torch.memory_format)
_TENSORS = (torch.Tensor, torch.nn.Parameter) + ((torch.nn.Buffer,) if hasattr(torch.nn, "Buffer") else ())
#: Dict subclasses of the standard library whose contents are read through dict's own methods.
_TRUSTED_DICTS = (collections.Counter, collections.defaultdict, collections.OrderedDict)
#: How deep and how big a value may be.
MAX_DEPTH = 32
MAX_ITEMS = 200_000

_tuple_items = tuple.__getitem__
_tuple_len = tuple.__len__
_list_copy = list.copy
_dict_copy = dict.copy
_set_copy = set.copy
_frozenset_copy = frozenset.copy


class NotPlain(TypeError):
    """The value is not plain data (the message says what is wrong with it)."""


def _type_name(obj: Any) -> str:
    from .guard import type_name

    return type_name(obj)


def _is_namedtuple_class(cls: type) -> bool:
    """A class made by ``collections.namedtuple`` / ``typing.NamedTuple`` (no methods of its own that compare)."""
    fields = cls.__dict__.get("_fields")
    overrides = {"__eq__", "__ne__", "__hash__", "__iter__", "__len__", "__getitem__", "__lt__", "__le__",
                 "__gt__", "__ge__", "__contains__", "__bool__", "__class__", "__getattribute__"}
    own = set()
    for klass in cls.__mro__:
        if klass is tuple:
            break
        own |= set(vars(klass))
    return isinstance(fields, tuple) and not (own & overrides)


class _Walker:
    def __init__(self) -> None:
        self.count = 0

    def __call__(self, value: Any, depth: int = 0) -> Any:
        self.count += 1
        if self.count > MAX_ITEMS:
            raise NotPlain(f"more than {MAX_ITEMS:,} values")
        if depth > MAX_DEPTH:
            raise NotPlain(f"nested more than {MAX_DEPTH} levels deep")
        cls = type(value)
        if cls in _SCALARS or cls in _TORCH_ATOMS:
            return value
        if cls in _TENSORS:
            return value
        if cls is torch.Size:
            return torch.Size([self._int(v) for v in _tuple_items(value, slice(None))])
        if isinstance(value, np.generic) and cls.__module__ == "numpy":
            return value.item()  # a NumPy scalar (np.float32, np.int64, np.bool_): its Python number
        if cls is tuple or (isinstance(value, tuple) and _is_namedtuple_class(cls)):
            return tuple(self(v, depth + 1) for v in _tuple_items(value, slice(None)))
        if cls is list:
            return [self(v, depth + 1) for v in _list_copy(value)]
        if cls is dict or cls in _TRUSTED_DICTS:
            return {self._key(k, depth): self(v, depth + 1) for k, v in _dict_copy(value).items()}
        if cls is set or cls is frozenset:
            items = _set_copy(value) if cls is set else _frozenset_copy(value)
            return cls(self._key(v, depth) for v in items)
        if isinstance(value, torch.Tensor):
            raise NotPlain(f"a {_type_name(value)}, a subclass of torch.Tensor: return a plain torch.Tensor")
        for base in (bool, int, float, complex, str, bytes, tuple, list, dict, set, frozenset):
            if isinstance(value, base) and cls is not base:
                raise NotPlain(f"a {_type_name(value)}, a subclass of {base.__name__}: "
                               f"return a plain {base.__name__}")
        raise NotPlain(f"a {_type_name(value)}")

    def _key(self, key: Any, depth: int) -> Any:
        key = self(key, depth + 1)
        if type(key) in (list, dict, set) or isinstance(key, torch.Tensor):
            raise NotPlain(f"a {_type_name(key)} as a dict key or set item")
        return key

    def _int(self, v: Any) -> int:
        if type(v) is not int:
            raise NotPlain(f"a torch.Size holding a {_type_name(v)}")
        return v


def plain(value: Any) -> Any:
    """``value`` as plain data (a copy of containers), or :class:`NotPlain` saying what it is instead."""
    return _Walker()(value)


def check_plain(value: Any) -> tuple[bool, Any, str]:
    """``(ok, plain value, why not)``."""
    try:
        return True, plain(value), ""
    except NotPlain as exc:
        return False, None, str(exc)
    except RecursionError:
        return False, None, "nested too deeply"


def is_plain_tensor(value: Any) -> bool:
    """An exact ``torch.Tensor`` (or ``nn.Parameter``), not a subclass that could answer for itself."""
    return type(value) in _TENSORS


def tensors_close(got: Any, want: Any, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: bool = False) -> bool:
    """Same shape and ``allclose`` on the CPU, for plain tensors only (anything else: ``False``)."""
    if not (is_plain_tensor(got) and is_plain_tensor(want)):
        return False
    if tuple(got.shape) != tuple(want.shape):
        return False
    g, w = got.detach().cpu(), want.detach().cpu()
    if g.dtype != w.dtype:
        g = g.to(w.dtype) if w.dtype.is_floating_point else g
    with torch._C.DisableTorchFunction():
        return bool(allclose(g, w, rtol=rtol, atol=atol, equal_nan=equal_nan))
