"""Inductor for the ``npu``: way 3 of adapting PyTorch to a new chip.

``npu_lab.inductor.register()`` plugs the simulated NPU into TorchInductor the
way a vendor does (checked on torch 2.13):

* ``register_interface_for_device("npu", ...)`` - how Inductor talks to the device;
* ``register_backend_for_device("npu", NumbaScheduling, NpuWrapperCodegen)`` -
  who generates kernels for scheduler nodes on ``npu`` (here: numba code) and
  who writes the Python wrapper around them;
* ``register_device_op_overrides("npu", ...)`` - the lines the wrapper writes
  for device guards and synchronisation.

After that, ``torch.compile(fn, backend="inductor")`` on ``npu`` tensors runs
Inductor's lowering and scheduler; pointwise and reduction nodes become numba
kernels (:data:`npu_lab.inductor.scheduling.GENERATED` keeps their source) and
matmuls/convolutions are extern calls to the ``npu`` ATen kernels.
"""

from __future__ import annotations

_registered = False


def register() -> None:
    """Make Inductor generate code for ``npu`` tensors (idempotent)."""
    global _registered
    if _registered:
        return
    from torch._dynamo.device_interface import register_interface_for_device
    from torch._inductor.codegen.common import register_backend_for_device, register_device_op_overrides

    from .interface import NpuInterface
    from .scheduling import NumbaScheduling
    from .wrapper import NpuDeviceOpOverrides, NpuWrapperCodegen

    register_interface_for_device("npu", NpuInterface)
    register_backend_for_device("npu", NumbaScheduling, NpuWrapperCodegen)
    register_device_op_overrides("npu", NpuDeviceOpOverrides())
    _registered = True


def generated_kernels() -> dict[str, str]:
    """Every kernel Inductor generated for ``npu`` in this process: ``"<name>_<source hash>"`` -> numba source.

    Names (``npu_kernel_0``, ...) are numbered per compiled graph, so the hash tells
    kernels of different graphs apart; :func:`kernels_in` gives one graph's kernels by name.
    """
    from .scheduling import GENERATED

    return dict(GENERATED)


def kernels_in(wrapper_code: str) -> dict[str, str]:
    """name -> numba source of the kernels a wrapper module defines.

    Works on the code ``torch._inductor.utils.run_and_get_code`` returns, also
    when Inductor took the graph from its on-disk cache (then nothing is
    regenerated in this process, but the wrapper still carries the kernels).
    """
    import ast

    found: dict[str, str] = {}
    for node in ast.walk(ast.parse(wrapper_code)):
        if (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "load_kernel"
                and len(node.args) >= 2):
            found[ast.literal_eval(node.args[0])] = ast.literal_eval(node.args[1])
    return found
