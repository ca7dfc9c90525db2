"""Every kernel of the device runtime against PyTorch's CPU result.

(The full operator library, checked with PyTorch's OpInfo database, comes with
the operator-library issue; these cover the kernels training an MLP needs.)
"""

import pytest
import torch
import torch.nn.functional as F

torch.manual_seed(0)
A = torch.randn(4, 5)
B = torch.randn(4, 5)
ROW = torch.randn(5)
COL = torch.randn(4, 1)
POS = torch.rand(4, 5) + 0.1
INT = torch.randint(-5, 5, (4, 5))
MASK = torch.rand(4, 5) > 0.5

CASES = {
    "add": lambda t: t["A"] + t["B"],
    "add_alpha": lambda t: torch.add(t["A"], t["B"], alpha=2.5),
    "add_broadcast_row": lambda t: t["A"] + t["ROW"],
    "add_broadcast_col": lambda t: t["A"] + t["COL"],
    "add_scalar": lambda t: t["A"] + 3,
    "radd_scalar": lambda t: 3 + t["A"],
    "sub": lambda t: t["A"] - t["B"],
    "rsub": lambda t: 1 - t["A"],
    "mul": lambda t: t["A"] * t["B"],
    "mul_int_float": lambda t: t["INT"] * t["A"],
    "div": lambda t: t["A"] / t["POS"],
    "div_int": lambda t: t["INT"] / 2,
    "div_floor": lambda t: torch.div(t["A"], t["POS"], rounding_mode="floor"),
    "div_trunc_int": lambda t: torch.div(t["INT"], 3, rounding_mode="trunc"),
    "div_floor_int": lambda t: torch.div(t["INT"], 3, rounding_mode="floor"),
    "neg": lambda t: -t["A"],
    "abs": lambda t: t["A"].abs(),
    "pow": lambda t: t["POS"] ** 1.7,
    "pow2": lambda t: t["A"] ** 2,
    "exp": lambda t: t["A"].exp(),
    "log": lambda t: t["POS"].log(),
    "sqrt": lambda t: t["POS"].sqrt(),
    "rsqrt": lambda t: t["POS"].rsqrt(),
    "relu": lambda t: t["A"].relu(),
    "sigmoid": lambda t: t["A"].sigmoid(),
    "tanh": lambda t: t["A"].tanh(),
    "gelu": lambda t: F.gelu(t["A"]),
    "gelu_tanh": lambda t: F.gelu(t["A"], approximate="tanh"),
    "silu": lambda t: F.silu(t["A"]),
    "clamp": lambda t: t["A"].clamp(-0.5, 0.5),
    "clamp_min": lambda t: t["A"].clamp(min=0.1),
    "where": lambda t: torch.where(t["MASK"], t["A"], t["B"]),
    "where_scalar": lambda t: torch.where(t["MASK"], t["A"], 0.0),
    "eq": lambda t: t["INT"] == 0,
    "lt": lambda t: t["A"] < t["B"],
    "ge_scalar": lambda t: t["A"] >= 0,
    "logical_and": lambda t: torch.logical_and(t["MASK"], t["A"] > 0),
    "logical_not": lambda t: ~t["MASK"],
    "maximum": lambda t: torch.maximum(t["A"], t["B"]),
    "exp_int": lambda t: t["INT"].exp(),
    "sum": lambda t: t["A"].sum(),
    "sum_dim": lambda t: t["A"].sum(0),
    "sum_keepdim": lambda t: t["A"].sum(1, keepdim=True),
    "sum_int": lambda t: t["INT"].sum(),
    "sum_bool": lambda t: t["MASK"].sum(1),
    "mean": lambda t: t["A"].mean(),
    "mean_dims": lambda t: t["A"].reshape(2, 2, 5).mean((0, 2)),
    "max_dim": lambda t: t["A"].max(1),
    "min_all": lambda t: t["A"].min(),
    "argmax": lambda t: t["A"].argmax(1),
    "var": lambda t: t["A"].var(1),
    "std_all": lambda t: t["A"].std(),
    "softmax": lambda t: t["A"].softmax(1),
    "softmax_dim0": lambda t: t["A"].softmax(0),
    "log_softmax": lambda t: t["A"].log_softmax(-1),
    "mm": lambda t: t["A"] @ t["B"].t(),
    "mm_nn": lambda t: t["A"].t() @ t["B"],
    "matmul_vec": lambda t: t["A"] @ t["ROW"],
    "addmm": lambda t: torch.addmm(t["COL"], t["A"], t["B"].t(), beta=0.5, alpha=2),
    "linear": lambda t: F.linear(t["A"], t["B"], t["COL"].reshape(-1)),
    "bmm": lambda t: torch.bmm(t["A"].reshape(2, 2, 5), t["B"].reshape(2, 5, 2)),
    "dot": lambda t: torch.dot(t["ROW"], t["ROW"]),
    "mse_loss": lambda t: F.mse_loss(t["A"], t["B"]),
    "mse_loss_sum": lambda t: F.mse_loss(t["A"], t["B"], reduction="sum"),
    "cross_entropy": lambda t: F.cross_entropy(t["A"], (t["INT"].abs()[:, 0] % 5)),
    "nll_none": lambda t: F.nll_loss(t["A"].log_softmax(1), (t["INT"].abs()[:, 0] % 5), reduction="none"),
    "nll_ignore": lambda t: F.cross_entropy(t["A"], torch.tensor([0, 1, -100, 3]).to(t["A"].device)),
    "masked_fill": lambda t: t["A"].masked_fill(t["MASK"], -1.0),
    "noncontig_add": lambda t: t["A"].t() + t["B"].t(),
    "noncontig_unary": lambda t: t["A"][:, ::2].exp(),
    "inplace_chain": lambda t: t["A"].clone().mul_(2).add_(t["ROW"]).clamp_(-1, 1),
    "addcmul": lambda t: torch.addcmul(t["A"], t["B"], t["POS"], value=0.5),
    "addcdiv": lambda t: torch.addcdiv(t["A"], t["B"], t["POS"], value=0.5),
    "lerp": lambda t: torch.lerp(t["A"], t["B"], 0.3),
    "arange": lambda t: torch.arange(2, 11, 3, device=t["A"].device),
    "zeros_like": lambda t: torch.zeros_like(t["A"]),
    "full": lambda t: torch.full((2, 3), 1.5, device=t["A"].device),
    "cast": lambda t: t["A"].to(torch.int64),
    "to_bool": lambda t: t["INT"].to(torch.bool),
}

INPUTS = {"A": A, "B": B, "ROW": ROW, "COL": COL, "POS": POS, "INT": INT, "MASK": MASK}


def _compare(cpu, npu):
    if isinstance(cpu, (tuple, list)):
        for c, n in zip(cpu, npu):
            _compare(c, n)
        return
    assert npu.device.type == "npu"
    n = npu.cpu()
    assert n.dtype == cpu.dtype, (n.dtype, cpu.dtype)
    assert n.shape == cpu.shape
    if cpu.dtype.is_floating_point:
        torch.testing.assert_close(n, cpu, rtol=1e-5, atol=1e-5)
    else:
        assert torch.equal(n, cpu)


@pytest.mark.parametrize("name", sorted(CASES))
def test_op_matches_cpu(name):
    fn = CASES[name]
    npu_inputs = {k: v.to("npu") for k, v in INPUTS.items()}
    _compare(fn(INPUTS), fn(npu_inputs))


GRAD_CASES = {
    "mlp_pieces": lambda a, b: F.relu(F.linear(a, b) + 0.1).sum(),
    "mse": lambda a, b: F.mse_loss(a @ b.t(), torch.ones(4, 4, device=a.device)),
    "ce": lambda a, b: F.cross_entropy(a @ b.t(), torch.tensor([0, 1, 2, 3], device=a.device)),
    "activations": lambda a, b: (a.sigmoid() * b.tanh() + F.gelu(a) + F.silu(b)).mean(),
    "softmax": lambda a, b: (a.softmax(1) * b).sum(),
    "broadcast": lambda a, b: (a * b[0] + b.sum(0, keepdim=True)).pow(2).mean(),
    "div_where": lambda a, b: torch.where(a > 0, a / (b.abs() + 1), a * 2).sum(),
}


@pytest.mark.parametrize("name", sorted(GRAD_CASES))
def test_gradients_match_cpu(name):
    fn = GRAD_CASES[name]
    a_cpu = A.clone().requires_grad_()
    b_cpu = B.clone().requires_grad_()
    a_npu = A.to("npu").requires_grad_()
    b_npu = B.to("npu").requires_grad_()
    fn(a_cpu, b_cpu).backward()
    fn(a_npu, b_npu).backward()
    torch.testing.assert_close(a_npu.grad.cpu(), a_cpu.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(b_npu.grad.cpu(), b_cpu.grad, rtol=1e-5, atol=1e-5)


def test_out_variants():
    out = torch.empty(0, device="npu")
    torch.add(A.npu(), B.npu(), out=out)
    torch.testing.assert_close(out.cpu(), A + B)
    out2 = torch.empty(3, device="npu")
    torch.mul(A.npu(), 2, out=out2)
    assert out2.shape == (4, 5)
    torch.testing.assert_close(out2.cpu(), A * 2)


def test_large_tensors_use_parallel_kernels():
    x = torch.randn(300_000)
    y = torch.randn(300_000)
    torch.testing.assert_close((x.npu() * y.npu() + 1).cpu(), x * y + 1)
    torch.testing.assert_close(x.npu().sum().cpu(), x.sum(), rtol=1e-4, atol=1e-3)
    big = torch.randn(600, 200)
    bias = torch.randn(200)
    torch.testing.assert_close((big.npu() + bias.npu()).cpu(), big + bias)
    torch.testing.assert_close((big.npu().t() * 3).cpu(), big.t() * 3)
    m = torch.randn(300, 200)
    torch.testing.assert_close((m.npu() @ m.npu().t()).cpu(), m @ m.t(), rtol=1e-4, atol=1e-3)


def test_temporaries_are_not_reused_while_a_kernel_reads_them():
    """Regression: two same-size contiguous copies made inside one kernel call must not share memory."""
    a, b = torch.randn(4, 8, 6), torch.randn(4, 6, 8)
    out = torch.bmm(a.npu().transpose(1, 2), b.npu().transpose(1, 2))
    torch.testing.assert_close(out.cpu(), torch.bmm(a.transpose(1, 2), b.transpose(1, 2)), rtol=1e-5, atol=1e-5)
    q = torch.randn(2, 2, 6, 8)
    qc, qn = q.clone().requires_grad_(), q.npu().requires_grad_()
    (qc @ qc.transpose(-1, -2)).sum().backward()
    (qn @ qn.transpose(-1, -2)).sum().backward()
    torch.testing.assert_close(qn.grad.cpu(), qc.grad, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape,dims", [((128, 96), (0,)), ((4, 5, 600), (0, 1)), ((7, 3, 2), (0,)),
                                        ((3, 1100), (-2,))])
@pytest.mark.parametrize("keepdim", [False, True])
def test_sum_and_mean_over_leading_dims(shape, dims, keepdim):
    """The column-sum kernel (bias gradients) against the CPU, without a transposed copy."""
    from npu_lab.device import clock

    x = torch.randn(shape, generator=torch.Generator().manual_seed(0))
    xn = x.npu()
    before = clock.clock(0).launches
    got = xn.sum(dims, keepdim=keepdim)
    assert clock.clock(0).launches - before == 1
    torch.testing.assert_close(got.cpu(), x.sum(dims, keepdim=keepdim), rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(xn.mean(dims, keepdim=keepdim).cpu(), x.mean(dims, keepdim=keepdim),
                               rtol=1e-5, atol=1e-5)
