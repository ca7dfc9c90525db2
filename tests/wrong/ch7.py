"""Plausible wrong answers to chapter 7's exercises (the Dispatcher)."""

WRONG: dict[str, list[str]] = {
    "ch7.key_path": [
        # stops at the first key with an entry: forgets that autograd passes the call on
        "def dispatch_walk(keyset, table):\n"
        "    for key in keyset:\n"
        "        if table.get(key) not in (None, 'fallthrough'):\n"
        "            return [key]\n"
        "    return []",
        # does not skip fallthroughs
        "def dispatch_walk(keyset, table):\n"
        "    ran = []\n"
        "    for key in keyset:\n"
        "        if key in table:\n"
        "            ran.append(key)\n"
        "            if table[key] not in ('autograd kernel', 'fallthrough') and key not in ('ADInplaceOrView', "
        "'BackendSelect'):\n"
        "                break\n"
        "    return ran",
        # every autograd key passes the call on, even when it holds a math (composite) kernel
        "def dispatch_walk(keyset, table):\n"
        "    ran = []\n"
        "    for key in keyset:\n"
        "        kind = table.get(key)\n"
        "        if kind in (None, 'fallthrough'):\n"
        "            continue\n"
        "        ran.append(key)\n"
        "        if not (key.startswith(('Autograd', 'Autocast')) or key in ('ADInplaceOrView', 'BackendSelect')):\n"
        "            break\n"
        "    return ran",
        # an autocast kernel taken for the end of the walk (it casts and passes the call on)
        "def dispatch_walk(keyset, table):\n"
        "    ran = []\n"
        "    for key in keyset:\n"
        "        kind = table.get(key)\n"
        "        if kind in (None, 'fallthrough'):\n"
        "            continue\n"
        "        ran.append(key)\n"
        "        if not (kind == 'autograd kernel' or (kind == 'kernel' and key in ('ADInplaceOrView', "
        "'BackendSelect'))):\n"
        "            break\n"
        "    return ran",
    ],
    "ch7.register_kernel": [
        # flattens to rows of the first dimension: a 0-d tensor has none
        "def register_hardswish():\n"
        "    def kernel(self):\n"
        "        src = self.contiguous().view(self.shape[0], -1)\n"
        "        out = torch.empty_like(src)\n"
        "        hardswish_loop(npu_lab.device_array(src).reshape(-1), npu_lab.device_array(out).reshape(-1))\n"
        "        return out.view(self.shape)\n"
        "    lib = torch.library.Library('aten', 'IMPL')\n"
        "    lib.impl('hardswish', kernel, 'PrivateUse1')\n"
        "    return lib",
        # right values, but computed on the CPU and copied back: what the fallback does, by hand
        "def register_hardswish():\n"
        "    lib = torch.library.Library('aten', 'IMPL')\n"
        "    lib.impl('hardswish', lambda self: F.hardswish(self.cpu()).to(self.device), 'PrivateUse1')\n"
        "    return lib",
        # forgets to return the library: Python frees it and the registration goes with it
        "def register_hardswish():\n"
        "    lib = torch.library.Library('aten', 'IMPL')\n"
        "    lib.impl('hardswish', hardswish_npu, 'PrivateUse1')",
        # forgets the division by 6
        "@numba.njit\n"
        "def _loop6(x, out):\n"
        "    for i in range(x.size):\n"
        "        out[i] = x[i] * min(max(x[i] + 3.0, 0.0), 6.0)\n"
        "def register_hardswish():\n"
        "    def kernel(self):\n"
        "        src = self.contiguous()\n"
        "        out = torch.empty_like(src)\n"
        "        _loop6(npu_lab.device_array(src).reshape(-1), npu_lab.device_array(out).reshape(-1))\n"
        "        return out\n"
        "    lib = torch.library.Library('aten', 'IMPL')\n"
        "    lib.impl('hardswish', kernel, 'PrivateUse1')\n"
        "    return lib",
        # registers the neighbouring operator by mistake
        "def register_hardswish():\n"
        "    lib = torch.library.Library('aten', 'IMPL')\n"
        "    lib.impl('hardsigmoid', hardswish_npu, 'PrivateUse1')\n"
        "    return lib",
        # a right kernel, registered for the CPU as well "to compare with"
        "def register_hardswish():\n"
        "    lib = torch.library.Library('aten', 'IMPL')\n"
        "    lib.impl('hardswish', hardswish_npu, 'PrivateUse1')\n"
        "    lib.impl('hardswish', lambda self: self * (self + 3).clamp(0, 6) / 6, 'CPU')\n"
        "    return lib",
        # 'saves memory' by writing the result into its input and returning it
        "def register_hardswish():\n"
        "    def kernel(self):\n"
        "        if not self.is_contiguous():\n"
        "            return hardswish_npu(self)\n"
        "        hardswish_loop(npu_lab.device_array(self).reshape(-1), npu_lab.device_array(self).reshape(-1))\n"
        "        return self\n"
        "    lib = torch.library.Library('aten', 'IMPL')\n"
        "    lib.impl('hardswish', kernel, 'PrivateUse1')\n"
        "    return lib",
        # clips only below: x * max(x + 3, 0) / 6 (wrong for x > 3)
        "@numba.njit\n"
        "def _loop_low(x, out):\n"
        "    for i in range(x.size):\n"
        "        out[i] = x[i] * max(x[i] + 3.0, 0.0) / 6.0\n"
        "def register_hardswish():\n"
        "    def kernel(self):\n"
        "        src = self.contiguous()\n"
        "        out = torch.empty_like(src)\n"
        "        _loop_low(npu_lab.device_array(src).reshape(-1), npu_lab.device_array(out).reshape(-1))\n"
        "        return out\n"
        "    lib = torch.library.Library('aten', 'IMPL')\n"
        "    lib.impl('hardswish', kernel, 'PrivateUse1')\n"
        "    return lib",
    ],
    "ch7.custom_op": [
        # no autograd formula
        "@torch.library.custom_op('ch7wrong_a::swiglu', mutates_args=())\n"
        "def swiglu(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:\n"
        "    return F.silu(a) * b\n"
        "swiglu.register_fake(lambda a, b: torch.empty_like(a))",
        # a backward that forgets the derivative of sigmoid
        "@torch.library.custom_op('ch7wrong_b::swiglu', mutates_args=())\n"
        "def swiglu(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:\n"
        "    return F.silu(a) * b\n"
        "swiglu.register_fake(lambda a, b: torch.empty_like(a))\n"
        "def _setup_b(ctx, inputs, output):\n"
        "    ctx.save_for_backward(*inputs)\n"
        "def _backward_b(ctx, grad):\n"
        "    a, b = ctx.saved_tensors\n"
        "    return grad * b * torch.sigmoid(a), grad * F.silu(a)\n"
        "swiglu.register_autograd(_backward_b, setup_context=_setup_b)",
        # 'saves memory' by working in place on its input, which the schema says it does not change
        "@torch.library.custom_op('ch7wrong_c::swiglu', mutates_args=())\n"
        "def swiglu(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:\n"
        "    return a.mul_(torch.sigmoid(a)).mul_(b)\n"
        "swiglu.register_fake(lambda a, b: torch.empty_like(a))\n"
        "swiglu.register_autograd(swiglu_backward, setup_context=swiglu_setup)",
        # a fake implementation with the wrong shape
        "@torch.library.custom_op('ch7wrong_d::swiglu', mutates_args=())\n"
        "def swiglu(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:\n"
        "    return F.silu(a) * b\n"
        "swiglu.register_fake(lambda a, b: a.new_empty(a.shape[:-1]))\n"
        "swiglu.register_autograd(swiglu_backward, setup_context=swiglu_setup)",
        # d/db forgets the upstream gradient
        "@torch.library.custom_op('ch7wrong_e::swiglu', mutates_args=())\n"
        "def swiglu(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:\n"
        "    return F.silu(a) * b\n"
        "swiglu.register_fake(lambda a, b: torch.empty_like(a))\n"
        "def _backward_e(ctx, grad):\n"
        "    a, b = ctx.saved_tensors\n"
        "    s = torch.sigmoid(a)\n"
        "    return grad * b * s * (1 + a * (1 - s)), a * s\n"
        "swiglu.register_autograd(_backward_e, setup_context=swiglu_setup)",
        # a fake implementation in the default dtype: float32 whatever the inputs are
        "@torch.library.custom_op('ch7wrong_f::swiglu', mutates_args=())\n"
        "def swiglu(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:\n"
        "    return F.silu(a) * b\n"
        "swiglu.register_fake(lambda a, b: torch.empty(a.shape, device=a.device))\n"
        "swiglu.register_autograd(swiglu_backward, setup_context=swiglu_setup)",
        # a plain Python function, not a custom operator (torch.compile traces into it)
        "def swiglu(a, b):\n"
        "    return F.silu(a) * b",
    ],
}

_COPIES = "COPIES = (torch.ops.aten._to_copy.default, torch.ops.aten.copy_.default)\n"

WRONG["ch7.dispatch_mode"] = [
    # a TorchFunctionMode: sees torch functions above autograd, not ATen calls (no backward, no decompositions)
    "from torch.overrides import TorchFunctionMode\n"
    "class StepLog(TorchFunctionMode):\n"
    "    def __init__(self):\n"
    "        super().__init__()\n"
    "        self.ops, self.copied = [], 0\n"
    "    def __torch_function__(self, func, types, args=(), kwargs=None):\n"
    "        self.ops.append(getattr(func, '__name__', str(func)))\n"
    "        return func(*args, **(kwargs or {}))",
    # the list is a class attribute: every log shares it (and it keeps growing)
    _COPIES +
    "class StepLog(TorchDispatchMode):\n"
    "    ops = []\n"
    "    copied = 0\n"
    "    def __torch_dispatch__(self, func, types, args=(), kwargs=None):\n"
    "        out = func(*args, **(kwargs or {}))\n"
    "        self.ops.append(func.name())\n"
    "        if func in COPIES:\n"
    "            src = args[1] if func is torch.ops.aten.copy_.default else args[0]\n"
    "            if src.device.type != out.device.type:\n"
    "                self.copied += out.numel() * out.element_size()\n"
    "        return out",
    # counts every copy, also those within one device
    _COPIES +
    "class StepLog(TorchDispatchMode):\n"
    "    def __init__(self):\n"
    "        super().__init__()\n"
    "        self.ops, self.copied = [], 0\n"
    "    def __torch_dispatch__(self, func, types, args=(), kwargs=None):\n"
    "        out = func(*args, **(kwargs or {}))\n"
    "        self.ops.append(func.name())\n"
    "        if func in COPIES:\n"
    "            self.copied += out.numel() * out.element_size()\n"
    "        return out",
    # counts elements, not bytes
    _COPIES +
    "class StepLog(TorchDispatchMode):\n"
    "    def __init__(self):\n"
    "        super().__init__()\n"
    "        self.ops, self.copied = [], 0\n"
    "    def __torch_dispatch__(self, func, types, args=(), kwargs=None):\n"
    "        out = func(*args, **(kwargs or {}))\n"
    "        self.ops.append(func.name())\n"
    "        if func in COPIES:\n"
    "            src = args[1] if func is torch.ops.aten.copy_.default else args[0]\n"
    "            if src.device.type != out.device.type:\n"
    "                self.copied += out.numel()\n"
    "        return out",
    # logs the op packet's name, without the overload ('aten::add' for 'aten::add_.Tensor')
    _COPIES +
    "class StepLog(TorchDispatchMode):\n"
    "    def __init__(self):\n"
    "        super().__init__()\n"
    "        self.ops, self.copied = [], 0\n"
    "    def __torch_dispatch__(self, func, types, args=(), kwargs=None):\n"
    "        out = func(*args, **(kwargs or {}))\n"
    "        self.ops.append(func._schema.name)\n"
    "        if func in COPIES:\n"
    "            src = args[1] if func is torch.ops.aten.copy_.default else args[0]\n"
    "            if src.device.type != out.device.type:\n"
    "                self.copied += out.numel() * out.element_size()\n"
    "        return out",
    # counts copies by the operator's name only (aten::_to_copy, aten::copy_): misses aten::to in inference mode
    _COPIES +
    "class StepLog(TorchDispatchMode):\n"
    "    def __init__(self):\n"
    "        super().__init__()\n"
    "        self.ops, self.copied = [], 0\n"
    "    def __torch_dispatch__(self, func, types, args=(), kwargs=None):\n"
    "        out = func(*args, **(kwargs or {}))\n"
    "        self.ops.append(func.name())\n"
    "        if func in COPIES:\n"
    "            src = args[1] if func is torch.ops.aten.copy_.default else args[0]\n"
    "            if src.device.type != out.device.type:\n"
    "                self.copied += out.numel() * out.element_size()\n"
    "        return out",
]

_RIGHT_COUNT = ("        tensors = [a for a in args if isinstance(a, torch.Tensor)]\n"
                "        src = args[1] if func is torch.ops.aten.copy_.default else "
                "(tensors[0] if tensors else None)\n")

WRONG["ch7.dispatch_mode"] += [
    # compares devices, not device types: a copy from npu:0 to npu:1 counts as host<->device
    "class StepLog(TorchDispatchMode):\n"
    "    def __init__(self):\n"
    "        super().__init__()\n"
    "        self.ops, self.copied = [], 0\n"
    "    def __torch_dispatch__(self, func, types, args=(), kwargs=None):\n"
    "        out = func(*args, **(kwargs or {}))\n"
    "        self.ops.append(func.name())\n" + _RIGHT_COUNT +
    "        if isinstance(out, torch.Tensor) and src is not None and src.device != out.device:\n"
    "            self.copied += out.numel() * out.element_size()\n"
    "        return out",
    # reads the runtime's counters instead of counting per call (a .item() moves bytes but returns no tensor)
    "class StepLog(TorchDispatchMode):\n"
    "    def __init__(self):\n"
    "        super().__init__()\n"
    "        self.ops, self.copied = [], 0\n"
    "    def __enter__(self):\n"
    "        self._start = npu_lab.transfer_stats()\n"
    "        return super().__enter__()\n"
    "    def __exit__(self, *exc):\n"
    "        end = npu_lab.transfer_stats()\n"
    "        self.copied = sum(end[k] - self._start[k] for k in ('host_to_device_bytes', 'device_to_host_bytes'))\n"
    "        return super().__exit__(*exc)\n"
    "    def __torch_dispatch__(self, func, types, args=(), kwargs=None):\n"
    "        self.ops.append(func.name())\n"
    "        return func(*args, **(kwargs or {}))",
    # takes the first tensor argument as the source of every call, copy_ too (its destination)
    "class StepLog(TorchDispatchMode):\n"
    "    def __init__(self):\n"
    "        super().__init__()\n"
    "        self.ops, self.copied = [], 0\n"
    "    def __torch_dispatch__(self, func, types, args=(), kwargs=None):\n"
    "        out = func(*args, **(kwargs or {}))\n"
    "        self.ops.append(func.name())\n"
    "        tensors = [a for a in args if isinstance(a, torch.Tensor)]\n"
    "        src = tensors[0] if tensors else None\n"
    "        if isinstance(out, torch.Tensor) and src is not None and src.device.type != out.device.type:\n"
    "            self.copied += out.numel() * out.element_size()\n"
    "        return out",
]
