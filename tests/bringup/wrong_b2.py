"""Plausible wrong answers to milestone B2 (see wrong_b1.py for how they are run)."""

_CONV_NO_DILATION = '''
@numba.njit(parallel=True, cache=False)
def conv_nodil(x, w, out, sh, sw, ph, pw, dh, dw, groups):
    conv2d_kernel(x, w, out, sh, sw, ph, pw, 1, 1, groups)

def bad(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    sh, sw, ph, pw, dh, dw, g = conv_args(input, weight, stride, padding, dilation, transposed, groups)
    n, _, h, w = input.shape
    co, _, kh, kw = weight.shape
    oh, ow = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1, (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    out = torch.empty((n, co, oh, ow), dtype=input.dtype, device=input.device)
    x, wt = input.contiguous(), weight.contiguous()
    conv_nodil(arr(x), arr(wt), arr(out), sh, sw, ph, pw, dh, dw, g)
    bringup.launch("conv2d", (x, wt), (out,))
    if bias is not None:
        out.add_(bias.reshape(1, co, 1, 1))
    return out
bringup.library("wrong").impl("convolution_overrideable", bad, "PrivateUse1")
'''

WRONG: dict[str, list[str]] = {
    "b2.conv": [
        # the bias is never added
        """
def bad(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    return convolution(input, weight, None, stride, padding, dilation, transposed, output_padding, groups)
bringup.library("wrong").impl("convolution_overrideable", bad, "PrivateUse1")
""",
        # dilation ignored in the taps (the output size is right)
        _CONV_NO_DILATION,
        # groups ignored: every output channel reads the first input channels
        """
def bad(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    return convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, 1) \\
        if groups == 1 else convolution(input[:, :weight.shape[1]].contiguous(), weight, bias, stride, padding,
                                        dilation, transposed, output_padding, 1)
bringup.library("wrong").impl("convolution_overrideable", bad, "PrivateUse1")
""",
        # the weight's gradient from the first image of the batch only
        """
def bad(grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed, output_padding, groups,
        output_mask):
    gi, gw, gb = convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed,
                                      output_padding, groups, output_mask)
    if gw is not None and input.shape[0] > 1:
        _, gw, _ = convolution_backward(grad_output[:1], input[:1], weight, bias_sizes, stride, padding, dilation,
                                        transposed, output_padding, groups, [False, True, False])
    return gi, gw, gb
bringup.library("wrong").impl("convolution_backward", bad, "PrivateUse1")
""",
        # the input's gradient forgets the stride (every window taken one pixel after the last)
        """
def bad(grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed, output_padding, groups,
        output_mask):
    gi, gw, gb = convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed,
                                      output_padding, groups, output_mask)
    if gi is not None:
        sh, sw, ph, pw, dh, dw, g = conv_args(input, weight, stride, padding, dilation, transposed, groups)
        conv2d_grad_input_kernel(arr(grad_output.contiguous()), arr(weight.contiguous()), arr(gi), 1, 1, ph, pw, dh,
                                 dw, g)
    return gi, gw, gb
bringup.library("wrong").impl("convolution_backward", bad, "PrivateUse1")
""",
    ],
    "b2.norm_pool": [
        # the running variance takes the biased variance
        """
def bad(input, weight, bias, running_mean, running_var, training, momentum, eps):
    out, mean, invstd = native_batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps)
    if training and running_var is not None:
        m = input.numel() // input.shape[1]
        # undo the unbiased part the solution added, put the biased one
        x = as_ncl(input)
        c = x.shape[1]
        m2, i2, unb = (torch.empty(c, dtype=x.dtype, device=x.device) for _ in range(3))
        channel_stats_kernel(arr(x), eps, arr(m2), arr(i2), arr(unb))
        running_var.add_(unb, alpha=-momentum).add_(unb, alpha=momentum * (m - 1) / m)
    return out, mean, invstd
bringup.library("wrong").impl("native_batch_norm", bad, "PrivateUse1")
""",
        # evaluation normalizes with the batch's statistics
        """
def bad(input, weight, bias, running_mean, running_var, training, momentum, eps):
    out, mean, invstd = native_batch_norm(input, weight, bias, None, None, True, momentum, eps)
    if not training:
        return out, torch.empty(0, device=input.device), torch.empty(0, device=input.device)
    return native_batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps)
bringup.library("wrong").impl("native_batch_norm", bad, "PrivateUse1")
""",
        # no eps: a constant channel divides by zero
        """
def bad(input, weight, bias, running_mean, running_var, training, momentum, eps):
    return native_batch_norm(input, weight, bias, running_mean, running_var, training, momentum, 0.0)
bringup.library("wrong").impl("native_batch_norm", bad, "PrivateUse1")
""",
        # max pool's backward writes each gradient instead of adding it (overlapping windows lose some)
        """
@numba.njit(cache=False)
def overwrite(go, idx, gi):
    for p in range(gi.shape[0]):
        for i in range(gi.shape[1]):
            gi[p, i] = 0.0
        for j in range(go.shape[1]):
            gi[p, idx[p, j]] = go[p, j]

def bad(grad_output, self, kernel_size, stride, padding, dilation, ceil_mode, indices, *, grad_input):
    go = grad_output.contiguous().reshape(-1, grad_output.shape[-2] * grad_output.shape[-1])
    idx = indices.contiguous().reshape(go.shape)
    res = torch.empty(go.shape[0], self.shape[-2] * self.shape[-1], dtype=grad_input.dtype, device=grad_input.device)
    overwrite(arr(go), arr(idx), arr(res))
    bringup.launch("max_pool2d_backward", (go, idx), (res,))
    grad_input.copy_(res.reshape(grad_input.shape))
    return grad_input
bringup.library("wrong").impl("max_pool2d_with_indices_backward.grad_input", bad, "PrivateUse1")
""",
        # max pool without NaN: a NaN never wins
        """
@numba.njit(cache=False)
def no_nan(x, out, idx, kh_, kw_, sh, sw, ph, pw, dh, dw):
    p_, h_, w_ = x.shape
    for p in range(p_):
        for oh in range(out.shape[1]):
            for ow in range(out.shape[2]):
                best = -np.inf
                where = -1
                for kh in range(kh_):
                    ih = oh * sh - ph + kh * dh
                    for kw in range(kw_):
                        iw = ow * sw - pw + kw * dw
                        if 0 <= ih < h_ and 0 <= iw < w_ and (where < 0 or x[p, ih, iw] > best):
                            best = x[p, ih, iw]
                            where = ih * w_ + iw
                out[p, oh, ow] = best
                idx[p, oh, ow] = where

def bad(self, kernel_size, stride=(), padding=(0,), dilation=(1,), ceil_mode=False, *, out, indices):
    x = planes(self)
    res = torch.empty(x.shape[0], out.shape[-2], out.shape[-1], dtype=out.dtype, device=out.device)
    where = torch.empty(res.shape, dtype=torch.int64, device=out.device)
    no_nan(arr(x), arr(res), arr(where), *pool_args(kernel_size, stride, padding, dilation))
    bringup.launch("max_pool2d", (x,), (res, where))
    out.copy_(res.reshape(out.shape))
    indices.copy_(where.reshape(indices.shape))
    return out, indices
bringup.library("wrong").impl("max_pool2d_with_indices.out", bad, "PrivateUse1")
""",
        # the indices counted within the window instead of the plane
        """
def bad(self, kernel_size, stride=(), padding=(0,), dilation=(1,), ceil_mode=False, *, out, indices):
    max_pool2d_out(self, kernel_size, stride, padding, dilation, ceil_mode, out=out, indices=indices)
    w = self.shape[-1]
    indices.copy_((indices.cpu() % 2 + (indices.cpu() // w) % 2 * 2).to(indices.device))
    return out, indices
bringup.library("wrong").impl("max_pool2d_with_indices.out", bad, "PrivateUse1")
""",
    ],
    "b2.train": [
        # the running statistics never move
        """
def bad(input, weight, bias, running_mean, running_var, training, momentum, eps):
    return native_batch_norm(input, weight, bias, None, None, training, momentum, eps) if training else \\
        native_batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps)
bringup.library("wrong").impl("native_batch_norm", bad, "PrivateUse1")
""",
        # momentum the wrong way round
        """
def bad(input, weight, bias, running_mean, running_var, training, momentum, eps):
    return native_batch_norm(input, weight, bias, running_mean, running_var, training, 1 - momentum, eps)
bringup.library("wrong").impl("native_batch_norm", bad, "PrivateUse1")
""",
        # the weight's gradient is left out (only the input's and the bias's are returned): the weights do not
        # train (a zero bias gradient would pass here: a convolution followed by batch norm has none, its mean
        # is subtracted)
        """
def bad(grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed, output_padding, groups,
        output_mask):
    gi, gw, gb = convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed,
                                      output_padding, groups, output_mask)
    return gi, None, gb
bringup.library("wrong").impl("convolution_backward", bad, "PrivateUse1")
""",
        # the convolution computes but never tells the device
        """
def bad(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    sh, sw, ph, pw, dh, dw, g = conv_args(input, weight, stride, padding, dilation, transposed, groups)
    n, _, h, w = input.shape
    co, _, kh, kw = weight.shape
    oh, ow = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1, (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    out = torch.empty((n, co, oh, ow), dtype=input.dtype, device=input.device)
    x, wt = input.contiguous(), weight.contiguous()
    conv2d_kernel(arr(x), arr(wt), arr(out), sh, sw, ph, pw, dh, dw, g)
    if bias is not None:
        out.add_(bias.reshape(1, co, 1, 1))
    return out
bringup.library("wrong").impl("convolution_overrideable", bad, "PrivateUse1")
""",
    ],
}
