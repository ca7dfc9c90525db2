"""Plausible wrong answers to milestone B8 (the debugging clinic), as a learner would write them.

Each entry redefines the answer's name in the namespace of the solved notebook (``array``, ``np``, ``numba``,
``torch``, ``dist``, ``bringup`` and ``clinic`` are there). The first of each is the clinic's broken piece
itself, handed in unfixed.
"""

_EXP_LOOP = """
@numba.njit
def loop(x, y):
    n = y.shape[0]
    for i in {steps}:
        y[i] = np.exp(x[{index}])

def exp_out(self, *, out):
    if self.numel():
        x = self.contiguous()
        loop(array(x).reshape(-1), array(out).reshape(-1))
        bringup.launch("exp", (x,), (out,))
    return out
"""


def _exp_loop(steps: str, index: str) -> str:
    """An exp_out whose loop runs over ``steps`` and reads ``x[index]``."""
    return _EXP_LOOP.format(steps=steps, index=index)


_AVERAGE = """
def average_metrics(metrics):
    out = {{}}
    for name in {order}:
        t = {reduced}
        dist.all_reduce(t)
        out[name] = {result}
    return out
"""


def _average(order: str, reduced: str, result: str) -> str:
    """An average_metrics that walks the names in ``order`` and all-reduces ``reduced`` into ``result``."""
    return _AVERAGE.format(order=order, reduced=reduced, result=result)


WRONG: dict[str, list[str]] = {
    "b8.strides": [
        "abs_out = clinic.abs_out",
        # strides right, the storage offset forgotten (a view that starts inside its storage)
        """
def abs_out(self, *, out):
    out.resize_(self.shape)
    if self.numel():
        np.abs(array(self.as_strided(self.shape, self.stride(), 0)), out=array(out))
        bringup.launch("abs", (self,), (out,))
    return out
""",
        # out never resized: abs.out's caller passes an empty out
        """
def abs_out(self, *, out):
    if self.numel():
        np.abs(array(self), out=array(out))
        bringup.launch("abs", (self,), (out,))
    return out
""",
        # the result goes into a tensor of its own; out is left empty
        """
def abs_out(self, *, out):
    result = torch.empty(self.shape, dtype=self.dtype, device=self.device)
    if self.numel():
        np.abs(array(self), out=array(result))
        bringup.launch("abs", (self,), (result,))
    return result
""",
    ],
    "b8.bounds": [
        "exp_out = clinic.exp_out",
        # the first element skipped
        _exp_loop("range(1, n)", "i"),
        # each element from its neighbour
        _exp_loop("range(n)", "min(i + 1, n - 1)"),
        # past the end only for large tensors (a tail loop written for vectors of 128)
        _exp_loop("range(n + (n > 128))", "min(i, n - 1)"),
    ],
    "b8.fake": [
        # the input itself
        "def row_scale_fake(x, eps):\n    return x\n",
        # x's strides kept: the kernel's result is contiguous
        "def row_scale_fake(x, eps):\n    return torch.empty_like(x)\n",
        # always float32
        "def row_scale_fake(x, eps):\n    return x.new_empty(x.shape, dtype=torch.float32)\n",
        # the last dimension reduced, as a mean would
        "def row_scale_fake(x, eps):\n    return x.new_empty(x.shape[:-1])\n",
        # on the CPU
        "def row_scale_fake(x, eps):\n    return torch.empty(x.shape, dtype=x.dtype)\n",
    ],
    "b8.copies": [
        "addmm_out = clinic.addmm_out",
        # into out.contiguous(): a copy when out is a transposed view, and the result is lost
        """
def addmm_out(self, mat1, mat2, *, beta=1, alpha=1, out):
    if out.numel():
        target = array(out.contiguous())
        np.matmul(array(mat1), array(mat2), out=target)
        target *= alpha
        if beta:
            target += beta * np.broadcast_to(array(self), target.shape)
        bringup.launch("addmm", (self, mat1, mat2), (out,))
    return out
""",
        # beta ignored
        """
def addmm_out(self, mat1, mat2, *, beta=1, alpha=1, out):
    if out.numel():
        target = array(out)
        np.matmul(array(mat1), array(mat2), out=target)
        target *= alpha
        target += np.broadcast_to(array(self), target.shape)
        bringup.launch("addmm", (self, mat1, mat2), (out,))
    return out
""",
        # the product through torch.mm and a copy, the bias forgotten
        """
def addmm_out(self, mat1, mat2, *, beta=1, alpha=1, out):
    out.copy_(torch.mm(mat1, mat2))
    return out
""",
    ],
    "b8.desync": [
        "average_metrics = clinic.average_metrics",
        # the order the metrics came in: it differs between the ranks
        _average("metrics", "metrics[name].clone()", "t * (1.0 / dist.get_world_size())"),
        # the caller's tensors reduced in place
        _average("sorted(metrics)", "metrics[name]", "t * (1.0 / dist.get_world_size())"),
        # two ranks assumed
        _average("sorted(metrics)", "metrics[name].clone()", "t * 0.5"),
        # summed, not averaged
        _average("sorted(metrics)", "metrics[name].clone()", "t"),
    ],
    "b8.module": [
        "register_device = clinic.register_device",
        # the module registered before the rename: its name is not a device type yet
        """
def register_device(name):
    import types
    import torch
    module = types.ModuleType(name)
    module.is_available = lambda: True
    module.device_count = lambda: 1
    torch._register_device_module(name, module)
    torch.utils.rename_privateuse1_backend(name)
    torch.utils.generate_methods_for_privateuse1_backend()
""",
        # no tensor methods generated
        """
def register_device(name):
    import types
    import torch
    torch.utils.rename_privateuse1_backend(name)
    module = types.ModuleType(name)
    module.is_available = lambda: True
    module.device_count = lambda: 1
    torch._register_device_module(name, module)
""",
        # a module that answers nothing
        """
def register_device(name):
    import types
    import torch
    torch.utils.rename_privateuse1_backend(name)
    torch._register_device_module(name, types.ModuleType(name))
    torch.utils.generate_methods_for_privateuse1_backend()
""",
        # the name of the first bug report, whatever name is asked for
        """
def register_device(name):
    import types
    import torch
    torch.utils.rename_privateuse1_backend("toy")
    module = types.ModuleType("toy")
    module.is_available = lambda: True
    module.device_count = lambda: 1
    torch._register_device_module("toy", module)
    torch.utils.generate_methods_for_privateuse1_backend()
""",
    ],
    "b8.race": [
        # the broken version: the sum never waits for the product
        """
def scaled_residual(x, w):
    side = torch.npu.Stream()
    with torch.npu.stream(side):
        y = x * w
    return y + x
""",
        # the wait the wrong way round: the side stream waits for the default one, not the other way
        """
def scaled_residual(x, w):
    main = torch.npu.current_stream()
    side = torch.npu.Stream()
    with torch.npu.stream(side):
        y = x * w
    side.wait_stream(main)
    return y + x
""",
        # the event recorded before the product: waiting for it waits for nothing
        """
def scaled_residual(x, w):
    side = torch.npu.Stream()
    done = torch.npu.Event()
    with torch.npu.stream(side):
        done.record(side)
        y = x * w
    done.wait(torch.npu.current_stream())
    return y + x
""",
        # the sum moved onto the side stream too: the caller reads the result without waiting
        """
def scaled_residual(x, w):
    side = torch.npu.Stream()
    with torch.npu.stream(side):
        y = x * w
        out = y + x
    return out
""",
        # the whole device synchronized: the right values, and no overlap left
        """
def scaled_residual(x, w):
    side = torch.npu.Stream()
    with torch.npu.stream(side):
        y = x * w
    torch.npu.synchronize()
    return y + x
""",
        # no side stream at all: right, and the overlap the function was written for is gone
        """
def scaled_residual(x, w):
    return x * w + x
""",
    ],
    "b8.factory": [
        # the strides ignored: a contiguous tensor of the right size
        """
def empty_strided(size, stride, dtype=None, layout=None, device=None, pin_memory=None):
    return torch.empty(size, dtype=dtype, device=device)
""",
        # numel() elements viewed with the strides: enough for a dense tensor, too few with gaps
        """
def empty_strided(size, stride, dtype=None, layout=None, device=None, pin_memory=None):
    import math
    return torch.empty(math.prod(size), dtype=dtype, device=device).as_strided(size, stride)
""",
        # the reach of the strides, and a size 0 forgotten: a tensor with no elements gets a storage
        """
def empty_strided(size, stride, dtype=None, layout=None, device=None, pin_memory=None):
    n = 1 + sum((s - 1) * st for s, st in zip(size, stride))
    return torch.empty(max(n, 0), dtype=dtype, device=device).as_strided(size, stride)
""",
        # every element counted as if it had a slot of its own: too big a storage
        """
def empty_strided(size, stride, dtype=None, layout=None, device=None, pin_memory=None):
    n = 0 if 0 in size else sum(s * max(st, 1) for s, st in zip(size, stride)) or 1
    return torch.empty(n, dtype=dtype, device=device).as_strided(size, stride)
""",
        # the dtype dropped: always float32
        """
def empty_strided(size, stride, dtype=None, layout=None, device=None, pin_memory=None):
    n = 0 if 0 in size else 1 + sum((s - 1) * st for s, st in zip(size, stride))
    return torch.empty(n, device=device).as_strided(size, stride)
""",
        # the device dropped: always the current device
        """
def empty_strided(size, stride, dtype=None, layout=None, device=None, pin_memory=None):
    n = 0 if 0 in size else 1 + sum((s - 1) * st for s, st in zip(size, stride))
    return torch.empty(n, dtype=dtype, device="npu").as_strided(size, stride)
""",
        # the kernel asks the dispatcher for empty_strided again: itself
        """
def empty_strided(size, stride, dtype=None, layout=None, device=None, pin_memory=None):
    return torch.empty_strided(size, stride, dtype=dtype, device=device)
""",
        # the tensor made on the host
        """
def empty_strided(size, stride, dtype=None, layout=None, device=None, pin_memory=None):
    return torch.empty_strided(size, stride, dtype=dtype, device="cpu")
""",
    ],
}
