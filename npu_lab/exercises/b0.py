"""Bring-up chapter B0 (chapters/B0_bring_up.ipynb): the bare device and a first kernel.

No exercises (milestone 1, ``b1``, is the first graded one): the chapter's concept checklist and its
"predict, then run" questions, each answered in the chapter by a cell that runs the real mechanism.
"""

from __future__ import annotations

from ..grading.predictions import question
from ..grading.registry import chapter

chapter("b0", "Bring-up: a device with a runtime and no kernels", [
    "A bare device (NPU_LAB_BARE=1) has memory, copies, views and .item(), and no arithmetic",
    "coverage() lists what a model needs, backward included, in the forms PyTorch calls (out= forms)",
    "A kernel is registered for PrivateUse1 with torch.library and reports its launch with bringup.launch",
    "An out= kernel writes through out's strides (out may be a dense view with a layout of its own)",
    "Every milestone is graded on hidden shapes and layouts, PyTorch's errors and memcheck",
])

question("b0.ones_runs", "On the bare device, does torch.ones(2, device='npu') run?",
         why="torch.ones is empty followed by fill_: the runtime allocates, but no kernel on this device can fill",
         choices=(True, False))
question("b0.mm_needed", "The MLP's forward calls linear layers and relu only. Is aten::mm.out on the list of "
         "operators it still needs?",
         why="the backward of a linear layer multiplies matrices without a bias: the gradients of its input and of "
             "its weight are mm, not addmm", choices=(True, False))
question("b0.out_contiguous", "For -t.T, the negation of a transposed view, is the out tensor the kernel receives "
         "contiguous?",
         why="PyTorch allocates out as empty_like(self), which keeps the layout of a view that covers its memory "
             "densely: the transpose's strides (1, 3)", choices=(True, False))
question("b0.neg_us", "How many microseconds of simulated device time does torch.neg(t), on 6 elements, take?",
         why="time = launch + max(FLOPs / peak, bytes / bandwidth): the 4 us launch is far longer than the time of "
             "6 FLOPs and 48 bytes", rtol=0.05)
