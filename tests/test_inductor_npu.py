"""Inductor generating numba kernels for ``npu`` tensors (way 3 of adapting a chip).

Each case compiles with ``backend="inductor"`` on npu tensors and compares with
PyTorch's CPU eager result; structural tests read the code Inductor wrote.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch._dynamo
from torch._inductor.utils import run_and_get_code

import npu_lab
import npu_lab.inductor as npu_inductor
from npu_lab import models


@pytest.fixture(autouse=True)
def _registered():
    npu_inductor.register()
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _g(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


CASES = {
    "pointwise, broadcast, transposed input": (lambda x, b: torch.tanh(x.t() * b + 1), (_g(16, 8), _g(16))),
    "softmax": (lambda x: torch.softmax(x, -1), (_g(16, 33),)),
    "argmax with ties and nan": (lambda x: x.argmax(-1), (torch.tensor([[1.0, 3.0, 3.0], [float("nan"), 1.0, 2.0]]),)),
    "var_mean (welford)": (lambda x: torch.var_mean(x, -1), (_g(16, 33),)),
    "layer_norm": (lambda x: torch.nn.functional.layer_norm(x, (33,)), (_g(16, 33),)),
    "sum of all, max-min over dim 0": (lambda x: ((x * x).sum(), x.amax(0) - x.amin(0)), (_g(16, 33),)),
    "cat (masked loads)": (lambda x: torch.cat([x, x * 2], 1), (_g(4, 5),)),
    "where and integer cast": (lambda x: torch.where(x > 0, x.long(), 3), (_g(4, 5),)),
    "embedding (indirect, bounds-checked)": (lambda w, i: w[i] * 2, (_g(10, 4), torch.tensor([[1, 9], [0, 3]]))),
}


@pytest.mark.parametrize("name", list(CASES))
def test_inductor_npu_matches_cpu(name):
    fn, args = CASES[name]
    ref = fn(*args)
    out = torch.compile(fn, backend="inductor")(*[a.to("npu") for a in args])
    refs = ref if isinstance(ref, tuple) else (ref,)
    outs = out if isinstance(out, tuple) else (out,)
    for o, r in zip(outs, refs):
        assert o.device.type == "npu" and o.dtype == r.dtype
        torch.testing.assert_close(o.cpu(), r, rtol=1e-5, atol=1e-5, equal_nan=True)


def test_softmax_becomes_two_fused_numba_kernels():
    x = _g(64, 128).to("npu")
    _, codes = run_and_get_code(torch.compile(lambda t: (torch.softmax(t, -1) * 2).sin(), backend="inductor"), x)
    wrapper = "\n".join(codes)
    calls = [line.strip() for line in wrapper.splitlines() if line.strip().startswith("npu_kernel_")
             and "(" in line and "load_kernel" not in line]
    assert len(calls) == 2, calls  # max+sum reductions in one kernel, the pointwise epilogue in the other
    sources = npu_inductor.kernels_in(wrapper)
    assert len(sources) == 2
    reduction = next(s for s in sources.values() if "acc0" in s)
    assert "acc0 = _maximum" in reduction and "acc1 = acc1 + " in reduction and "for r0 in range(128)" in reduction
    epilogue = next(s for s in sources.values() if "acc0" not in s)
    assert "fast_exp" in epilogue and "math.sin" in epilogue


def test_matmul_is_an_extern_kernel_and_the_epilogue_is_generated():
    x, w = _g(16, 33).to("npu"), _g(33, 8, seed=1).to("npu")
    out, codes = run_and_get_code(torch.compile(lambda a, b: torch.relu(a @ b + 1), backend="inductor"), x, w)
    wrapper = "\n".join(codes)
    assert "extern_kernels.mm" in wrapper or "extern_kernels.addmm" in wrapper
    assert "npu_kernel_" in wrapper
    torch.testing.assert_close(out.cpu(), torch.relu(x.cpu() @ w.cpu() + 1), rtol=1e-5, atol=1e-5)


def test_generated_kernels_are_counted_by_the_device_profiler():
    f = torch.compile(lambda t: (t.sin() + 1).sum(-1), backend="inductor")
    x = _g(8, 16).to("npu")
    f(x)
    with npu_lab.profile() as prof:
        f(x)
    names = [k.name for k in prof.kernels]
    assert any(n.startswith("inductor:npu_kernel_") for n in names)
    k = next(k for k in prof.kernels if k.name.startswith("inductor:"))
    assert k.bytes_read == 8 * 16 * 4 and k.bytes_written == 8 * 4  # reads x, writes one float per row


@pytest.mark.parametrize("make", [models.mlp, models.SmallCNN, models.TransformerBlock],
                         ids=["mlp", "cnn", "transformer"])
def test_training_step_matches_cpu(make):
    torch.manual_seed(0)
    ref = make()
    model = copy.deepcopy(ref).to("npu")
    x, y = models.example_batch(ref, 4)
    step = torch.compile(lambda a, b: models.loss_fn(model, model(a), b), backend="inductor")
    loss = step(x.to("npu"), y.to("npu"))
    loss.backward()
    ref_loss = models.loss_fn(ref, ref(x), y)
    ref_loss.backward()
    assert abs(loss.item() - ref_loss.item()) < 1e-5
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-4, atol=1e-5)


def test_half_precision_is_refused_clearly():
    x = torch.ones(4, dtype=torch.float16).to("npu")
    with pytest.raises(Exception, match=r"npu Inductor.*float16"):
        torch.compile(lambda t: t * 2 + 1, backend="inductor")(x)
