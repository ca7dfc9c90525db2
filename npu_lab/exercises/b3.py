"""Bring-up milestone 3: a transformer block trains on the bare device (attention, layer norm, GELU, embedding,
dropout, AdamW).

Five checks, on the kernels registered for ``npu`` now, with milestones 1 and 2 loaded beside them:

* ``b3.attention`` - ``bmm``, ``_softmax`` and its backward, ``_safe_softmax``, ``tril``, ``where``, ``cat``: what
  ``F.scaled_dot_product_attention`` runs on a device without a fused attention kernel, and the ``split`` of the
  query, key and value projections backward;
* ``b3.layers`` - ``native_layer_norm`` and its backward, ``gelu`` and its backward (both approximations),
  ``index_select`` and ``embedding_dense_backward`` (an embedding's lookup and its gradient);
* ``b3.dropout`` - ``native_dropout`` and its backward on the device's generator: the drop rate, the scale,
  reproducible under ``torch.manual_seed``, a new mask every call (no comparison with the CPU: its generator is
  another one);
* ``b3.adamw`` - AdamW's ``_foreach_*`` kernels: the CPU's updates, and one launch per call whatever the number of
  parameters;
* ``b3.train`` - ``models.TransformerBlock`` trains three AdamW steps to the CPU's losses and weights.
"""

from __future__ import annotations

import math

import torch
from torch.nn import functional as F

from ..grading.device import OpCase, Property
from ..grading.registry import chapter, exercise
from ..grading.tester import Tester
from .bringup_checks import TIMEOUT, Training, gen, grade_cases, randn, train_check

chapter("b3", "Bring-up 3: a transformer block on the bare device", [
    "Without a fused attention kernel, scaled_dot_product_attention runs as batched matrix products and a softmax",
    "A numerically stable softmax subtracts the row's maximum; a row of -inf has no softmax, _safe_softmax gives 0",
    "Layer norm normalizes each row over its last dimensions and saves the mean and 1/std for the backward",
    "An embedding is an index_select forward and a scatter-add of rows backward",
    "A random kernel draws from the device's generator, so torch.manual_seed makes it reproducible",
    "A _foreach_ kernel updates a whole list of tensors in one launch",
])

TOL = {"rtol": 1e-4, "atol": 1e-5}

ATTENTION_OPS = ["aten::bmm", "aten::_softmax", "aten::_softmax_backward_data", "aten::_safe_softmax",
                 "aten::tril", "aten::where", "aten::cat"]


def _masked(*shape: int, seed: int = 0) -> torch.Tensor:
    """Scores with a causal mask already applied: -inf above the diagonal of the last two dimensions."""
    x = randn(*shape, seed=seed)
    return x.masked_fill(torch.ones(shape[-2:], dtype=torch.bool).triu(1), float("-inf"))


def _all_masked_row() -> list[torch.Tensor]:
    x = randn(3, 5)
    x[1] = float("-inf")  # a query that may attend to nothing
    return [x]


def attention_cases() -> list[OpCase]:
    c = OpCase
    return [
        c("bmm (3, 4, 5) @ (3, 5, 2), forward and backward", "bmm",
          lambda: [randn(3, 4, 5), randn(3, 5, 2, seed=1)], torch.bmm, grad=True, **TOL,
          hint="out[b] = a[b] @ c[b]: milestone 1's matrix product once per batch element"),
        c("bmm of a transposed operand (k.transpose(1, 2), as attention's q @ k^T)", "bmm",
          lambda: [randn(2, 4, 3), randn(2, 6, 3, seed=1)], torch.bmm,
          layout=lambda a, b: [a, b.transpose(1, 2)], grad=True, hidden=True, **TOL,
          hint="the second operand is a view with swapped strides: read it through them or make it contiguous"),
        c("bmm with an empty batch", "bmm", lambda: [randn(0, 4, 5), randn(0, 5, 2, seed=1)], torch.bmm,
          hidden=True,
          hint="a batch of 0 matrices: the result is empty and the kernel must not fail"),
        c("bmm of shapes that do not match raises RuntimeError", "bmm",
          lambda: [randn(2, 3, 4), randn(2, 5, 6, seed=1)], torch.bmm, hidden=True,
          hint="check the inner sizes (and the batch sizes) and raise RuntimeError, as the CPU does"),
        c("softmax over the last dimension, forward and backward", "_softmax", lambda: [randn(4, 7)],
          lambda x: F.softmax(x, -1), grad=True, **TOL,
          hint="softmax(x)_j = exp(x_j - max(x)) / sum_k exp(x_k - max(x)); backward: "
               "grad_in = y * (grad - sum(grad * y)) over the same dimension"),
        c("softmax over dimension 0 of a 3-D tensor", "_softmax", lambda: [randn(3, 4, 5)],
          lambda x: F.softmax(x, 0), grad=True, hidden=True, **TOL,
          hint="the dimension is any one, negative ones counted from the end: the row runs along it"),
        c("softmax of large scores (1000s): no overflow", "_softmax", lambda: [randn(3, 6) * 1000],
          lambda x: F.softmax(x, -1), grad=True, hidden=True, **TOL,
          hint="exp(1000) overflows float32: subtract the row's maximum before exp"),
        c("softmax of causally masked scores (-inf above the diagonal)", "_softmax", lambda: [_masked(2, 5, 5)],
          lambda x: F.softmax(x, -1), grad=True, hidden=True, **TOL, hint="exp(-inf) is 0: a masked score gets 0"),
        c("_safe_softmax of a row that is all -inf gives 0s", "_safe_softmax", _all_masked_row,
          lambda x: torch.ops.aten._safe_softmax(x, -1), grad=True, **TOL,
          hint="softmax of a row of -inf is 0/0 = NaN; attention's _safe_softmax returns 0 for such a row"),
        c("tril of a matrix, diagonal -1", "tril", lambda: [randn(5, 4)], lambda x: torch.tril(x, -1), grad=True,
          hint="tril keeps element (i, j) where j - i <= diagonal and writes 0 elsewhere; diagonal -1 drops the "
               "main diagonal too"),
        c("tril of a boolean matrix (attention's causal mask)", "tril",
          lambda: [torch.ones(4, 4, dtype=torch.bool)], torch.tril, hidden=True,
          hint="the mask is bool: your kernel must keep the dtype it was given"),
        c("tril of a batch of matrices, diagonal 1", "tril", lambda: [randn(2, 3, 5)],
          lambda x: torch.tril(x, 1), hidden=True, hint="tril works on the last two dimensions of any batch"),
        c("where with broadcasting: a (4, 1) condition, (1, 5) and (4, 5) values", "where",
          lambda: [randn(4, 1) > 0, randn(1, 5, seed=1), randn(4, 5, seed=2)], torch.where, grad=True,
          hint="the output has the broadcast shape of the three; each element picks self where the condition holds"),
        c("where with a 0-dimensional value (masked_fill's -inf)", "where",
          lambda: [randn(3, 4) > 0, randn(3, 4, seed=1), torch.tensor(float("-inf"))], torch.where, hidden=True,
          hint="a 0-d tensor broadcasts to every element, as a Python number would"),
        c("where of an int64 and a float32 tensor promotes to float32", "where",
          lambda: [randn(3, 3) > 0, torch.arange(9).reshape(3, 3), randn(3, 3, seed=1)], torch.where, hidden=True,
          hint="the result's dtype is torch.result_type(self, other)"),
        c("where with a condition that is not bool raises RuntimeError", "where",
          lambda: [randn(3), randn(3, seed=1), randn(3, seed=2)], torch.where, hidden=True,
          hint="the condition must be bool: raise RuntimeError for any other dtype, as the CPU does"),
        c("cat along dimension 0 and 1, and its backward (split's)", "cat",
          lambda: [randn(2, 3), randn(4, 3, seed=1), randn(2, 5, seed=2)],
          lambda a, b, d: (torch.cat([a, b]), torch.cat([a, d], 1)), grad=True,
          hint="out has each input's slice along the dimension in turn; cat's backward is split (views)"),
        c("cat skips an empty (0,) tensor, as PyTorch does", "cat",
          lambda: [randn(2, 3), torch.empty(0), randn(1, 3, seed=1)], lambda a, e, b: torch.cat([a, e, b]),
          hidden=True,
          hint="PyTorch skips 1-d empty tensors in cat whatever the other shapes: leave them out"),
        c("cat of non-contiguous tensors", "cat", lambda: [randn(3, 2), randn(3, 4, seed=1)],
          lambda a, b: torch.cat([a, b], 0), layout=lambda a, b: [a.t(), b[:, ::2].t()], hidden=True,
          hint="each input is a view: copy it through its strides into its slice of out"),
        c("scaled_dot_product_attention, causal, forward and backward", "scaled_dot_product_attention",
          lambda: [randn(2, 2, 5, 4), randn(2, 2, 5, 4, seed=1), randn(2, 2, 5, 4, seed=2)],
          lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), grad=True, **TOL,
          hint="the math path: softmax(q @ k^T / sqrt(d) + mask) @ v, with the mask made by tril and where"),
    ]


@exercise("b3.attention", "Attention: batched matmul, softmax, masks and cat", names=[], timeout=TIMEOUT)
def _attention(t: Tester) -> None:
    grade_cases(t, attention_cases(), ATTENTION_OPS)


LAYER_OPS = ["aten::native_layer_norm", "aten::native_layer_norm_backward", "aten::gelu", "aten::gelu_backward",
             "aten::index_select", "aten::embedding_dense_backward"]


def _ln(shape: tuple[int, ...], affine: bool = True):
    def fn(x, *wb):
        w, b = wb if affine else (None, None)
        return F.layer_norm(x, shape, w, b, eps=1e-5)
    return fn


def _constant_rows() -> list[torch.Tensor]:
    x = randn(3, 6)
    x[1] = 0.5  # a row whose variance is 0
    return [x, randn(6, seed=1), randn(6, seed=2)]


def _indices(*shape: int, high: int, seed: int = 3, dtype: torch.dtype = torch.int64) -> torch.Tensor:
    return torch.randint(0, high, shape, generator=gen(seed)).to(dtype)


def layer_cases() -> list[OpCase]:
    c = OpCase
    return [
        c("layer norm over the last dimension, with weight and bias, forward and backward", "native_layer_norm",
          lambda: [randn(2, 5, 8), randn(8, seed=1), randn(8, seed=2)], _ln((8,)), grad=True, **TOL,
          hint="each row: (x - mean) / sqrt(biased var + eps) * weight + bias; the backward needs the saved mean "
               "and rstd: grad_x = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = grad * weight"),
        c("layer norm over the last two dimensions", "native_layer_norm",
          lambda: [randn(3, 4, 5), randn(4, 5, seed=1), randn(4, 5, seed=2)], _ln((4, 5)), grad=True, hidden=True,
          **TOL, hint="normalized_shape can be several trailing dimensions: a row is all of them together"),
        c("layer norm without weight and bias", "native_layer_norm", lambda: [randn(4, 6)], _ln((6,), False),
          grad=True, hidden=True, **TOL, hint="weight and bias may be None (elementwise_affine=False)"),
        c("layer norm of a constant row", "native_layer_norm", _constant_rows, _ln((6,)), grad=True, hidden=True,
          **TOL, hint="the variance is 0: eps alone keeps rstd finite, and the row becomes bias"),
        c("layer norm of a non-contiguous input", "native_layer_norm", lambda: [randn(6, 4), randn(6, seed=1),
          randn(6, seed=2)], lambda x, w, b: F.layer_norm(x, (6,), w, b), layout=lambda x, w, b: [x.t(), w, b],
          grad=True, hidden=True, **TOL,
          hint="the input is a transposed view: normalize over its last dimension read through its strides"),
        c("gelu (the exact, erf form), forward and backward", "gelu", lambda: [randn(4, 6)], F.gelu, grad=True,
          **TOL, hint="gelu(x) = x * (1 + erf(x / sqrt(2))) / 2; its derivative adds x * exp(-x^2 / 2) / sqrt(2 pi)"),
        c("gelu with approximate='tanh'", "gelu", lambda: [randn(4, 6)], lambda x: F.gelu(x, approximate="tanh"),
          grad=True, hidden=True, **TOL,
          hint="the tanh form: x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))) / 2, and its own derivative"),
        c("gelu of large inputs (|x| up to 30)", "gelu", lambda: [randn(3, 5) * 10], F.gelu, grad=True, hidden=True,
          **TOL,
          hint="gelu(x) = x * (1 + erf(x / sqrt(2))) / 2 is x or 0 for large |x|: a formula that exponentiates x "
               "overflows to NaN"),
        c("gelu with an unknown approximation raises RuntimeError", "gelu", lambda: [randn(3)],
          lambda x: F.gelu(x, approximate="cubic"), hidden=True,
          hint="only 'none' and 'tanh' exist: raise RuntimeError for any other string, as the CPU does"),
        c("embedding of a (2, 5) batch of token ids, forward and backward", "index_select",
          lambda: [_indices(2, 5, high=7), randn(7, 4, seed=1)], F.embedding, grad=True, **TOL,
          hint="forward: row ids[i] of the weight; backward: embedding_dense_backward adds each output row's "
               "gradient into the row it came from (a repeated id gets the sum)"),
        c("embedding with padding_idx: that row gets no gradient", "embedding_dense_backward",
          lambda: [torch.tensor([[0, 2, 0, 3]]), randn(5, 3, seed=1)],
          lambda i, w: F.embedding(i, w, padding_idx=0), grad=True, hidden=True, **TOL,
          hint="embedding_dense_backward must skip the indices equal to padding_idx"),
        c("embedding with scale_grad_by_freq", "embedding_dense_backward",
          lambda: [torch.tensor([1, 1, 1, 4, 2]), randn(5, 3, seed=1)],
          lambda i, w: F.embedding(i, w, scale_grad_by_freq=True), grad=True, hidden=True, **TOL,
          hint="each row's gradient is divided by how many times its id occurs in the batch"),
        c("an id outside the table raises IndexError (and reads nothing outside it)", "index_select",
          lambda: [torch.tensor([1, 5]), randn(4, 3, seed=1)], F.embedding, hidden=True,
          hint="check every index against the size before you read: the CPU raises IndexError"),
        c("index_select along dimension 1 with int32 indices", "index_select",
          lambda: [randn(3, 6), _indices(4, high=6, dtype=torch.int32)], lambda x, i: torch.index_select(x, 1, i),
          hidden=True,
          hint="indices may be int32 or int64, and dim may be any dimension"),
    ]


@exercise("b3.layers", "Layer norm, GELU and embedding: forward and backward", names=[], timeout=TIMEOUT)
def _layers(t: Tester) -> None:
    grade_cases(t, layer_cases(), LAYER_OPS)


DROPOUT_OPS = ["aten::native_dropout", "aten::native_dropout_backward"]


def _npu(*shape: int, seed: int = 0) -> torch.Tensor:
    return randn(*shape, seed=seed).to("npu")


def _scale(p: float) -> float:
    return torch.tensor(1.0 / (1.0 - p), dtype=torch.float32).item()


def _mask_and_scale(x: torch.Tensor, p: float) -> str:
    """"" when dropout(x, p) drops a fair share and scales the rest exactly, else what is wrong."""
    out, mask = torch.native_dropout(x, p, True)
    if mask.dtype != torch.bool or mask.shape != x.shape or out.shape != x.shape or out.dtype != x.dtype:
        return (f"out {tuple(out.shape)} {out.dtype}, mask {tuple(mask.shape)} {mask.dtype}; expected "
                f"{tuple(x.shape)} {x.dtype} and {tuple(x.shape)} torch.bool")
    m, o, xc = mask.cpu(), out.cpu(), x.cpu()
    n = x.numel()
    kept = int(m.sum())
    sigma = math.sqrt(n * p * (1 - p))
    if n and abs(kept - n * (1 - p)) > 5 * sigma + 1:
        return f"kept {kept} of {n}, expected about {n * (1 - p):.0f} (1 - p = {1 - p:g})"
    want = torch.where(m, xc * _scale(p), torch.zeros(()))
    if not torch.allclose(o, want, rtol=1e-6, atol=0):
        return "out is not x * mask / (1 - p): a kept element must be x / (1 - p) and a dropped one 0"
    return ""


def _rate_and_scale() -> str:
    return _mask_and_scale(_npu(200_000), 0.3)


def _seeded() -> str:
    # torch.npu.manual_seed, not torch.manual_seed: the case runs in a forked copy of the notebook, where
    # torch.manual_seed leaves a device alone (as CUDA's after a fork); in the notebook it seeds the device too
    x = _npu(4096)
    torch.npu.manual_seed(3)
    a = torch.native_dropout(x, 0.5, True)[1].cpu()
    torch.npu.manual_seed(3)
    b = torch.native_dropout(x, 0.5, True)[1].cpu()
    c = torch.native_dropout(x, 0.5, True)[1].cpu()
    if not torch.equal(a, b):
        return "two calls after seeding the device with 3 gave different masks: draw from the device's generator"
    if torch.equal(b, c):
        return "the next call gave the same mask again: each call must draw new bits (the generator moves on)"
    torch.npu.manual_seed(4)
    if torch.equal(torch.native_dropout(x, 0.5, True)[1].cpu(), a):
        return "seeding the device with 4 gave the same mask as seeding it with 3"
    return ""


def _offset_moves() -> str:
    x = _npu(1000)
    torch.npu.manual_seed(0)
    before = torch.npu.get_offset()
    torch.native_dropout(x, 0.2, True)
    after = torch.npu.get_offset()
    if after <= before:
        return (f"the device generator's offset stayed at {before}: the mask did not come from it "
                "(bringup.random_bits draws from it)")
    return ""


def _backward() -> str:
    x = _npu(64, 16).requires_grad_(True)
    out, mask = torch.native_dropout(x, 0.4, True)
    g = _npu(64, 16, seed=1)
    out.backward(g)
    want = g.cpu() * mask.cpu() * _scale(0.4)
    if x.grad is None or not torch.allclose(x.grad.cpu(), want, rtol=1e-6, atol=0):
        return "x.grad is not grad * mask / (1 - p)"
    return ""


def _evaluation() -> str:
    x = _npu(5, 7)
    out, mask = torch.native_dropout(x, 0.5, False)
    if not torch.equal(out.cpu(), x.cpu()) or mask.dtype != torch.bool or not bool(mask.cpu().all()):
        return "with train=False out must equal x and the mask be all True"
    return ""


def _drop_all() -> str:
    x = _npu(6, 4)
    out, mask = torch.native_dropout(x, 1.0, True)
    if bool(out.cpu().ne(0).any()) or bool(mask.cpu().any()):
        return "with p = 1 every element is dropped: out all 0 and the mask all False (no division by 0)"
    return ""


def _strided() -> str:
    return _mask_and_scale(_npu(300, 200).t()[::2], 0.25)


def _empty() -> str:
    out, mask = torch.native_dropout(_npu(0, 3), 0.5, True)
    return "" if out.shape == (0, 3) and mask.shape == (0, 3) else f"shapes {out.shape}, {mask.shape}"


def dropout_cases() -> list[OpCase | Property]:
    p = Property
    return [
        p("drops each element with probability p and scales the kept ones by 1 / (1 - p)", "native_dropout",
          _rate_and_scale, "about (1 - p) * n kept (within 5 sigma), out = x * mask / (1 - p), a bool mask",
          hint="keep element i when its uniform number u_i >= p (or < 1 - p); out = x / (1 - p) there, else 0"),
        p("reproducible: the same seed gives the same mask, the next call a new one", "native_dropout", _seeded,
          "the same mask after the same seed, another without reseeding, another for another seed",
          hint="draw the bits with bringup.random_bits(n): the device's generator, which torch.manual_seed seeds"),
        p("draws from the device's generator (its offset moves on)", "native_dropout", _offset_moves,
          "torch.npu.get_offset() larger after the call", hidden=True,
          hint="draw the mask's random numbers with bringup.random_bits (the device's generator), not numpy's"),
        p("the backward through native_dropout is grad * mask / (1 - p)", "native_dropout_backward", _backward,
          "x.grad = grad * mask * scale", hint="native_dropout_backward(grad, mask, scale) = grad * mask * scale"),
        p("train=False returns x unchanged and an all-True mask", "native_dropout", _evaluation,
          "out == x, mask all True", hidden=True,
          hint="with train=False dropout keeps everything: out is x, the mask is all True"),
        p("p = 1 drops everything", "native_dropout", _drop_all, "out all 0, mask all False", hidden=True,
          hint="with p = 1 every element is dropped: out is all 0 (do not divide by 1 - p = 0)"),
        p("a non-contiguous input", "native_dropout", _strided, "the same rate and scale on a strided view",
          hidden=True, hint="the input is a view: read it through its strides or make it contiguous first"),
        p("an empty input", "native_dropout", _empty, "empty out and mask", hidden=True,
          hint="an empty input gives an empty out and an empty mask: the kernel must not fail"),
        OpCase("native_dropout_backward of a given mask", "native_dropout_backward",
               lambda: [randn(4, 5), randn(4, 5, seed=1) > 0],
               lambda g, m: torch.ops.aten.native_dropout_backward(g, m, 2.0), hidden=True,
               hint="grad_input = grad_output * mask * scale"),
    ]


@exercise("b3.dropout", "Dropout on the device's generator", names=[], timeout=TIMEOUT)
def _dropout(t: Tester) -> None:
    grade_cases(t, dropout_cases(), DROPOUT_OPS)


ADAMW_OPS = ["aten::_foreach_lerp_", "aten::_foreach_addcmul_", "aten::_foreach_sqrt", "aten::_foreach_div_",
             "aten::_foreach_add_", "aten::_foreach_addcdiv_"]

#: Parameter shapes of the AdamW cases: a matrix, a vector, a scalar and an empty one.
SHAPES = [(4, 3), (3,), (), (0, 5)]


def _tensors(seed: int, shapes=SHAPES, positive: bool = False) -> list[torch.Tensor]:
    out = [torch.randn(s, generator=gen(seed + i)) for i, s in enumerate(shapes)]
    return [t.abs() + 0.1 for t in out] if positive else out


def _adamw(*tensors: torch.Tensor, steps: int = 3) -> list[torch.Tensor]:
    """``steps`` AdamW steps on parameters ``tensors[:n]`` with gradients ``tensors[n:]`` (fixed)."""
    n = len(tensors) // 2
    params = [torch.nn.Parameter(t.detach().clone()) for t in tensors[:n]]
    opt = torch.optim.AdamW(params, lr=1e-2, weight_decay=0.01)
    for step in range(steps):
        for p, g in zip(params, tensors[n:]):
            p.grad = g.detach() * (1.0 + step)
        opt.step()
    return [p.detach() for p in params] + [opt.state[p]["exp_avg_sq"] for p in params]


def _launches_of_a_step(count: int) -> int:
    from ..device import clock

    params = [torch.nn.Parameter(_npu(8, 4, seed=i)) for i in range(count)]
    opt = torch.optim.AdamW(params, lr=1e-2, weight_decay=0.01)
    for p in params:
        p.grad = torch.ones_like(p)  # the first step makes the state; the second is the one counted
    opt.step()
    before = clock.clock(0).launches
    opt.step()
    return clock.clock(0).launches - before


def _one_launch_per_call() -> str:
    few, many = _launches_of_a_step(2), _launches_of_a_step(8)
    if many > few:
        return (f"a step launched {few} kernels for 2 parameters and {many} for 8: a _foreach_ call still runs a "
                "kernel per tensor")
    return ""


def adamw_cases() -> list[OpCase | Property]:
    c = OpCase
    k = len(SHAPES)
    return [
        c("_foreach_lerp_(exp_avgs, grads, 0.1)", "_foreach_lerp_", lambda: _tensors(0) + _tensors(10),
          lambda *t: (torch._foreach_lerp_(list(t[:k]), list(t[k:]), 0.1), list(t[:k]))[1], **TOL,
          hint="lerp(a, b, w) = a + w * (b - a), for each pair of the two lists"),
        c("_foreach_addcmul_(exp_avg_sqs, grads, grads, value=0.001)", "_foreach_addcmul_",
          lambda: _tensors(0) + _tensors(10),
          lambda *t: (torch._foreach_addcmul_(list(t[:k]), list(t[k:]), list(t[k:]), value=0.001), list(t[:k]))[1],
          **TOL, hint="a += value * b * c"),
        c("_foreach_sqrt(exp_avg_sqs)", "_foreach_sqrt", lambda: _tensors(0, positive=True),
          lambda *t: torch._foreach_sqrt(list(t)), **TOL, hint="a new list of results, one tensor per input"),
        c("_foreach_div_(denominators, [bias corrections])", "_foreach_div_", lambda: _tensors(0),
          lambda *t: (torch._foreach_div_(list(t), [1.5, 0.5, 2.0, 3.0]), list(t))[1], **TOL,
          hint="a ScalarList: one number per tensor"),
        c("_foreach_add_(denominators, eps)", "_foreach_add_", lambda: _tensors(0),
          lambda *t: (torch._foreach_add_(list(t), 1e-8), list(t))[1], **TOL,
          hint="_foreach_add_.Scalar adds one number to every tensor of the list, in place"),
        c("_foreach_addcdiv_(params, exp_avgs, denominators, [step sizes])", "_foreach_addcdiv_",
          lambda: _tensors(0) + _tensors(10) + _tensors(20, positive=True),
          lambda *t: (torch._foreach_addcdiv_(list(t[:k]), list(t[k:2 * k]), list(t[2 * k:]),
                                              [-0.1, -0.2, -0.3, -0.4]), list(t[:k]))[1], **TOL,
          hint="a += value_i * b / c, with value_i the i-th number of the list"),
        c("lists of different lengths raise RuntimeError", "_foreach_lerp_", lambda: _tensors(0) + _tensors(10),
          lambda *t: torch._foreach_lerp_(list(t[:2]), list(t[k:k + 3]), 0.1), hidden=True,
          hint="check the lists' lengths (and a ScalarList's) and raise RuntimeError, as PyTorch's CUDA kernels do"),
        c("a ScalarList of the wrong length raises RuntimeError", "_foreach_div_", lambda: _tensors(0),
          lambda *t: torch._foreach_div_(list(t), [1.0, 2.0]), hidden=True,
          hint="one scalar per tensor: a list of another length raises RuntimeError"),
        c("three AdamW steps (weight decay 0.01) match the CPU's", "_foreach_addcdiv_",
          lambda: _tensors(0) + _tensors(10), _adamw, **TOL,
          hint="torch.optim.AdamW on npu parameters runs its foreach implementation: the operators above, in turn"),
        Property("one launch per _foreach_ call, however many tensors", "_foreach_addcdiv_", _one_launch_per_call,
                 "the same number of launches for a step with 2 parameters as with 8",
                 hint="a _foreach_ kernel walks the whole list in one launch: call bringup.launch once per call, "
                      "with every tensor it read and wrote"),
    ]


@exercise("b3.adamw", "AdamW's foreach kernels: one launch for a list of tensors", names=[], timeout=TIMEOUT)
def _adamw_check(t: Tester) -> None:
    grade_cases(t, adamw_cases(), ADAMW_OPS)


def _block(device_name: str):
    from .. import models

    model = models.TransformerBlock(vocab=50, dim=32, heads=2, hidden=64).to(device_name)
    g = gen(11)
    tokens = torch.randint(0, 50, (2, 8), generator=g).to(device_name)
    targets = torch.randint(0, 50, (2, 8), generator=g).to(device_name)
    return model, tokens, targets, lambda out, y: F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))


#: eps=1e-5, not AdamW's 1e-8: the key projection's bias has a gradient that is 0 in exact arithmetic (a softmax does
#: not change when every score of its row moves by the same amount), so what is computed is rounding noise, of
#: about 1e-9; Adam divides by sqrt(v) + eps, and with eps=1e-8 it turns that noise into steps of the full learning
#: rate, a different one on every machine. With 1e-5 the comparison is of the arithmetic, not of the noise.
TRAINING = Training(
    "TransformerBlock (AdamW)", _block,
    lambda params: torch.optim.AdamW(params, lr=1e-2, weight_decay=0.01, eps=1e-5), 3,
    "AdamW updates each weight from its exp_avg and exp_avg_sq: check the _foreach_ kernels (b3.adamw) first")


@exercise("b3.train", "Train a transformer block on the bare device: the CPU's losses and weights", names=[],
          timeout=TIMEOUT)
def _train_check(t: Tester) -> None:
    train_check(t, TRAINING, ATTENTION_OPS + LAYER_OPS + ADAMW_OPS)
