"""Plausible wrong answers to milestone B1, as a learner would write them.

Each entry is code run in the namespace of the solved notebook (its helpers and kernels are there); it
registers its broken kernel in a library of its own, ``bringup.library("wrong")``, over the solution's
(``allow_override``), and the test takes that library away again after grading.
"""

WRONG: dict[str, list[str]] = {
    "b1.elementwise": [
        # alpha ignored
        """
def bad(self, other, *, alpha=1, out):
    a, b, res = operand(self, out), operand(other, out), dense_like(out)
    if out.numel():
        add_kernel(flat(a), flat(b), 1.0, flat(res))
        bringup.launch("add", (a, b), (res,))
    return write_into(out, res)
bringup.library("wrong").impl("add.out", bad, "PrivateUse1")
""",
        # reads the operands' storage in order, as if they were contiguous (no strides, no broadcast)
        """
def bad(self, other, *, alpha=1, out):
    if out.numel():
        a = self.to(out.dtype) if isinstance(self, torch.Tensor) else torch.full(out.shape, self, device=out.device)
        b = other.to(out.dtype) if isinstance(other, torch.Tensor) else torch.full(out.shape, other, device=out.device)
        fa = npu_lab.device_array(a.as_strided((a.numel(),), (1,)))
        fb = npu_lab.device_array(b.as_strided((b.numel(),), (1,)))
        res = dense_like(out)
        fr = flat(res)
        for i in range(fr.shape[0]):
            fr[i] = fa[i % fa.shape[0]] + alpha * fb[i % fb.shape[0]]
        bringup.launch("add", (a, b), (res,))
        write_into(out, res)
    return out
bringup.library("wrong").impl("add.out", bad, "PrivateUse1")
""",
        # relu's gradient passes at x == 0 too (>= instead of >)
        """
def bad(grad_output, self, threshold, *, grad_input):
    g, x, res = operand(grad_output, grad_input), operand(self, grad_input), dense_like(grad_input)
    fg, fx, fr = flat(g), flat(x), flat(res)
    for i in range(fr.shape[0]):
        fr[i] = fg[i] if fx[i] >= threshold else 0.0
    bringup.launch("threshold_backward", (g, x), (res,))
    return write_into(grad_input, res)
bringup.library("wrong").impl("threshold_backward.grad_input", bad, "PrivateUse1")
""",
        # sum over an empty dimension leaves the output uninitialised
        """
def bad(self, dim, keepdim=False, *, dtype=None, out):
    dims = sorted({d % max(self.dim(), 1) for d in dim}) if dim else list(range(self.dim()))
    x = rows_last(self.to(out.dtype), dims)
    res = torch.empty(x.shape[0], dtype=out.dtype, device=out.device)
    npu_lab.device_array(res)[:] = 7
    if x.shape[1] and res.numel():
        row_sum_kernel(npu_lab.device_array(x), npu_lab.device_array(res))
        bringup.launch("sum", (x,), (res,))
    return write_into(out, res.reshape(out.shape))
bringup.library("wrong").impl("sum.IntList_out", bad, "PrivateUse1")
""",
        # sum ignores keepdim's shape and the dims: sums everything
        """
def bad(self, dim, keepdim=False, *, dtype=None, out):
    x = self.to(out.dtype).contiguous().reshape(1, -1)
    res = torch.empty(1, dtype=out.dtype, device=out.device)
    row_sum_kernel(npu_lab.device_array(x), npu_lab.device_array(res))
    bringup.launch("sum", (x,), (res,))
    out.copy_(res.reshape(()).expand(out.shape))
    return out
bringup.library("wrong").impl("sum.IntList_out", bad, "PrivateUse1")
""",
    ],
    "b1.matmul": [
        # no dtype check: float32 @ int64 runs instead of raising
        """
def bad(self, mat2, *, out):
    return matmul_into(out, self, mat2.to(self.dtype))
bringup.library("wrong").impl("mm.out", bad, "PrivateUse1")
""",
        # beta ignored
        """
def bad(self, mat1, mat2, *, beta=1, alpha=1, out):
    return matmul_into(out, mat1, mat2, alpha, 1.0, self.expand(out.shape))
bringup.library("wrong").impl("addmm.out", bad, "PrivateUse1")
""",
        # beta == 0 still reads self: 0 * NaN is NaN
        """
def bad(self, mat1, mat2, *, beta=1, alpha=1, out):
    res = dense_like(out)
    matmul_into(res, mat1, mat2, alpha, 0.0, None)
    fr, fb = npu_lab.device_array(res), npu_lab.device_array(self.expand(out.shape).contiguous())
    fr += beta * fb
    return write_into(out, res)
bringup.library("wrong").impl("addmm.out", bad, "PrivateUse1")
""",
        # reads the second operand as if it were contiguous (a transposed weight goes wrong)
        """
def bad(self, mat2, *, out):
    same_dtype(self, mat2)
    b = mat2.as_strided(mat2.shape, (mat2.shape[1], 1))
    return matmul_into(out, self, b)
bringup.library("wrong").impl("mm.out", bad, "PrivateUse1")
""",
        # alpha applied to the bias instead of the product
        """
def bad(self, mat1, mat2, *, beta=1, alpha=1, out):
    same_dtype(mat1, mat2)
    return matmul_into(out, mat1, mat2, 1.0, beta * alpha, self.expand(out.shape))
bringup.library("wrong").impl("addmm.out", bad, "PrivateUse1")
""",
    ],
    "b1.loss": [
        # no max subtracted: exp(1000) overflows
        """
@numba.njit(cache=False)
def naive(x, out):
    for i in range(x.shape[0]):
        s = 0.0
        for j in range(x.shape[1]):
            s += np.exp(x[i, j])
        for j in range(x.shape[1]):
            out[i, j] = x[i, j] - np.log(s)

def bad(self, dim, half_to_float, *, out):
    moved, rows = along_last(self, dim)
    res = torch.empty(rows.shape, dtype=out.dtype, device=out.device)
    naive(npu_lab.device_array(rows), npu_lab.device_array(res))
    bringup.launch("log_softmax", (rows,), (res,))
    return write_into(out, res.reshape(moved.shape).movedim(-1, dim))
bringup.library("wrong").impl("_log_softmax.out", bad, "PrivateUse1")
""",
        # always over the last dimension
        """
def bad(self, dim, half_to_float, *, out):
    return log_softmax_out(self, -1, half_to_float, out=out)
bringup.library("wrong").impl("_log_softmax.out", bad, "PrivateUse1")
""",
        # the mean divides by every row, ignored targets included
        """
def bad(self, target, weight, reduction, ignore_index, *, output, total_weight):
    nll_loss_forward_out(self, target, weight, reduction, ignore_index, output=output, total_weight=total_weight)
    if reduction == MEAN:
        n = float(self.shape[0])
        output.fill_(output.item() * total_weight.item() / n)
        total_weight.fill_(n)
    return output, total_weight
bringup.library("wrong").impl("nll_loss_forward.output", bad, "PrivateUse1")
""",
        # a target out of range is clamped instead of raising
        """
def bad(self, target, weight, reduction, ignore_index, *, output, total_weight):
    t = target.cpu().clamp(-100, self.shape[1] - 1).where(target.cpu() != ignore_index, target.cpu()).to(self.device)
    return nll_loss_forward_out(self, t, weight, reduction, ignore_index, output=output, total_weight=total_weight)
bringup.library("wrong").impl("nll_loss_forward.output", bad, "PrivateUse1")
""",
        # log_softmax's backward forgets exp: grad - out * sum(grad)
        """
@numba.njit(cache=False)
def no_exp(grad, out, result):
    for i in range(grad.shape[0]):
        s = 0.0
        for j in range(grad.shape[1]):
            s += grad[i, j]
        for j in range(grad.shape[1]):
            result[i, j] = grad[i, j] - out[i, j] * s

def bad(grad_output, output, dim, input_dtype, *, out):
    moved, g = along_last(grad_output, dim)
    _, o = along_last(output, dim)
    res = torch.empty(g.shape, dtype=out.dtype, device=out.device)
    no_exp(npu_lab.device_array(g), npu_lab.device_array(o), npu_lab.device_array(res))
    bringup.launch("log_softmax_backward", (g, o), (res,))
    return write_into(out, res.reshape(moved.shape).movedim(-1, dim))
bringup.library("wrong").impl("_log_softmax_backward_data.out", bad, "PrivateUse1")
""",
    ],
    "b1.train": [
        # relu computes but never tells the device (no launch)
        """
def bad(self):
    out = torch.empty(self.shape, dtype=self.dtype, device=self.device)
    if out.numel():
        x = self.contiguous()
        threshold_kernel(flat(x), flat(x), 0, flat(out))
    return out
bringup.library("wrong").impl("relu", bad, "PrivateUse1")
""",
        # the parameter update ignores alpha (SGD passes alpha=-lr)
        """
def bad(tensors, others, *, alpha=1):
    for t, o in zip(tensors, others):
        t.add_(o)
bringup.library("wrong").impl("_foreach_add_.List", bad, "PrivateUse1")
""",
        # momentum never decays: _foreach_mul_ does nothing
        """
def bad(tensors, scalar):
    pass
bringup.library("wrong").impl("_foreach_mul_.Scalar", bad, "PrivateUse1")
""",
        # the update goes to a copy of each parameter, not the parameter
        """
def bad(tensors, others, *, alpha=1):
    for t, o in zip(tensors, others):
        t.clone().add_(o, alpha=alpha)
bringup.library("wrong").impl("_foreach_add_.List", bad, "PrivateUse1")
""",
        # mm without its launch: the matmuls of the step are invisible to the clock
        """
def bad(self, mat2, *, out):
    same_dtype(self, mat2)
    res = dense_like(out)
    if res.numel():
        mm_kernel(npu_lab.device_array(self), npu_lab.device_array(mat2), npu_lab.device_array(res), 1.0, 0.0,
                  npu_lab.device_array(res))
    return write_into(out, res)
bringup.library("wrong").impl("mm.out", bad, "PrivateUse1")
""",
    ],
}
