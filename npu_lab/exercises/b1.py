"""Bring-up milestone 1: an MLP trains on the bare device, with the learner's own kernels.

Four checks, each on the kernels registered for ``npu`` now (the answer is the device, not a function):

* ``b1.elementwise`` - ``fill_``, ``add``, ``mul``, ``relu``, ``threshold_backward`` (relu's gradient) and
  ``sum`` over dimensions (a broadcast operand's gradient): broadcasting, non-contiguous inputs, empty
  tensors, type promotion, ``alpha``, PyTorch's errors;
* ``b1.matmul`` - ``mm`` and ``addmm`` (``nn.Linear``'s forward and backward): transposed operands, an
  empty inner dimension, ``beta``/``alpha``, mismatched shapes and dtypes;
* ``b1.loss`` - ``log_softmax`` and ``nll_loss`` forward and backward;
* ``b1.train`` - the reference MLP trains five SGD steps (momentum 0.9) to the CPU's losses and weights,
  every kernel of yours telling the device it ran (a launch on the simulated clock).

Every case runs under ``npu_lab.memcheck()`` in a forked copy of the notebook's process, and a failure
names the operator whose kernel gave a different result than the CPU's (``npu_lab.grading.device``).
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

from ..grading.device import OpCase
from ..grading.registry import chapter, exercise
from ..grading.tester import Tester
from .bringup_checks import TIMEOUT, Training, grade_cases, randn, train_check
from .bringup_checks import gen as _g

chapter("b1", "Bring-up 1: an MLP on the bare device", [
    "A bare device has a runtime (memory, copies, views) and no compute kernels",
    "coverage() lists the operators a model still needs, out= forms included",
    "A kernel reads device memory through device_array, writes an output it allocated, and reports a launch",
    "Registering an operator's out= form gives PyTorch's own shape checks and type promotion for free",
    "Backward needs kernels of its own: threshold_backward, the matmuls of the gradient, nll_loss_backward",
    "The optimizer's foreach operators run on the device too",
])

# ---------------------------------------------------------------------------------------------
# b1.elementwise
# ---------------------------------------------------------------------------------------------

ELEMENTWISE_OPS = ["aten::fill_", "aten::add", "aten::mul", "aten::relu", "aten::threshold_backward", "aten::sum"]


def elementwise_cases() -> list[OpCase]:
    c = OpCase
    return [
        c("torch.full((3, 4), 2.5)", "fill_", lambda: [randn(3, 4)], lambda x: x.fill_(2.5),
          hint="fill_ writes the value into every element of the tensor, in place, and returns the tensor"),
        c("torch.ones on a transposed view (in place, strided)", "fill_", lambda: [randn(4, 6, seed=1)],
          lambda x: x.fill_(1.0), layout=lambda x: [x.t()],
          hint="a view's elements are not contiguous: write through its strides (device_array has them)"),
        c("fill_ of an empty tensor", "fill_", lambda: [torch.empty(0, 5)], lambda x: x.fill_(3.0), hidden=True,
          hint="an empty tensor: nothing to write, no error"),
        c("a + b, same shape", "add", lambda: [randn(5, 7), randn(5, 7, seed=1)], torch.add,
          hint="out = self + alpha * other, element by element, written into out's memory"),
        c("a + b with alpha=0.5", "add", lambda: [randn(5, 7), randn(5, 7, seed=1)],
          lambda a, b: torch.add(a, b, alpha=0.5), hint="add computes self + alpha * other"),
        c("x + bias (a row broadcast over the batch)", "add", lambda: [randn(8, 6), randn(6, seed=1)], torch.add,
          grad=True, hint="broadcasting: the (6,) bias is added to each of the 8 rows"),
        c("column (4, 1) + row (1, 5) -> (4, 5)", "add", lambda: [randn(4, 1), randn(1, 5, seed=1)], torch.add,
          hidden=True, hint="both operands broadcast: the result has the broadcast shape of the two"),
        c("a + b, a transposed", "add", lambda: [randn(6, 5), randn(5, 6, seed=1)], torch.add,
          layout=lambda a, b: [a.t(), b], hidden=True, hint="read each operand through its own strides"),
        c("a + 1.5 (a Python number)", "add", lambda: [randn(3, 3)], lambda a: a + 1.5, hidden=True,
          hint="a Python number arrives as a 0-dimensional CPU tensor (or through add.Scalar)"),
        c("int64 + float32 promotes to float32", "add",
          lambda: [torch.arange(12).reshape(3, 4), randn(3, 4, seed=2)], torch.add, hidden=True,
          hint="type promotion: the result is float32; read the int64 operand as float (or let add.out's "
               "structured meta compute the result dtype and cast the inputs)"),
        c("empty + empty", "add", lambda: [torch.empty(0, 3), torch.empty(0, 3)], torch.add, hidden=True,
          hint="an empty result: no kernel needs to run"),
        c("shapes that do not broadcast raise RuntimeError", "add", lambda: [randn(3, 4), randn(5, 4, seed=1)],
          torch.add, hint="PyTorch raises RuntimeError when shapes do not broadcast; so must the npu"),
        c("a boolean alpha with float tensors raises RuntimeError", "add", lambda: [randn(3), randn(3, seed=1)],
          lambda a, b: torch.add(a, b, alpha=True), hidden=True,
          hint="PyTorch refuses a bool alpha for a float result: register add.out and its meta function checks it"),
        c("a * b with a broadcast scale", "mul", lambda: [randn(4, 6), randn(1, 6, seed=1)], torch.mul,
          grad=True,
          hint="other's shape (1, 6) broadcasts over the rows: read it with stride 0 along dimension 0"),
        c("a * 0.9 (a Python number)", "mul", lambda: [randn(5)], lambda a: a * 0.9,
          hint="SGD's momentum multiplies by a number"),
        c("a * b, b a slice with a step", "mul", lambda: [randn(4, 5), randn(4, 10, seed=1)], torch.mul,
          layout=lambda a, b: [a, b[:, ::2]], hidden=True, hint="a slice with a step has stride 2"),
        c("relu forward and backward", "relu", lambda: [randn(6, 7)], torch.relu, grad=True,
          hint="relu's gradient is threshold_backward(grad, x, 0): grad where x > 0, else 0"),
        c("relu of a transposed view", "relu", lambda: [randn(5, 3, seed=3)], torch.relu, grad=True,
          layout=lambda x: [x.t()], hidden=True, hint="the forward and the backward both meet strided tensors"),
        c("relu at exactly 0 (gradient 0 there)", "threshold_backward",
          lambda: [torch.tensor([-1.0, 0.0, 2.0, 0.0, -0.5])], torch.relu, grad=True, hidden=True,
          hint="threshold_backward passes the gradient where x > threshold, strictly: at x == 0 it is 0"),
        c("relu of an empty tensor", "relu", lambda: [torch.empty(0)], torch.relu, hidden=True,
          hint="an empty tensor has no elements: the kernel must write nothing and must not fail"),
        c("x.sum(dim=0)", "sum", lambda: [randn(6, 4)], lambda x: x.sum(dim=0), grad=True,
          hint="each output element is the sum of one column: reduce over dim, keep the other dimensions"),
        c("x.sum(dim=(0, 2), keepdim=True)", "sum", lambda: [randn(3, 4, 5)],
          lambda x: x.sum(dim=(0, 2), keepdim=True), hint="keepdim keeps the summed dimensions with size 1"),
        c("x.sum(dim=-1) of a transposed view", "sum", lambda: [randn(5, 3, seed=1)], lambda x: x.sum(dim=-1),
          layout=lambda x: [x.t()], hidden=True,
          hint="a negative dim counts from the end, and the input is a view: read it through its strides"),
        c("x.sum(dim=1) of an empty dimension: zeros", "sum", lambda: [torch.empty(3, 0)], lambda x: x.sum(dim=1),
          hidden=True, hint="a sum of nothing is 0"),
        c("x.sum(dim=1) of int64 is int64", "sum", lambda: [torch.arange(12).reshape(3, 4)], lambda x: x.sum(dim=1),
          hidden=True, hint="summing integers gives int64 (sum.IntList_out's meta picks the dtype)"),
    ]


@exercise("b1.elementwise", "Elementwise kernels and sum: fill_, add, mul, relu and its backward, sum",
          names=[], timeout=TIMEOUT)
def _elementwise(t: Tester) -> None:
    grade_cases(t, elementwise_cases(), ELEMENTWISE_OPS)


# ---------------------------------------------------------------------------------------------
# b1.matmul
# ---------------------------------------------------------------------------------------------

MATMUL_OPS = ["aten::mm", "aten::addmm"]


def matmul_cases() -> list[OpCase]:
    c = OpCase
    return [
        c("mm (5, 7) @ (7, 3)", "mm", lambda: [randn(5, 7), randn(7, 3, seed=1)], torch.mm,
          hint="out[i, j] = sum over k of self[i, k] * mat2[k, j]"),
        c("mm with the second operand transposed (as x @ weight.T)", "mm",
          lambda: [randn(8, 16), randn(12, 16, seed=1)], torch.mm, layout=lambda a, b: [a, b.t()],
          hint="weight.T is a view with strides (1, 16): read it through its strides"),
        c("mm, both operands transposed", "mm", lambda: [randn(9, 4), randn(6, 9, seed=1)], torch.mm,
          layout=lambda a, b: [a.t(), b.t()], hidden=True,
          hint="both operands are views with swapped strides: read each through its own strides"),
        c("mm with an empty inner dimension: zeros", "mm", lambda: [torch.empty(3, 0), torch.empty(0, 4)], torch.mm,
          hidden=True, hint="a sum of no products is 0: the (3, 4) result is all zeros"),
        c("mm (1, 1) @ (1, 1)", "mm", lambda: [randn(1, 1), randn(1, 1, seed=1)], torch.mm, hidden=True,
          hint="a 1 x 1 matrix product is one multiplication: no dimension may be squeezed away"),
        c("mm of 3-D tensors raises RuntimeError", "mm", lambda: [randn(2, 3, 4), randn(4, 5, seed=1)], torch.mm,
          hint="PyTorch raises RuntimeError (self must be a matrix); register mm.out and its meta checks shapes"),
        c("mm with mismatched inner sizes raises RuntimeError", "mm", lambda: [randn(3, 4), randn(5, 2, seed=1)],
          torch.mm, hidden=True,
          hint="self's columns must equal mat2's rows; register mm.out, so that its meta function checks shapes"),
        c("mm of float32 and int64 raises RuntimeError", "mm",
          lambda: [randn(3, 4), torch.ones(4, 2, dtype=torch.int64)], torch.mm, hidden=True,
          hint="mm does not promote: PyTorch raises RuntimeError for two dtypes"),
        c("nn.Linear forward and backward (addmm, mm, sum)", "addmm",
          lambda: [randn(6, 10), randn(4, 10, seed=1), randn(4, seed=2)], F.linear, grad=True,
          hint="F.linear is addmm(bias, x, weight.T); its backward computes grad @ weight and grad.T @ x "
               "(mm with transposed operands) and the bias gradient with sum over dim 0"),
        c("addmm with beta=0.5, alpha=2", "addmm", lambda: [randn(3, 5), randn(3, 4, seed=1), randn(4, 5, seed=2)],
          lambda b, x, w: torch.addmm(b, x, w, beta=0.5, alpha=2.0), hint="addmm = beta * self + alpha * (m1 @ m2)"),
        c("addmm with a (5,) bias broadcast to (3, 5)", "addmm",
          lambda: [randn(5), randn(3, 4, seed=1), randn(4, 5, seed=2)], torch.addmm, hidden=True,
          hint="self (the bias) broadcasts to the result's shape: one row added to every row"),
        c("addmm with beta=0 ignores NaN in self", "addmm",
          lambda: [torch.full((2, 3), float("nan")), randn(2, 4, seed=1), randn(4, 3, seed=2)],
          lambda b, x, w: torch.addmm(b, x, w, beta=0.0), hidden=True,
          hint="with beta == 0, self is not read at all (NaN in it must not reach the result)"),
        c("a batch of one row (1, 10) through nn.Linear", "addmm",
          lambda: [randn(1, 10), randn(3, 10, seed=1), randn(3, seed=2)], F.linear, grad=True, hidden=True,
          hint="F.linear is addmm(bias, x, weight.t()): a batch of one row is still a (1, 10) matrix"),
    ]


@exercise("b1.matmul", "Matrix products: mm and addmm, forward and backward", names=[], timeout=TIMEOUT)
def _matmul(t: Tester) -> None:
    grade_cases(t, matmul_cases(), MATMUL_OPS)


# ---------------------------------------------------------------------------------------------
# b1.loss
# ---------------------------------------------------------------------------------------------

LOSS_OPS = ["aten::_log_softmax", "aten::_log_softmax_backward_data", "aten::nll_loss_forward",
            "aten::nll_loss_backward"]


def _targets(n: int, classes: int, seed: int = 5) -> torch.Tensor:
    return torch.randint(0, classes, (n,), generator=_g(seed))


def loss_cases() -> list[OpCase]:
    c = OpCase
    return [
        c("log_softmax over the last dimension, forward and backward", "_log_softmax", lambda: [randn(4, 7)],
          lambda x: F.log_softmax(x, dim=-1), grad=True,
          hint="log_softmax(x) = x - max - log(sum(exp(x - max))): subtract the row's max first so exp never "
               "overflows; its backward is grad - exp(out) * grad.sum(dim)"),
        c("log_softmax of large logits (no overflow)", "_log_softmax",
          lambda: [torch.tensor([[1000.0, 1001.0, 999.0], [-1000.0, 0.0, 5.0]])], lambda x: F.log_softmax(x, 1),
          hidden=True, hint="exp(1000) overflows float32: subtract the row's max before exp"),
        c("log_softmax over dim 0", "_log_softmax", lambda: [randn(5, 3, seed=2)], lambda x: F.log_softmax(x, 0),
          grad=True, hidden=True, hint="the softmax dimension is an argument: handle any dim, not only the last"),
        c("cross entropy, mean (log_softmax + nll_loss), forward and backward", "nll_loss_forward",
          lambda: [randn(8, 5), _targets(8, 5)], F.cross_entropy, grad=True,
          hint="nll_loss picks -logp[i, target[i]] and averages; its backward puts -1/N at each target"),
        c("nll_loss with reduction='sum'", "nll_loss_forward", lambda: [randn(6, 4, seed=3), _targets(6, 4)],
          lambda x, y: F.nll_loss(F.log_softmax(x, 1), y, reduction="sum"), grad=True, hidden=True,
          hint="reduction is 0 (none), 1 (mean) or 2 (sum): with sum, total_weight is still the sum of the weights"),
        c("nll_loss with ignore_index=-100 targets", "nll_loss_forward",
          lambda: [randn(5, 3, seed=4), torch.tensor([0, -100, 2, 1, -100])],
          lambda x, y: F.nll_loss(F.log_softmax(x, 1), y), grad=True, hidden=True,
          hint="targets equal to ignore_index (-100) count neither in the sum nor in the mean's divisor"),
        c("nll_loss with a target out of range raises", "nll_loss_forward",
          lambda: [randn(3, 4, seed=5), torch.tensor([0, 7, 1])], lambda x, y: F.nll_loss(x, y), hidden=True,
          hint="a target outside [0, classes) is an error on the CPU (IndexError): the npu must raise the same "
               "kind, never read outside the row"),
    ]


@exercise("b1.loss", "The loss: log_softmax and nll_loss, forward and backward", names=[],
          timeout=TIMEOUT)
def _loss(t: Tester) -> None:
    grade_cases(t, loss_cases(), LOSS_OPS)


# ---------------------------------------------------------------------------------------------
# b1.train
# ---------------------------------------------------------------------------------------------

STEPS = 5


def _mlp(device_name: str):
    from .. import models

    model = models.mlp(10, 32, 5).to(device_name)
    x, y = models.example_batch(model, 16, device_name, seed=3)
    return model, x, y, F.cross_entropy


TRAINING = Training(
    "the MLP (SGD, momentum 0.9)", _mlp, lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9), STEPS,
    "the optimizer's step runs on the device too: _foreach_mul_ and _foreach_add_ (momentum), or the mul and add "
    "they fall back to")


@exercise("b1.train", "Train the MLP on the bare device: the CPU's losses, every kernel on the clock", names=[],
          timeout=TIMEOUT)
def _train_check(t: Tester) -> None:
    train_check(t, TRAINING, ELEMENTWISE_OPS + MATMUL_OPS + LOSS_OPS)
