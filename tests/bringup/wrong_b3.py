"""Plausible wrong answers to milestone B3 (see wrong_b1.py for how they are run).

Each runs in the solved notebook's namespace and registers its kernel in the library "wrong", which replaces the
solution's kernel for that operator until the library is destroyed.
"""

#: dropout with numpy's generator in place of the device's (``generator`` is the numpy object drawn from)
_NUMPY_DROPOUT = """
def bad(input, p, train):
    if not train or p == 0 or p == 1:
        return native_dropout(input, p, train)
    x = arr(input.contiguous())
    keep = {generator}.random(x.shape) >= p
    out = torch.empty(input.shape, dtype=input.dtype, device=input.device)
    mask = torch.empty(input.shape, dtype=torch.bool, device=input.device)
    arr(mask)[...] = keep
    arr(out)[...] = np.where(keep, x * np.float32(1 / (1 - p)), np.float32(0))
    bringup.launch("dropout", (input,), (out, mask), flops=2 * input.numel())
    return out, mask
bringup.library("wrong").impl("native_dropout", bad, "PrivateUse1")
"""

WRONG: dict[str, list[str]] = {
    "b3.attention": [
        # bmm reads its second operand as if it were contiguous (a transposed k^T is read wrong)
        """
def bad(self, mat2, *, out):
    return bmm_out(self, mat2.as_strided(mat2.shape, torch.empty(mat2.shape).stride()), out=out)
bringup.library("wrong").impl("bmm.out", bad, "PrivateUse1")
""",
        # softmax without subtracting the row's maximum: exp overflows for large scores
        """
def bad(self, dim, half_to_float, *, out):
    with np.errstate(all="ignore"):
        e = np.exp(arr(self.contiguous()))
        arr(out)[...] = e / e.sum(axis=dim, keepdims=True)
    bringup.launch("softmax", (self,), (out,), flops=3 * self.numel())
    return out
bringup.library("wrong").impl("_softmax.out", bad, "PrivateUse1")
""",
        # _safe_softmax as the plain softmax: a row of -inf gives NaN
        """
def bad(self, dim, dtype=None):
    return torch.ops.aten._softmax(self if dtype is None else self.to(dtype), dim, False)
bringup.library("wrong").impl("_safe_softmax", bad, "PrivateUse1")
""",
        # the softmax backward forgets to subtract sum(grad * y)
        """
def bad(grad_output, output, dim, input_dtype, *, grad_input):
    arr(grad_input)[...] = arr(output.contiguous()) * arr(grad_output.contiguous())
    bringup.launch("softmax_backward", (grad_output, output), (grad_input,), flops=output.numel())
    return grad_input
bringup.library("wrong").impl("_softmax_backward_data.out", bad, "PrivateUse1")
""",
        # tril keeps the upper triangle
        """
def bad(self, diagonal=0, *, out):
    arr(out)[...] = np.triu(arr(self.contiguous()), diagonal)
    bringup.launch("tril", (self,), (out,))
    return out
bringup.library("wrong").impl("tril.out", bad, "PrivateUse1")
""",
        # where gives self's dtype instead of promoting
        """
def bad(condition, self, other):
    return where(condition, self, other.to(self.dtype))
bringup.library("wrong").impl("where.self", bad, "PrivateUse1")
""",
    ],
    "b3.layers": [
        # layer norm with the unbiased variance
        """
def bad(input, normalized_shape, weight, bias, eps):
    x = arr(input.contiguous()).astype(np.float64)
    axes = tuple(range(x.ndim - len(normalized_shape), x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    rstd = 1 / np.sqrt(x.var(axis=axes, keepdims=True, ddof=1) + eps)
    y = (x - mean) * rstd
    if weight is not None:
        y = y * arr(weight.contiguous())
    if bias is not None:
        y = y + arr(bias.contiguous())
    out, m, r = (torch.empty(a.shape, dtype=input.dtype, device=input.device) for a in (y, mean, rstd))
    arr(out)[...], arr(m)[...], arr(r)[...] = y, mean, rstd
    bringup.launch("layer_norm", (input,), (out, m, r), flops=8 * input.numel())
    return out, m, r
bringup.library("wrong").impl("native_layer_norm", bad, "PrivateUse1")
""",
        # the input's gradient forgets the term xhat * mean(g * xhat)
        """
def bad(grad_out, input, normalized_shape, mean, rstd, weight, bias, output_mask):
    gi, gw, gb = native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight, bias,
                                            output_mask)
    if gi is not None:
        x, g = arr(input.contiguous()), arr(grad_out.contiguous())
        axes = tuple(range(x.ndim - len(normalized_shape), x.ndim))
        gg = g * (arr(weight.contiguous()) if weight is not None else 1.0)
        gi = torch.empty(input.shape, dtype=input.dtype, device=input.device)
        arr(gi)[...] = arr(rstd.contiguous()) * (gg - gg.mean(axis=axes, keepdims=True))
        bringup.launch("layer_norm_backward_input", (grad_out, input), (gi,), flops=6 * input.numel())
    return gi, gw, gb
bringup.library("wrong").impl("native_layer_norm_backward", bad, "PrivateUse1")
""",
        # gelu ignores approximate="tanh"
        """
def bad(self, *, approximate="none", out):
    return gelu_out(self, approximate="none", out=out)
bringup.library("wrong").impl("gelu.out", bad, "PrivateUse1")
""",
        # the embedding's gradient overwrites a row instead of adding: a repeated id keeps one gradient
        """
def bad(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq):
    g = arr(grad_output.contiguous()).reshape(-1, grad_output.shape[-1])
    res = np.zeros((num_weights, g.shape[1]), dtype=g.dtype)
    res[arr(indices.contiguous()).reshape(-1)] = g
    if padding_idx >= 0:
        res[padding_idx] = 0
    out = torch.empty(res.shape, dtype=grad_output.dtype, device=grad_output.device)
    arr(out)[...] = res
    bringup.launch("embedding_backward", (grad_output, indices), (out,), flops=g.size)
    return out
bringup.library("wrong").impl("embedding_dense_backward", bad, "PrivateUse1")
""",
        # index_select clamps an index outside the table instead of raising IndexError
        """
def bad(self, dim, index):
    res = np.take(arr(self.contiguous()), arr(index.contiguous()).reshape(-1), axis=dim, mode="clip")
    out = torch.empty(res.shape, dtype=self.dtype, device=self.device)
    arr(out)[...] = res
    bringup.launch("index_select", (self, index), (out,))
    return out
bringup.library("wrong").impl("index_select", bad, "PrivateUse1")
""",
        # padding_idx ignored in the backward
        """
def bad(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq):
    return embedding_dense_backward(grad_output, indices, num_weights, -1, scale_grad_by_freq)
bringup.library("wrong").impl("embedding_dense_backward", bad, "PrivateUse1")
""",
    ],
    "b3.dropout": [
        # numpy's own generator: torch.manual_seed does not seed it
        _NUMPY_DROPOUT.format(generator="np.random"),
        # a generator seeded afresh in every call: every call draws the same mask
        _NUMPY_DROPOUT.format(generator="np.random.default_rng(0)"),
        # the kept elements are not scaled by 1 / (1 - p)
        """
def bad(input, p, train):
    out, mask = native_dropout(input, p, train)
    arr(out)[...] = np.where(arr(mask), arr(input.contiguous()), np.float32(0))
    return out, mask
bringup.library("wrong").impl("native_dropout", bad, "PrivateUse1")
""",
        # p taken as the probability to keep
        """
def bad(input, p, train):
    return native_dropout(input, 1 - p, train)
bringup.library("wrong").impl("native_dropout", bad, "PrivateUse1")
""",
        # the backward forgets the scale
        """
def bad(grad_output, mask, scale):
    return native_dropout_backward(grad_output, mask, 1.0)
bringup.library("wrong").impl("native_dropout_backward", bad, "PrivateUse1")
""",
    ],
    "b3.adamw": [
        # a launch per tensor: the list walked one tensor at a time
        """
def bad(self, tensors1, weight):
    for a, b in zip(self, tensors1):
        foreach_lerp_scalar_([a], [b], weight)
bringup.library("wrong").impl("_foreach_lerp_.Scalar", bad, "PrivateUse1")
""",
        # the first number of the ScalarList used for every tensor
        """
def bad(self, scalars):
    foreach_div_scalarlist_(self, [scalars[0]] * len(self))
bringup.library("wrong").impl("_foreach_div_.ScalarList", bad, "PrivateUse1")
""",
        # addcdiv multiplies by the denominator
        """
def bad(self, tensor1, tensor2, scalars):
    for i in range(len(self)):
        foreach_addcmul_scalar_([self[i]], [tensor1[i]], [tensor2[i]], scalars[i])
bringup.library("wrong").impl("_foreach_addcdiv_.ScalarList", bad, "PrivateUse1")
""",
        # lerp's weight taken from the wrong end
        """
def bad(self, tensors1, weight):
    foreach_lerp_scalar_(self, tensors1, 1 - weight)
bringup.library("wrong").impl("_foreach_lerp_.Scalar", bad, "PrivateUse1")
""",
        # _foreach_sqrt returns copies without the square root
        """
def bad(self):
    return [t.clone() for t in self]
bringup.library("wrong").impl("_foreach_sqrt", bad, "PrivateUse1")
""",
    ],
    "b3.train": [
        # the embedding's gradient from the first sequence of the batch only
        """
def bad(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq):
    return embedding_dense_backward(grad_output[:1].contiguous(), indices[:1].contiguous(), num_weights,
                                    padding_idx, scale_grad_by_freq)
bringup.library("wrong").impl("embedding_dense_backward", bad, "PrivateUse1")
""",
        # eps never added to AdamW's denominator
        """
def bad(self, scalar):
    foreach_add_scalar_(self, 0.0)
bringup.library("wrong").impl("_foreach_add_.Scalar", bad, "PrivateUse1")
""",
        # bmm reports a hundred times its arithmetic
        """
def bad(self, mat2, *, out):
    bmm_out(self, mat2, out=out)
    bringup.launch("bmm_extra", (), (), flops=200 * out.numel() * self.shape[-1])
    return out
bringup.library("wrong").impl("bmm.out", bad, "PrivateUse1")
""",
        # tril computed without telling the device (no launch)
        """
def bad(self, diagonal=0, *, out):
    arr(out)[...] = np.tril(arr(self.contiguous()), diagonal)
    return out
bringup.library("wrong").impl("tril.out", bad, "PrivateUse1")
""",
    ],
}
