"""Plausible wrong answers to milestone B4 (see wrong_b1.py for how they are run).

Each runs in the solved notebook's namespace (``B1``, ``B2``, ``operand``, ``result_into``, ``binary``... are the
solution's) and registers its kernels in the library "wrong", which replaces the solution's until it is destroyed.
"""

WRONG: dict[str, list[str]] = {
    "b4.opinfo": [
        # the 0-d fix only: an empty input still reaches B1's reshape(outer, -1)
        """
def bad(self, dim, keepdim=False, *, dtype=None, out):
    if self.dim() == 0:
        return sum_out(self, dim, keepdim, dtype=dtype, out=out)
    return B1.sum_out(self, dim, keepdim, dtype=dtype, out=out)
bringup.library("wrong").impl("sum.IntList_out", bad, "PrivateUse1")
""",
        # the stride expanded, padding and dilation passed on as they came ([1] for padding=1)
        """
def bad(grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed, output_padding, groups,
        output_mask):
    return B2.convolution_backward(grad_output, input, weight, bias_sizes, pair(stride), padding, dilation,
                                   transposed, output_padding, groups, output_mask)
def bad_forward(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    return B2.convolution(input, weight, bias, pair(stride), padding, dilation, transposed, output_padding, groups)
lib = bringup.library("wrong")
lib.impl("convolution_overrideable", bad_forward, "PrivateUse1")
lib.impl("convolution_backward", bad, "PrivateUse1")
""",
        # index_add writes the source rows instead of adding them: a repeated index keeps only one of its rows
        """
def bad(self, dim, index, source, *, alpha=1, out):
    res = self.to(out.dtype).contiguous().clone()
    r, s = arr(res), arr(source.to(out.dtype).contiguous())
    if self.dim() == 0:
        r[...] = r + alpha * s.sum()
    elif index.numel():
        d = dim % self.dim()
        np.moveaxis(r, d, 0)[arr(index.contiguous())] = alpha * np.moveaxis(s, d, 0)
    bringup.launch("index_add", (res, index, source), (res,))
    return into(out, res)
bringup.library("wrong").impl("index_add.out", bad, "PrivateUse1")
""",
        # log_softmax of a 0-d tensor returns the input (it is 0: the only element's share of itself is 1)
        """
def bad(self, dim, half_to_float, *, out):
    if self.dim() == 0:
        return out.copy_(self)
    return log_softmax_out(self, dim, half_to_float, out=out)
bringup.library("wrong").impl("_log_softmax.out", bad, "PrivateUse1")
""",
        # index_add ignores alpha
        """
def bad(self, dim, index, source, *, alpha=1, out):
    return index_add_out(self, dim, index, source, alpha=1, out=out)
bringup.library("wrong").impl("index_add.out", bad, "PrivateUse1")
""",
    ],
    "b4.harness": [
        # eq says "equal" to everything: every assertEqual that trusts it passes
        """
def bad(self, other, *, out):
    shape = torch.broadcast_shapes(getattr(self, "shape", ()), getattr(other, "shape", ()))
    return result_into(out, np.ones(tuple(shape), dtype=bool))
bringup.library("wrong").impl("eq.Tensor_out", bad, "PrivateUse1")
""",
        # maximum and minimum with np.fmax / np.fmin: a NaN does not propagate
        """
lib = bringup.library("wrong")
lib.impl("maximum.out", binary("maximum", np.fmax), "PrivateUse1")
lib.impl("minimum.out", binary("minimum", np.fmin), "PrivateUse1")
""",
        # normal_ from NumPy's generator: torch.manual_seed does not make it reproducible
        """
def bad(self, mean=0.0, std=1.0, *, generator=None):
    result_into(self, np.random.default_rng().normal(mean, std, tuple(self.shape)))
    bringup.launch("normal", (), (self,))
    return self
bringup.library("wrong").impl("normal_", bad, "PrivateUse1")
""",
        # masked_select in column-major order
        """
def bad(self, mask):
    shape = torch.broadcast_shapes(self.shape, mask.shape)
    x, m = operand(self, shape, self.dtype, self.device), operand(mask, shape, torch.bool, self.device)
    picked = arr(x).T[arr(m).T]
    out = torch.empty(picked.shape, dtype=self.dtype, device=self.device)
    if out.numel():
        arr(out)[...] = picked
    return out
bringup.library("wrong").impl("masked_select", bad, "PrivateUse1")
""",
        # sub ignores alpha
        """
bringup.library("wrong").impl("sub.out", binary("sub", np.subtract), "PrivateUse1")
""",
        # comparisons in the first operand's dtype: 2 <= 2.5 becomes 2 <= 2
        """
def compare_in_first(name, ufunc):
    def kernel(self, other, *, out):
        shape = torch.broadcast_shapes(getattr(self, "shape", ()), getattr(other, "shape", ()))
        dtype = self.dtype
        a, b = (operand(x, shape, dtype, out.device) for x in (self, other))
        return result_into(out, ufunc(arr(a), arr(b)) if a.numel() else np.empty(tuple(shape)))
    return kernel
lib = bringup.library("wrong")
for op, ufunc in [("le", np.less_equal), ("gt", np.greater)]:
    lib.impl(f"{op}.Tensor_out", compare_in_first(op, ufunc), "PrivateUse1")
""",
    ],
    "b4.openreg": [
        # milestone 1's numba fill_ again: numba has no float16, so zeros and ones in float16 fail
        """
bringup.library("wrong").impl("fill_.Scalar", B1.fill_, "PrivateUse1")
""",
        # milestone 1's numba add.out again: add in float16 fails
        """
bringup.library("wrong").impl("add.out", B1.add_out, "PrivateUse1")
""",
        # masked_select that returns nothing
        """
def bad(self, mask):
    return torch.empty(0, dtype=self.dtype, device=self.device)
bringup.library("wrong").impl("masked_select", bad, "PrivateUse1")
""",
        # a kernel that ends the process: the check still says what happened
        """
def bad(self, *, out):
    import os
    os._exit(3)
bringup.library("wrong").impl("abs.out", bad, "PrivateUse1")
""",
    ],
}
