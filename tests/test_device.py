"""The npu device as a learner meets it: names, moves, factories, torch.npu."""

import importlib

import pytest
import torch

import npu_lab


def test_device_names():
    assert torch.device("npu").type == "npu"
    assert torch.device("npu:0").index == 0
    assert torch._C._get_privateuse1_backend_name() == "npu"


def test_import_is_idempotent():
    before = len(npu_lab.claimed_ops())
    importlib.reload(npu_lab)
    npu_lab._registration.register()
    assert len(npu_lab.claimed_ops()) == before
    assert (torch.ones(2, device="npu") + 1).cpu().tolist() == [2.0, 2.0]


def test_to_and_back():
    x = torch.randn(3, 4)
    a = x.to("npu")
    assert a.device == torch.device("npu:0")
    assert a.is_npu and not x.is_npu
    assert torch.equal(a.cpu(), x)
    assert torch.equal(x.npu().cpu(), x)
    assert torch.equal(x.to("npu:0").to("cpu"), x)


def test_dtype_conversion_on_move():
    x = torch.arange(5)
    a = x.to("npu", dtype=torch.float32)
    assert a.dtype == torch.float32
    assert a.cpu().tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert a.to(torch.int32).cpu().dtype == torch.int32


@pytest.mark.parametrize(
    "factory",
    [
        lambda: torch.zeros(2, 3, device="npu"),
        lambda: torch.ones(2, 3, device="npu"),
        lambda: torch.full((2, 3), 7.5, device="npu"),
        lambda: torch.empty(2, 3, device="npu").fill_(1.0),
        lambda: torch.zeros_like(torch.ones(2, 3, device="npu")),
        lambda: torch.ones_like(torch.ones(2, 3, device="npu")),
    ],
)
def test_factories(factory):
    t = factory()
    assert t.device.type == "npu" and t.shape == (2, 3)
    assert torch.isfinite(t.cpu()).all()


def test_factory_values():
    assert torch.full((2,), 3.0, device="npu").cpu().tolist() == [3.0, 3.0]
    assert torch.zeros(3, dtype=torch.int64, device="npu").cpu().tolist() == [0, 0, 0]
    assert torch.ones(2, dtype=torch.bool, device="npu").cpu().tolist() == [True, True]


def test_model_to_npu():
    m = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU())
    m.to("npu")
    assert all(p.device.type == "npu" for p in m.parameters())
    assert all(isinstance(p, torch.nn.Parameter) for p in m.parameters())
    out = m(torch.randn(2, 4, device="npu"))
    assert out.device.type == "npu" and out.shape == (2, 3)


def test_torch_npu_module():
    npu = torch.npu
    assert npu.is_available() and npu.device_count() == 2  # NPU_LAB_DEVICES, default 2
    assert npu.current_device() == 0
    npu.set_device(0)
    npu.set_device("npu:0")
    with npu.device(1):
        assert npu.current_device() == 1
        assert torch.empty(3, device="npu").device == torch.device("npu:1")
    assert npu.current_device() == 0
    with pytest.raises(RuntimeError, match=r"The device index is out of range. It must be in \[0, 2\), but got 2"):
        npu.set_device(2)
    npu.synchronize()
    props = npu.get_device_properties(0)
    assert props.total_memory > 0 and props["total_memory"] == props.total_memory


def test_item_and_tolist():
    t = torch.tensor([1.5, 2.5]).npu()
    assert t.sum().item() == 4.0
    assert t.tolist() == [1.5, 2.5]


def test_printing():
    t = torch.arange(4.0).npu()
    assert repr(t) == "tensor([0., 1., 2., 3.], device='npu:0')"


def test_jit_trace_on_npu_keeps_device_counters_plain_numbers():
    """Under torch.jit.trace sizes are traced tensors; the clock and counters must stay ints/floats."""
    import warnings

    from npu_lab.device import clock

    m = torch.nn.Linear(4, 3).to("npu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = torch.jit.trace(m, torch.randn(2, 4, device="npu"))
    traced(torch.randn(5, 4, device="npu")).cpu()
    assert isinstance(clock.clock(0).now(0), float)
    assert all(isinstance(v, int) for v in npu_lab.transfer_stats().values())
    assert all(isinstance(v, int) for v in torch.npu.memory_stats().values())


def test_jit_trace_on_npu_warns_only_about_the_users_own_code():
    """Tracing a branch on an npu value: the one TracerWarning points at the model, none at npu_lab."""
    import warnings

    def branchy(x):
        return torch.relu(x) if x.sum() > 0 else -x

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        traced = torch.jit.trace(branchy, torch.ones(3, device="npu"), check_trace=False)
    tracer = [w for w in caught if issubclass(w.category, torch.jit.TracerWarning)]
    assert [w.filename for w in tracer] == [__file__], [(w.filename, str(w.message)[:60]) for w in tracer]
    assert "aten::numel" not in str(traced.graph)
    assert traced(-torch.ones(3, device="npu")).cpu().tolist() == [0.0, 0.0, 0.0]  # the frozen relu branch


def test_backward_runs_on_the_calling_thread():
    """npu_lab routes the npu's backward to the caller's thread (one OpenMP team, not two)."""
    import threading

    seen = []
    x = torch.randn(4, device="npu", requires_grad=True)
    x.register_hook(lambda g: seen.append(threading.current_thread() is threading.main_thread()))
    (x * 2).sum().backward()
    assert seen == [True]
    torch.testing.assert_close(x.grad.cpu(), torch.full((4,), 2.0))
    assert not torch.autograd.is_multithreading_enabled()


def test_npu_kernels_leave_torchs_cpu_thread_count_alone():
    """numba's OpenMP pool, started by the first parallel npu kernel, used to set torch's thread count to its
    own (NUMBA_NUM_THREADS); npu_lab starts it at import and puts torch's count back."""
    import json
    import os
    import subprocess
    import sys

    code = ("import json, torch, numba, npu_lab\n"
            "before = torch.get_num_threads()\n"
            "x = torch.randn(512, 512, device='npu'); (x @ x).sum().item(); (x * 2).sum().item()\n"
            "print(json.dumps([before, torch.get_num_threads(), numba.get_num_threads()]))")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "3"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [1, 1, 3]
