"""Indexing, factories, random distributions and FFT on the npu, against PyTorch's CPU results."""

import math
import warnings

import pytest
import torch

import npu_lab
from npu_lab.ops.sweep import sweep

NPU = "npu"

#: OpInfos that must be native (forward and backward) with the CPU fallback off.
NATIVE = """index_copy index_reduce.mean index_reduce.prod index_reduce.amin index_reduce.amax put take roll eye
linspace linspace.tensor_overload logspace logspace.tensor_overload nonzero_static scatter_reduce.sum
scatter_reduce.prod scatter_reduce.mean scatter_reduce.amin scatter_reduce.amax _segment_reduce.lengths
_segment_reduce.offsets signal.windows.cosine signal.windows.exponential signal.windows.gaussian multinomial normal
normal.number_mean cauchy exponential geometric log_normal fft.fft fft.fft2 fft.fftn fft.hfft fft.hfft2 fft.hfftn
fft.rfft fft.rfft2 fft.rfftn fft.ifft fft.ifft2 fft.ifftn fft.ihfft fft.irfft fft.irfft2 fft.irfftn fft.fftshift
fft.ifftshift""".split()
#: OpInfos of this family whose only missing kernels belong to other families (named here): each must be native
#: once those land, and with the fallback on nothing but those may fall back.
BLOCKED = {
    "index_fill": {"aten::_unique"},  # value's gradient: grad.index_select(dim, _unique(index)).sum()
    "fft.ihfft2": {"aten::conj_physical.out"},  # the front end conjugates the one-sided r2c result
    "fft.ihfftn": {"aten::conj_physical.out"},
    "stft": {"aten::reflection_pad1d.out", "aten::reflection_pad1d_backward.grad_input"},  # center=True padding
}


def npu(t: torch.Tensor) -> torch.Tensor:
    return t.to(NPU)


def close(actual: torch.Tensor, expected: torch.Tensor, **kw) -> None:
    assert actual.device.type == "npu"
    torch.testing.assert_close(actual.cpu(), expected, **kw)


def same_error(fn, *args, **kwargs) -> None:
    """fn raises on the npu what it raises on the CPU (type and message), given CPU args."""
    with pytest.raises(Exception) as cpu:  # noqa: PT011 - the CPU's exception is what we compare with
        fn(*args, **kwargs)
    moved = [npu(a) if isinstance(a, torch.Tensor) else a for a in args]
    moved_kw = {k: npu(v) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
    with pytest.raises(type(cpu.value)) as dev:
        fn(*moved, **moved_kw)
    assert str(dev.value).split("\n")[0] == str(cpu.value).split("\n")[0]


# --- the OpInfo sweep -----------------------------------------------------------------------------------------

def test_opinfos_native_with_fallback_off():
    report = sweep(False, names=NATIVE + list(BLOCKED))
    status = {o.name: o for o in report.ops}
    assert set(status) == set(NATIVE) | set(BLOCKED)
    bad = {n: (status[n].status, status[n].detail) for n in NATIVE if status[n].status != "native"}
    assert not bad
    for name, deps in BLOCKED.items():
        o = status[name]
        assert o.status == "native" or (o.status == "missing" and o.detail.split(" ")[0] in deps), (name, o.detail)


def test_blocked_opinfos_fall_back_only_for_other_families():
    report = sweep(True, names=list(BLOCKED))
    for o in report.ops:
        assert o.status in ("native", "fallback"), (o.name, o.status, o.detail)
        assert set(o.fell_back) <= BLOCKED[o.name], (o.name, o.fell_back)


# --- scatter_reduce, index_reduce -----------------------------------------------------------------------------

@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.int32, torch.bool])
def test_scatter_reduce_matches_cpu(reduce, dtype):
    if dtype == torch.bool and reduce == "mean":
        return
    g = torch.Generator().manual_seed(1)
    base = torch.randn(7, 9, generator=g) * 4
    self_ = base.t().to(dtype)  # non-contiguous self (9, 7)
    src_full = (torch.randn(12, 10, generator=g) * 4).to(dtype)
    src = src_full[2:8, 1:6]  # sliced: a storage offset and strides
    index = torch.randint(0, 9, (5, 4), generator=g)  # smaller than src, duplicates
    for include_self in (True, False):
        expected = self_.scatter_reduce(0, index, src, reduce, include_self=include_self)
        s_npu, src_npu = npu(self_), npu(src_full)[2:8, 1:6]
        before = s_npu.cpu().clone()
        close(s_npu.scatter_reduce(0, npu(index), src_npu, reduce, include_self=include_self), expected)
        assert torch.equal(s_npu.cpu(), before)
        out = torch.full((2,), 3, dtype=dtype, device=NPU)
        torch.scatter_reduce(s_npu, 0, npu(index), src_npu, reduce, include_self=include_self, out=out)
        close(out, expected)
        inplace = s_npu.clone()
        inplace.scatter_reduce_(1, npu(index.clamp(max=6)), src_npu, reduce, include_self=include_self)
        close(inplace, self_.clone().scatter_reduce_(1, index.clamp(max=6), src, reduce, include_self=include_self))


def test_scatter_reduce_nan_empty_and_errors():
    x = torch.tensor([1.0, 2.0, 3.0])
    src = torch.tensor([float("nan"), 5.0, -1.0])
    idx = torch.tensor([0, 1, 1])
    for r in ("amax", "amin"):
        close(npu(x).scatter_reduce(0, npu(idx), npu(src), r), x.scatter_reduce(0, idx, src, r), equal_nan=True)
    empty_idx = torch.zeros(0, dtype=torch.long)
    close(npu(x).scatter_reduce(0, npu(empty_idx), npu(src), "sum"), x.scatter_reduce(0, empty_idx, src, "sum"))
    same_error(torch.scatter_reduce, x, 0, idx, src, "median")
    same_error(torch.scatter_reduce, x, 0, torch.tensor([0, 3]), src, "sum")
    same_error(torch.scatter_reduce, x, 0, torch.tensor([0, -1]), src, "sum")
    same_error(torch.scatter_reduce, x, 0, idx.float(), src, "sum")
    same_error(torch.scatter_reduce, x, 0, idx, src.double(), "sum")
    same_error(torch.scatter_reduce, x.reshape(3, 1), 0, torch.tensor([[0, 1]]), src.reshape(3, 1), "sum")
    same_error(torch.scatter_reduce, x, 0, idx.reshape(3, 1), src, "sum")


def test_scatter_reduce_backward_matches_cpu():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(6, 5, generator=g, dtype=torch.float64)
    src = torch.randn(4, 5, generator=g, dtype=torch.float64)
    idx = torch.randint(0, 6, (4, 5), generator=g)
    for reduce in ("sum", "prod", "mean", "amax", "amin"):
        grads = []
        for dev in ("cpu", NPU):
            a, b = x.to(dev).detach().requires_grad_(), src.to(dev).detach().requires_grad_()
            a.scatter_reduce(0, idx.to(dev), b, reduce, include_self=False).pow(2).sum().backward()
            grads.append((a.grad.cpu(), b.grad.cpu()))
        torch.testing.assert_close(grads[1], grads[0])


@pytest.mark.parametrize("reduce", ["prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.int64])
def test_index_reduce_matches_cpu(reduce, dtype):
    g = torch.Generator().manual_seed(2)
    self_ = (torch.randn(6, 5, generator=g) * 3).to(dtype).t()  # (5, 6) non-contiguous
    source = (torch.randn(5, 10, generator=g) * 3).to(dtype)[:, 2:9]  # (5, 7) offset view
    index = torch.tensor([0, 5, 5, 2, 0, 1, 5])
    for include_self in (True, False):
        expected = self_.index_reduce(1, index, source, reduce, include_self=include_self)
        s = npu(self_)
        before = s.cpu().clone()
        close(s.index_reduce(1, npu(index), npu(source), reduce, include_self=include_self), expected)
        assert torch.equal(s.cpu(), before)
        s.index_reduce_(1, npu(index), npu(source), reduce, include_self=include_self)
        close(s, expected)


def test_index_reduce_errors():
    x, src = torch.randn(3, 4), torch.ones(1, 4)
    same_error(torch.Tensor.index_reduce, x, 0, torch.tensor([3]), src, "prod")
    same_error(torch.Tensor.index_reduce, x, 0, torch.tensor([1]), src, "sum")
    same_error(torch.Tensor.index_reduce, x, 0, torch.tensor([1]), torch.ones(2, 4), "prod")
    same_error(torch.Tensor.index_reduce, x, 0, torch.tensor([1]), torch.ones(1, 3), "prod")
    same_error(torch.Tensor.index_reduce, x, 0, torch.tensor([1]), src.double(), "prod")
    same_error(torch.Tensor.index_reduce, x, 0, torch.tensor([[1]]), src, "prod")


# --- index_fill, index_copy, put, take ------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.uint8, torch.bool])
def test_index_fill_matches_cpu(dtype):
    base = torch.arange(48).reshape(6, 8)
    x = (base % 5).to(dtype)
    idx = torch.tensor([1, -1, 3, 1])
    for dim, value in ((0, 2), (1, 7.9), (-1, torch.tensor(4))):
        close(npu(x).index_fill(dim, npu(idx), value), x.index_fill(dim, idx, value))
    t = npu(x).t()  # in place into a transposed view
    t.index_fill_(0, npu(idx), 3)
    close(t, x.t().clone().index_fill_(0, idx, 3))
    sliced = npu(x)[1:, ::2]  # in place into a strided, offset view: the rest of the storage untouched
    full = sliced._base if sliced._base is not None else sliced
    sliced.index_fill_(1, npu(torch.tensor([0, 2])), 1)
    expected = x.clone()
    expected[1:, ::2].index_fill_(1, torch.tensor([0, 2]), 1)
    close(full, expected)


def test_index_fill_errors_and_scalars():
    x = torch.randn(3, 4)
    same_error(torch.Tensor.index_fill, x, 0, torch.tensor([3]), 1.0)
    same_error(torch.Tensor.index_fill, x, 0, torch.tensor([-4]), 1.0)
    same_error(torch.Tensor.index_fill, x, 0, torch.tensor([0], dtype=torch.int32), 1.0)
    same_error(torch.Tensor.index_fill, x, 0, torch.tensor([[0]]), 1.0)
    same_error(torch.Tensor.index_fill, x, 0, torch.tensor([0]), torch.tensor([1.0]))
    same_error(torch.Tensor.index_fill, x, 2, torch.tensor([0]), 1.0)
    s = torch.tensor(1.5)
    close(npu(s).index_fill(0, npu(torch.tensor(0)), 5.0), s.index_fill(0, torch.tensor(0), 5.0))
    close(npu(torch.zeros(0, 3)).index_fill(1, npu(torch.tensor([1])), 2.0), torch.zeros(0, 3))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.complex64])
def test_index_copy_matches_cpu(dtype):
    x = torch.arange(30).reshape(5, 6).to(dtype)
    src_full = (torch.arange(100).reshape(10, 10) * -1).to(dtype)
    idx = torch.tensor([4, 0, 4])
    s = npu(x).t()  # (6, 5) transposed
    src = src_full[1:7, 2:5]  # (6, 3): offset and strided
    expected = x.t().index_copy(1, idx, src)
    before = s.cpu().clone()
    close(s.index_copy(1, npu(idx), npu(src_full)[1:7, 2:5]), expected)
    assert torch.equal(s.cpu(), before)
    out = torch.empty(0, dtype=dtype, device=NPU)
    torch.index_copy(s, 1, npu(idx), npu(src_full)[1:7, 2:5], out=out)
    close(out, expected)
    s.index_copy_(1, npu(idx), npu(src_full)[1:7, 2:5])
    close(s, expected)
    src0 = src_full[2:5, 1:7]
    close(npu(x).index_copy(0, npu(idx), npu(src_full)[2:5, 1:7]), x.index_copy(0, idx, src0))


def test_index_copy_errors():
    x = torch.randn(3, 4)
    same_error(torch.Tensor.index_copy, x, 0, torch.tensor([3]), torch.ones(1, 4))
    same_error(torch.Tensor.index_copy, x, 0, torch.tensor([-1]), torch.ones(1, 4))
    same_error(torch.Tensor.index_copy, x, 0, torch.tensor([1]), torch.ones(2, 4))
    same_error(torch.Tensor.index_copy, x, 0, torch.tensor([1]), torch.ones(1, 4).double())
    same_error(torch.Tensor.index_copy, x, 0, torch.tensor([1], dtype=torch.int32), torch.ones(1, 4))
    same_error(torch.Tensor.index_copy, x, 0, torch.tensor([1]), torch.ones(1, 3))
    same_error(torch.Tensor.index_copy, x, 0, torch.tensor([[1]]), torch.ones(1, 4))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int32, torch.bool])
def test_put_take_match_cpu(dtype):
    x = torch.arange(24).reshape(4, 6).to(dtype)
    idx = torch.tensor([[0, -1], [5, 5], [23, -24]])
    src = (torch.arange(6).reshape(3, 2) + 7).to(dtype)
    for accumulate in (False, True):
        if accumulate:
            idx_used = idx
        else:  # duplicate positions without accumulate are unspecified: distinct ones only
            idx_used = torch.tensor([[0, -1], [5, 6], [22, -24]])
        expected = x.t().put(idx_used, src, accumulate)
        s = npu(x).t()  # put into a non-contiguous tensor: positions in its logical (row-major) order
        close(s.put(npu(idx_used), npu(src), accumulate), expected)
        s.put_(npu(idx_used), npu(src), accumulate)
        close(s, expected)
    close(npu(x).t().take(npu(idx)), x.t().take(idx))
    close(npu(x)[1:, 2:].take(npu(torch.tensor([0, 5, -1]))), x[1:, 2:].take(torch.tensor([0, 5, -1])))
    out = torch.empty(0, dtype=dtype, device=NPU)
    torch.take(npu(x), npu(idx), out=out)
    close(out, x.take(idx))
    close(npu(x).take(npu(torch.zeros(0, dtype=torch.long))), x.take(torch.zeros(0, dtype=torch.long)))


def test_put_take_errors():
    x = torch.randn(3, 4)
    for f in (lambda t, i: t.take(i), lambda t, i: t.put(i, torch.ones(i.shape, device=t.device))):
        same_error(f, x, torch.tensor([12]))
        same_error(f, x, torch.tensor([-13]))
        same_error(f, x, torch.tensor([1], dtype=torch.int32))
    same_error(torch.Tensor.put, x, torch.tensor([1, 2]), torch.ones(1))
    same_error(torch.Tensor.put, x, torch.tensor([1]), torch.ones(1).double())
    same_error(torch.Tensor.take, torch.zeros(0), torch.tensor([0]))


# --- roll, nonzero_static -------------------------------------------------------------------------------------

def test_roll_matches_cpu():
    x = torch.arange(60).reshape(3, 4, 5)
    cases = [((1,), (0,)), ((-7, 2), (2, 1)), ((5,), ()), ((0,), (1,)), ((3, 4), (1, 1)), ((13,), None)]
    for dtype in (torch.float32, torch.int64, torch.complex128, torch.bool):
        t = (x % 7).to(dtype)
        for shifts, dims in cases:
            for view in (lambda a: a, lambda a: a.transpose(0, 2), lambda a: a[1:, ::2]):
                args = (shifts,) if dims is None else (shifts, dims)
                close(torch.roll(view(npu(t)), *args), torch.roll(view(t), *args))
    close(torch.roll(npu(torch.zeros(0, 3)), 1, 0), torch.zeros(0, 3))
    close(torch.roll(npu(torch.tensor(2.0)), 1), torch.tensor(2.0))
    same_error(torch.roll, x, (1, 2), (0,))
    same_error(torch.roll, x, 1, 5)
    same_error(torch.roll, torch.tensor(1.0), 1, 0)


def test_roll_backward():
    x = torch.randn(4, 5, dtype=torch.float64)
    w = torch.randn(4, 5, dtype=torch.float64)
    grads = []
    for dev in ("cpu", NPU):
        a = x.to(dev).detach().requires_grad_()
        (torch.roll(a, (2, -1), (0, 1)) * w.to(dev)).sum().backward()
        grads.append(a.grad.cpu())
    torch.testing.assert_close(grads[1], grads[0])


def test_nonzero_static_matches_cpu():
    x = torch.tensor([[0, 1, 0, 2], [3, 0, 0, 4], [0, 0, 5, 0]])
    for t in (x, x.t(), x.bool(), x.double()[1:], torch.tensor(3), torch.tensor(0)):
        for size, fill in ((0, -1), (2, -1), (5, 9), (12, -7)):
            close(torch.nonzero_static(npu(t), size=size, fill_value=fill),
                  torch.nonzero_static(t, size=size, fill_value=fill))
    same_error(torch.nonzero_static, x, size=-1)


# --- segment_reduce -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "max", "min"])
def test_segment_reduce_matches_cpu(reduce):
    g = torch.Generator().manual_seed(5)
    data = torch.randn(2, 9, 3, dtype=torch.float64, generator=g)
    data[0, 3, 1] = 0.0  # prod's gradient at a zero
    data[1, 2, 0] = data[1, 3, 0]  # a tie for max/min
    lengths = torch.tensor([[2, 0, 4, 3], [1, 3, 5, 0]])
    offsets = torch.cat([torch.zeros(2, 1, dtype=torch.long), lengths.cumsum(1)], 1)
    for kw in ({"lengths": lengths}, {"offsets": offsets}, {"lengths": lengths.int(), "initial": 1.5}):
        outs = []
        for dev in ("cpu", NPU):
            d = data.to(dev).detach().requires_grad_()
            args = {k: v.to(dev) if isinstance(v, torch.Tensor) else v for k, v in kw.items()}
            out = torch.segment_reduce(d, reduce, axis=1, unsafe=True, **args)
            w = torch.arange(out.numel(), dtype=out.dtype, device=dev).reshape(out.shape) - 5
            (torch.nan_to_num(out, posinf=0, neginf=0) * w).sum().backward()
            outs.append((out.detach().cpu(), d.grad.cpu()))
        torch.testing.assert_close(outs[1], outs[0], equal_nan=True)
    flat = data[0, :, 0].float()
    close(torch.segment_reduce(npu(flat), reduce, lengths=npu(torch.tensor([4, 5]))),
          torch.segment_reduce(flat, reduce, lengths=torch.tensor([4, 5])))


def test_segment_reduce_errors():
    x = torch.randn(3, 4)
    same_error(torch.segment_reduce, x, "max", lengths=torch.tensor([1, 1]))
    same_error(torch.segment_reduce, x, "max", lengths=torch.tensor([1, -1, 3]))
    same_error(torch.segment_reduce, x, "median", lengths=torch.tensor([1, 2]))
    same_error(torch.segment_reduce, x, "max")
    same_error(torch.segment_reduce, x, "max", lengths=torch.tensor([1, 2]), axis=1)


# --- eye, linspace, logspace ----------------------------------------------------------------------------------

def test_eye_matches_cpu():
    for dtype in (torch.float32, torch.int64, torch.bool, torch.complex64):
        for shape in ((0,), (3,), (3, 5), (5, 2), (4, 0)):
            close(torch.eye(*shape, dtype=dtype, device=NPU), torch.eye(*shape, dtype=dtype))
    out = torch.full((6, 6), 7.0, device=NPU)[:, ::2]  # a strided out= of the right size is written in place
    torch.eye(6, 3, out=out)
    close(out, torch.eye(6, 3))
    for args in ((-1,), (2, -1)):
        with pytest.raises(RuntimeError) as e:
            torch.eye(*args, device=NPU)
        with pytest.raises(RuntimeError, match=str(e.value)):
            torch.eye(*args)


def _same_factory(fn, *args, **kwargs) -> None:
    """A factory gives on the npu what it gives on the CPU: the same values, or the same error."""
    try:
        expected = fn(*args, **kwargs)
    except RuntimeError as e:
        with pytest.raises(RuntimeError) as dev:
            fn(*args, device=NPU, **kwargs)
        assert str(dev.value) == str(e)
        return
    close(fn(*args, device=NPU, **kwargs), expected, rtol=2e-6, atol=1e-6, equal_nan=True)


def test_linspace_logspace_match_cpu():
    cases = [(0.5, 10.7, 5), (-3, 10, 7), (2, -4.5, 11), (1, 3, 1), (1, 3, 0), (-1, 1, 1000), (-3.5, 3, 5),
             (-300, 3, 5), (0, 300, 5), (-3, 2**40, 5), (0, 1e39, 5), (float("nan"), 2, 5), (0, 1, -1)]
    for dtype in (torch.float32, torch.float64, torch.int64, torch.int32, torch.uint8, torch.complex64):
        for start, end, steps in cases:
            _same_factory(torch.linspace, start, end, steps, dtype=dtype)
            for base in (10.0, 2.5):
                if dtype == torch.uint8 and start < 0 and steps > 1:
                    continue  # a wrapped start: powers far out of range, converted with undefined behaviour in C++
                if abs(start) < 100 and abs(end) < 100:
                    _same_factory(torch.logspace, start, end / 4, steps, base, dtype=dtype)
    close(torch.linspace(1 + 2j, 3, 4, device=NPU), torch.linspace(1 + 2j, 3, 4))
    close(torch.linspace(torch.tensor(-2.0), torch.tensor(3.0), 9, device=NPU), torch.linspace(-2.0, 3.0, 9))
    out = torch.zeros(10, device=NPU)[::2]
    torch.linspace(0, 1, 5, out=out)
    close(out, torch.linspace(0, 1, 5))
    out = torch.empty(2, dtype=torch.float64, device=NPU)
    torch.logspace(0, 2, 7, out=out)  # resized, as ATen resizes out=
    close(out, torch.logspace(0, 2, 7, dtype=torch.float64))


def test_tril_and_triu_indices_match_cpu():
    """Every (row, col, offset), empty triangles and offsets past either edge included; the CPU's errors."""
    for fn in (torch.tril_indices, torch.triu_indices):
        for row, col in ((0, 0), (0, 3), (3, 0), (1, 1), (3, 3), (4, 7), (7, 4), (33, 5)):
            for offset in (-40, -8, -3, -1, 0, 1, 2, 5, 40):
                got = fn(row, col, offset, device=NPU)
                assert got.device.type == NPU and got.dtype == torch.int64
                assert torch.equal(got.cpu(), fn(row, col, offset)), (fn.__name__, row, col, offset)
        got = fn(5, 6, 1, dtype=torch.int32, device="npu:1")
        assert got.device == torch.device("npu:1") and torch.equal(got.cpu(), fn(5, 6, 1, dtype=torch.int32))
        for args, kwargs in (((-1, 3), {}), ((3, -2), {}), ((3, 3), {"dtype": torch.float32})):
            with pytest.raises(RuntimeError) as cpu:
                fn(*args, **kwargs)
            with pytest.raises(RuntimeError) as npu:
                fn(*args, device=NPU, **kwargs)
            assert str(npu.value) == str(cpu.value)


# --- random distributions -------------------------------------------------------------------------------------

def _ks(sample: torch.Tensor, cdf) -> float:
    """Kolmogorov-Smirnov distance between a sample and a continuous CDF."""
    x = sample.double().sort().values
    n = x.numel()
    f = cdf(x)
    i = torch.arange(1, n + 1, dtype=torch.float64)
    return max((i / n - f).abs().max().item(), (f - (i - 1) / n).abs().max().item())


N = 200_000


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_continuous_distributions(dtype):
    t = torch.empty(N, dtype=dtype, device=NPU)
    e = t.exponential_(2.5).cpu()
    assert e.min() > 0 and _ks(e, lambda x: 1 - torch.exp(-2.5 * x)) < 0.01
    c = t.cauchy_(1.0, 2.0).cpu()
    assert torch.isfinite(c).all() and _ks(c, lambda x: 0.5 + torch.atan((x - 1.0) / 2.0) / math.pi) < 0.01
    ln = t.log_normal_(0.5, 0.75).cpu()
    normal_cdf = torch.distributions.Normal(0.5, 0.75).cdf
    assert ln.min() > 0 and _ks(ln, lambda x: normal_cdf(torch.log(x))) < 0.01
    geo = t.geometric_(0.3).cpu()
    assert geo.min() == 1 and torch.equal(geo, geo.round())
    for k in (1, 2, 3, 6):
        assert abs((geo == k).double().mean().item() - 0.7 ** (k - 1) * 0.3) < 0.005
    assert abs(geo.double().mean().item() - 1 / 0.3) < 0.03


def test_geometric_integer_and_strided_and_errors():
    big = torch.zeros(400, 300, dtype=torch.int64, device=NPU)
    view = big[:, ::3]  # strided: only the view's elements are drawn
    view.geometric_(0.5)
    cpu = big.cpu()
    assert (cpu[:, 1::3] == 0).all() and (cpu[:, 2::3] == 0).all()
    assert cpu[:, ::3].min() >= 1 and abs(cpu[:, ::3].double().mean().item() - 2.0) < 0.05
    for method, args in (("exponential_", (0.0,)), ("exponential_", (-1.0,)), ("cauchy_", (0.0, 0.0)),
                         ("geometric_", (0.0,)), ("geometric_", (1.0,)), ("log_normal_", (0.0, 0.0))):
        with pytest.raises(RuntimeError) as cpu_err:
            getattr(torch.empty(3), method)(*args)
        with pytest.raises(RuntimeError) as npu_err:
            getattr(torch.empty(3, device=NPU), method)(*args)
        assert str(npu_err.value) == str(cpu_err.value)
    for method in ("exponential_", "cauchy_"):
        with pytest.raises(RuntimeError, match="continuous probability distribution"):
            getattr(torch.empty(3, dtype=torch.int64, device=NPU), method)()
    with pytest.raises(NotImplementedError):
        torch.empty(3, dtype=torch.int64, device=NPU).log_normal_()


def test_random_reproducible_under_seed():
    def draw():
        t = torch.empty(1000, device=NPU)
        probs = torch.rand(4, 10, device=NPU)
        return (t.exponential_().cpu(), t.cauchy_().cpu(), t.geometric_(0.2).cpu(), t.log_normal_().cpu(),
                torch.normal(torch.zeros(50, device=NPU), torch.ones(50, device=NPU)).cpu(),
                torch.multinomial(probs, 5).cpu(), torch.multinomial(probs, 20, True).cpu())

    torch.npu.manual_seed(42)
    a = draw()
    torch.npu.manual_seed(42)
    b = draw()
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    torch.npu.manual_seed(43)
    assert not torch.equal(draw()[0], a[0])
    gen = torch.Generator(device=NPU).manual_seed(7)
    x = torch.empty(100, device=NPU).exponential_(generator=gen).cpu()
    gen.manual_seed(7)
    assert torch.equal(torch.empty(100, device=NPU).exponential_(generator=gen).cpu(), x)


def test_normal_tensor_overloads():
    mean = torch.linspace(-5, 5, 4).reshape(4, 1).repeat(1, 20_000)
    std = torch.tensor([0.5, 1.0, 2.0, 0.0]).reshape(4, 1)
    m, s = npu(mean), npu(std)
    before = m.cpu().clone()
    draws = [torch.normal(m, s).cpu(), torch.normal(m, 2.0).cpu(), torch.normal(1.5, s.expand(4, 20_000)).cpu()]
    assert torch.equal(m.cpu(), before)
    for d, means, stds in zip(draws, (mean[:, 0], mean[:, 0], torch.full((4,), 1.5)),
                              (std[:, 0], torch.full((4,), 2.0), std[:, 0])):
        assert d.shape == (4, 20_000)
        torch.testing.assert_close(d.mean(1), means, atol=0.03, rtol=0)
        torch.testing.assert_close(d.std(1), stds, atol=0.03, rtol=0)
    out = torch.empty(0, device=NPU)
    torch.normal(m[:, :10], s, out=out)
    assert out.shape == (4, 10) and torch.equal(out.cpu()[3], mean[3, :10])  # std 0: exactly the mean
    same_error(torch.normal, torch.zeros(3), torch.tensor([1.0, -1.0, 1.0]))
    same_error(torch.normal, torch.zeros(3), -1.0)
    same_error(torch.normal, 0.0, torch.tensor([1.0, -1.0]))
    same_error(torch.normal, torch.zeros(3), torch.ones(2))
    same_error(torch.normal, torch.zeros(3, dtype=torch.long), 1.0)


def test_multinomial_distribution():
    probs = torch.tensor([[0.1, 0.0, 0.6, 0.3], [5.0, 1.0, 0.0, 4.0]])  # unnormalised rows, zero weights
    p = npu(probs)
    draws = torch.multinomial(p, N // 10, replacement=True).cpu()
    assert draws.shape == (2, N // 10) and draws.dtype == torch.int64
    for r in range(2):
        freq = torch.bincount(draws[r], minlength=4).double() / draws.shape[1]
        torch.testing.assert_close(freq, probs[r].double() / probs[r].sum(), atol=0.01, rtol=0)
    assert (draws[0] != 1).all() and (draws[1] != 2).all()
    # without replacement: distinct categories, nonzero weights before zero ones, first pick ~ the weights
    firsts = torch.multinomial(p[0].expand(3000, 4), 3).cpu()
    assert (firsts.sort(1).values == torch.tensor([0, 2, 3])).all()
    freq = torch.bincount(firsts[:, 0], minlength=4).double() / 3000
    torch.testing.assert_close(freq, probs[0].double(), atol=0.03, rtol=0)
    full = torch.multinomial(npu(torch.rand(5, 50)), 50).cpu()
    assert (full.sort(1).values == torch.arange(50)).all()
    out = torch.empty(0, dtype=torch.int64, device=NPU)
    torch.multinomial(p, 2, out=out)
    assert out.shape == (2, 2)
    assert torch.multinomial(npu(torch.ones(0, 3)), 1).shape == (0, 1)
    for args in ((torch.ones(3), 4), (torch.ones(3), 0), (torch.ones(2, 3, 4), 1), (torch.zeros(3), 1),
                 (torch.tensor([1.0, -1.0]), 1, True), (torch.tensor([1.0, -1.0]), 2, True),
                 (torch.tensor([1.0, float("inf")]), 2, True), (torch.tensor([1.0, float("nan")]), 1),
                 (torch.tensor([1, 2]), 1), (torch.tensor([[1.0, 2.0], [0.0, 0.0]]), 1)):
        same_error(torch.multinomial, *args)


# --- FFT ------------------------------------------------------------------------------------------------------

FFT_LENGTHS = (1, 2, 7, 12, 16, 97, 250, 1024)


@pytest.mark.parametrize("n", FFT_LENGTHS)
def test_fft_1d_matches_cpu(n):
    g = torch.Generator().manual_seed(n)
    x64 = torch.randn(3, n, dtype=torch.float64, generator=g)
    z64 = torch.complex(x64, torch.randn(3, n, dtype=torch.float64, generator=g))
    for x in (x64, x64.float(), z64, z64.to(torch.complex64)):
        tol = {} if x.dtype in (torch.float64, torch.complex128) else {"rtol": 1e-4, "atol": 1e-4 * math.sqrt(n)}
        for norm in (None, "ortho", "forward"):
            for fn in (torch.fft.fft, torch.fft.ifft):
                close(fn(npu(x), norm=norm), fn(x, norm=norm), **tol)
            if not x.is_complex():
                close(torch.fft.rfft(npu(x), norm=norm), torch.fft.rfft(x, norm=norm), **tol)
                close(torch.fft.ihfft(npu(x), norm=norm), torch.fft.ihfft(x, norm=norm), **tol)
            else:
                for m in (n, 2 * n - 1, max(2 * (n - 1), 1)):
                    close(torch.fft.irfft(npu(x), m, norm=norm), torch.fft.irfft(x, m, norm=norm), **tol)
                    close(torch.fft.hfft(npu(x), m, norm=norm), torch.fft.hfft(x, m, norm=norm), **tol)


def test_fft_layouts_conj_and_out():
    g = torch.Generator().manual_seed(9)
    z = torch.randn(6, 10, 2, dtype=torch.float64, generator=g)
    zc = torch.view_as_complex(z)
    big = npu(zc)
    # strided/offset input, a conjugated (lazy conj bit) input, padding and truncating n, an inner dim
    close(torch.fft.fft(big[1:, ::2], dim=0), torch.fft.fft(zc[1:, ::2], dim=0))
    close(torch.fft.fft(big.conj(), dim=1), torch.fft.fft(zc.conj(), dim=1))
    close(torch.fft.ifft(big.t(), n=13), torch.fft.ifft(zc.t(), n=13))
    close(torch.fft.fft(big, n=4, dim=0), torch.fft.fft(zc, n=4, dim=0))
    close(torch.fft.irfft(big.conj()), torch.fft.irfft(zc.conj()))
    r = torch.randn(4, 5, 6, dtype=torch.float64, generator=g)
    rr = npu(r)
    close(torch.fft.rfftn(rr.transpose(0, 2)), torch.fft.rfftn(r.transpose(0, 2)))
    close(torch.fft.rfft2(rr, s=(3, 8), dim=(2, 0)), torch.fft.rfft2(r, s=(3, 8), dim=(2, 0)))
    spec = torch.fft.rfftn(r)
    close(torch.fft.irfftn(npu(spec), s=r.shape), torch.fft.irfftn(spec, s=r.shape))
    close(torch.fft.fftn(npu(spec), dim=(0, 2)), torch.fft.fftn(spec, dim=(0, 2)))
    close(torch.fft.hfftn(npu(spec), s=(4, 5, 9)), torch.fft.hfftn(spec, s=(4, 5, 9)))
    close(torch.fft.fftshift(rr, dim=(0, 2)), torch.fft.fftshift(r, dim=(0, 2)))
    close(torch.fft.ifftshift(rr), torch.fft.ifftshift(r))
    before = big.cpu().clone()
    out = torch.empty(0, dtype=torch.complex128, device=NPU)
    torch.fft.fft(big, out=out)
    close(out, torch.fft.fft(zc))
    out = torch.empty(0, dtype=torch.complex128, device=NPU)
    torch.fft.rfft(rr, out=out)
    close(out, torch.fft.rfft(r))
    out = torch.empty(0, dtype=torch.float64, device=NPU)
    torch.fft.irfft(big, out=out)
    close(out, torch.fft.irfft(zc))
    assert torch.equal(big.cpu(), before)


def test_fft_primitives_direct():
    g = torch.Generator().manual_seed(11)
    x = torch.randn(3, 6, 5, dtype=torch.float64, generator=g)
    z = torch.randn(3, 6, 5, dtype=torch.complex128, generator=g)
    for norm in (0, 1, 2):
        for onesided in (True, False):
            close(torch.ops.aten._fft_r2c(npu(x), [0, 2], norm, onesided), torch.ops.aten._fft_r2c(x, [0, 2], norm,
                                                                                                   onesided))
        for forward in (True, False):
            close(torch.ops.aten._fft_c2c(npu(z), [2, 1], norm, forward), torch.ops.aten._fft_c2c(z, [2, 1], norm,
                                                                                                  forward))
        for last in (8, 9):
            close(torch.ops.aten._fft_c2r(npu(z), [1, 2], norm, last), torch.ops.aten._fft_c2r(z[..., :last // 2 + 1],
                                                                                               [1, 2], norm, last))


def test_fft_backward_matches_cpu():
    g = torch.Generator().manual_seed(12)
    x = torch.randn(4, 9, dtype=torch.float64, generator=g)
    z = torch.randn(4, 9, dtype=torch.complex128, generator=g)
    funcs = [lambda a: torch.fft.rfft(a, norm="ortho").imag.pow(2).sum(), lambda a: torch.fft.fft2(a).real.pow(2).sum(),
             lambda a: torch.fft.ihfft(a).imag.sum(), lambda a: torch.fft.irfft(a, 16).pow(2).sum(),
             lambda a: torch.fft.hfft(a, 11).sum(), lambda a: torch.fft.ifftn(a).imag.pow(3).sum()]
    for f in funcs:
        for inp in (x, z):
            try:
                cpu_a = inp.clone().requires_grad_()
                f(cpu_a).backward()
            except RuntimeError:  # a real-only or complex-only transform
                continue
            a = npu(inp).requires_grad_()
            f(a).backward()
            close(a.grad, cpu_a.grad)


def test_module_still_imports():
    assert "aten::_fft_r2c" in npu_lab.ops.CLAIMED and "aten::roll" in npu_lab.ops.CLAIMED


def _same_error_on(build) -> None:
    """build(device) raises the same exception type and message on the npu as on the CPU."""
    with pytest.raises(Exception) as cpu:  # noqa: PT011 - the CPU's exception is what we compare with
        build("cpu")
    with pytest.raises(type(cpu.value)) as dev:
        build(NPU)
    assert str(dev.value).split("\n")[0] == str(cpu.value).split("\n")[0]


def test_out_dtype_errors():
    x, i = torch.randn(3, 4), torch.tensor([[0, 1]])

    def o(dev, dtype=torch.int64):
        return torch.empty(0, dtype=dtype, device=dev)

    _same_error_on(lambda d: torch.scatter_reduce(x.to(d), 0, i.to(d), x.to(d), "sum", out=o(d)))
    _same_error_on(lambda d: torch.index_reduce(x.to(d), 0, i[0, :1].to(d), x[:1].to(d), "prod", out=o(d)))
    _same_error_on(lambda d: torch.index_copy(x.to(d), 0, i[0, :1].to(d), x[:1].to(d), out=o(d)))
    _same_error_on(lambda d: torch.take(x.to(d), i.to(d), out=o(d)))
    _same_error_on(lambda d: torch.nonzero_static(x.to(d), size=2, out=o(d, torch.int32)))
    _same_error_on(lambda d: torch.multinomial(x.abs().to(d), 2, out=o(d, torch.int32)))
    # the FFT primitives' out= casts, as the CPU's do
    out = o(NPU, torch.complex128)
    torch.ops.aten._fft_r2c(npu(x), [1], 0, True, out=out)
    close(out, torch.ops.aten._fft_r2c(x, [1], 0, True).to(torch.complex128))


def test_unhandled_cases_defer_to_the_fallback():
    z = torch.randn(4, dtype=torch.complex64)
    idx = torch.tensor([0, 1, 1, 0])
    prev = npu_lab.cpu_fallback_enabled()
    try:
        npu_lab.set_cpu_fallback(False)
        with pytest.raises(NotImplementedError, match="Could not run 'aten::scatter_reduce.two_out'"):
            npu(z).scatter_reduce(0, npu(idx), npu(z), "sum")
        npu_lab.set_cpu_fallback(True)
        with warnings.catch_warnings():  # the fallback warns once per operator
            warnings.simplefilter("ignore")
            close(npu(z).scatter_reduce(0, npu(idx), npu(z), "sum"), z.scatter_reduce(0, idx, z, "sum"))
    finally:
        npu_lab.set_cpu_fallback(prev)
