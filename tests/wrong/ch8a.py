"""Plausible wrong answers to chapter 8a's exercises (the device and eager mode).

They run in a copy of the namespace of solutions/C8a_device_and_eager.ipynb (``torch``, ``F``, ``math``,
``numba``, ``npu_lab``, ``bringup`` are there); each softplus answer is the solution, whole, with one thing
changed.
"""

#: The solution, whole (each wrong answer below is it with one thing changed): the functions a wrong answer
#: redefines must all be defined in the wrong answer's own code, since the notebook's functions look names up in
#: the notebook's namespace, not in the copy a wrong answer runs in.
_SOLUTION = """
@numba.njit
def sp_loop(x, out, beta, threshold):
    for i in range(x.size):
        z = x[i] * beta
        out[i] = x[i] if z > threshold else math.log1p(math.exp(z)) / beta


@numba.njit
def sp_grad_loop(g, x, out, beta, threshold):
    for i in range(x.size):
        z = x[i] * beta
        out[i] = g[i] if z > threshold else g[i] / (1.0 + math.exp(-z))


def sp_flat(t):
    return npu_lab.device_array(t).reshape(-1)


def sp_out(self, beta=1, threshold=20, *, out):
    with torch.npu.device(self.device):
        x = self.contiguous()
        if out.shape != x.shape:
            out.resize_(x.shape)
        dst = out if out.is_contiguous() else torch.empty_like(x)
        sp_loop(sp_flat(x), sp_flat(dst), float(beta), float(threshold))
        bringup.launch("softplus", inputs=[x], outputs=[dst], flops=4.0 * x.numel())
        if dst is not out:
            out.copy_(dst)
    return out


def sp_functional(self, beta=1, threshold=20):
    return sp_out(self, beta, threshold, out=torch.empty_like(self, memory_format=torch.contiguous_format))


def sp_backward(grad_output, self, beta, threshold):
    with torch.npu.device(self.device):
        g, x = grad_output.contiguous(), self.contiguous()
        grad = torch.empty_like(x)
        sp_grad_loop(sp_flat(g), sp_flat(x), sp_flat(grad), float(beta), float(threshold))
        bringup.launch("softplus_backward", inputs=[g, x], outputs=[grad], flops=4.0 * x.numel())
    return grad


def register_softplus():
    lib = torch.library.Library("aten", "IMPL")
    lib.impl("softplus", sp_functional, "PrivateUse1")
    lib.impl("softplus.out", sp_out, "PrivateUse1")
    lib.impl("softplus_backward", sp_backward, "PrivateUse1")
    return lib
"""


def _softplus(*changes: tuple[str, str]) -> str:
    """The solution with each (old, new) replaced (old must be in it)."""
    code = _SOLUTION
    for old, new in changes:
        assert old in code, old
        code = code.replace(old, new)
    return code


_GATE_HEAD = (
    "def _to_npu(t):\n"
    "    return t.detach().to('npu').requires_grad_(t.requires_grad)\n"
)


def _gate(strided: str = "sample.transform(_to_npu).noncontiguous()", memcheck: bool = True, grads: bool = True,
          compare: str = "torch.testing.assert_close(got, want.to('npu'))\n", catch: str = "Exception",
          keep_input: bool = True, call: str = "op(n.input, *n.args, **n.kwargs)",
          reference: str = "op(s.input, *s.args, **s.kwargs)",
          samples: str = "op.sample_inputs('cpu', torch.float32, requires_grad=op.supports_autograd)") -> str:
    """The solution's gate with one thing left out or done otherwise (each keyword says what)."""
    kinds = "[sample.transform(_to_npu)" + (f", {strided}]" if strided else "]")
    run = (f"                with npu_lab.memcheck():\n                    got = {call}\n" if memcheck
           else f"                got = {call}\n")
    if catch != "Exception":  # the kernel's error escapes: only the comparison is guarded
        run, guarded = run.replace("                ", "            "), ""
    else:
        guarded = run
    body = (
        _GATE_HEAD +
        "def conformance(op):\n"
        "    failures = []\n"
        f"    for i, sample in enumerate({samples}):\n"
        f"        for n in {kinds}:\n"
        "            s = sample\n"
        f"            want = {reference}\n"
        "            kept = n.input.detach().clone()\n"
        + (run if not guarded else "") +
        "            try:\n"
        + guarded +
        f"                {compare}"
        + ("                torch.testing.assert_close(n.input.detach(), kept)\n" if keep_input else "")
        + ("                if op.supports_autograd and want.requires_grad:\n"
           "                    w = torch.linspace(-1, 1, want.numel()).reshape(want.shape)\n"
           "                    torch.testing.assert_close(torch.autograd.grad(got, n.input, w.to('npu'))[0],\n"
           "                                               torch.autograd.grad(want, s.input, w)[0].to('npu'))\n"
           if grads else "")
        + f"            except {catch} as e:\n"
        "                failures.append(f'sample {i}: {e}')\n"
        "    return failures")
    return body

WRONG: dict[str, list[str]] = {
    "ch8a.softplus": [
        # computes on the CPU and copies back: what the fallback does, by hand
        _softplus(('lib.impl("softplus", sp_functional, "PrivateUse1")',
                   'lib.impl("softplus", lambda self, beta=1, threshold=20: '
                   'F.softplus(self.cpu(), beta, threshold).to(self.device), "PrivateUse1")')),
        # forgets the out= form (the compilers' one)
        _softplus(('    lib.impl("softplus.out", sp_out, "PrivateUse1")\n', "")),
        # forgets the backward: training falls back to the CPU
        _softplus(('    lib.impl("softplus_backward", sp_backward, "PrivateUse1")\n', "")),
        # >= instead of >: linear already at the threshold
        _softplus(("out[i] = x[i] if z > threshold else math.log1p",
                   "out[i] = x[i] if z >= threshold else math.log1p")),
        # forgets beta inside the exponential
        _softplus(("else math.log1p(math.exp(z)) / beta", "else math.log1p(math.exp(x[i])) / beta")),
        # compares x (not x * beta) with the threshold
        _softplus(("out[i] = x[i] if z > threshold else math.log1p", "out[i] = x[i] if x[i] > threshold else "
                   "math.log1p")),
        # a chain of npu operators: right values, several launches
        _softplus(('lib.impl("softplus", sp_functional, "PrivateUse1")',
                   'lib.impl("softplus", lambda self, beta=1, threshold=20: torch.where(self * beta > threshold, self, '
                   'torch.log1p(torch.exp(self * beta)) / beta), "PrivateUse1")')),
        # never tells the device a kernel ran
        _softplus(('        bringup.launch("softplus", inputs=[x], outputs=[dst], flops=4.0 * x.numel())\n', "")),
        # tells the device only the bytes it wrote
        _softplus(('bringup.launch("softplus", inputs=[x], outputs=[dst]', 'bringup.launch("softplus", outputs=[dst]')),
        # no device guard: the launch goes to the current device, not the tensor's
        _softplus(("def sp_out(self, beta=1, threshold=20, *, out):\n    with torch.npu.device(self.device):",
                   "def sp_out(self, beta=1, threshold=20, *, out):\n    if True:")),
        # writes a strided out through a flattened copy: the caller's buffer never sees the result
        _softplus(("dst = out if out.is_contiguous() else torch.empty_like(x)", "dst = out"),
                  ("sp_loop(sp_flat(x), sp_flat(dst)", "sp_loop(sp_flat(x), npu_lab.device_array(dst).reshape(-1)")),
        # ignores out: computes into a new tensor and returns that
        _softplus(("def sp_out(self, beta=1, threshold=20, *, out):\n",
                   "def sp_out(self, beta=1, threshold=20, *, out):\n    out = torch.empty(0, device=self.device)\n")),
        # no .contiguous(): a transposed input is read in memory order
        _softplus(("        x = self.contiguous()\n        if out.shape", "        x = self\n        if out.shape"),
                  ("sp_loop(sp_flat(x), sp_flat(dst)", "sp_loop(npu_lab.device_array(torch.as_strided(x, (x.numel(),), "
                   "(1,), x.storage_offset())), sp_flat(dst)")),
        # float32 always: a float64 input gives a float32 result
        _softplus(("return sp_out(self, beta, threshold, out=torch.empty_like(self, "
                   "memory_format=torch.contiguous_format))",
                   "return sp_out(self.float(), beta, threshold, out=torch.empty(self.shape, device=self.device))")),
        # a kernel for the CPU as well, "to compare with"
        _softplus(('    return lib\n', '    lib.impl("softplus_backward", lambda g, x, b, t: g * torch.sigmoid(x * b), '
                   '"CPU")\n    return lib\n')),
        # the lab's own backward kernel, registered under one's own library
        _softplus(('    return lib\n', '    from npu_lab.ops.activations import softplus_backward as lab_backward\n'
                   '    lib.impl("softplus_backward", lab_backward, "PrivateUse1")\n    return lib\n')),
        # the backward forgets the linear part above the threshold
        _softplus(("out[i] = g[i] if z > threshold else g[i] / (1.0 + math.exp(-z))",
                   "out[i] = g[i] / (1.0 + math.exp(-z))")),
    ],
    "ch8a.conformance": [
        # contiguous samples only: a kernel that ignores strides passes
        _gate(strided=""),
        # non-contiguous on the CPU, then moved: .to("npu") makes it contiguous again, the kernel never sees strides
        _gate(strided="sample.noncontiguous().transform(_to_npu)"),
        # no memcheck: a write past the end goes unseen
        _gate(memcheck=False),
        # forward only: a wrong backward passes
        _gate(grads=False),
        # compares on the host with allclose: a result left on the CPU, or in float64, passes
        _gate(compare="if not torch.allclose(got.detach().cpu().float(), want.detach(), atol=1e-5):\n"
                      "                    raise AssertionError('values differ')\n"),
        # exact comparison: a correct kernel that rounds otherwise than the CPU fails
        _gate(compare="if got.device != n.input.device or got.dtype != want.dtype or "
                      "not torch.equal(got.detach().cpu(), want.detach()):\n"
                      "                    raise AssertionError('not equal')\n"),
        # lets the kernel's own error escape: the gate itself raises on a crashing kernel
        _gate(catch="AssertionError"),
        # never looks at the input after the call: an operator that overwrites it passes
        _gate(keep_input=False),
        # the operator called without the sample's arguments: an operator that ignores them passes
        _gate(call="op(n.input)", reference="op(s.input)"),
        # the first sample only
        _gate(samples="[next(iter(op.sample_inputs('cpu', torch.float32, requires_grad=op.supports_autograd)))]"),
        # the lab's own harness instead of a gate of one's own
        "from npu_lab.ops.conformance import check_opinfo\n"
        "from npu_lab.ops.conformance import opinfo_name\n"
        "def conformance(op):\n"
        "    results = check_opinfo(opinfo_name(op), grads=op.supports_autograd)\n"
        "    return [r.detail for r in results if r.status != 'passed']",
        # reports every sample, failing or not: the lab's own kernels "fail"
        _GATE_HEAD +
        "def conformance(op):\n"
        "    return [f'sample {i}: checked' for i, _ in enumerate(op.sample_inputs('cpu', torch.float32))]",
    ],
}
