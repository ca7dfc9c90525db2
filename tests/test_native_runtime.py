"""The native runtime (npu_lab/csrc) as PyTorch's device-generic APIs see it.

torch.accelerator, torch.Stream/torch.Event, torch.Generator, pinned memory, autocast and
torch.profiler reach the npu only through the C++ hooks, device guard, allocator and
registrations, so each test here exercises one of them through PyTorch's public API.
"""

from __future__ import annotations

import json

import pytest
import torch

import npu_lab
from npu_lab.device import native


def test_storages_hold_real_bytes():
    t = torch.arange(6.0, device="npu")
    s = t.untyped_storage()
    assert s.nbytes() == 24 and s.data_ptr() != 0 and t.data_ptr() == s.data_ptr()
    v = t[2:]
    assert v.data_ptr() == t.data_ptr() + 8  # a view is an offset into the same bytes
    kind, device, base, size = native.load().pointer_attributes(v.data_ptr())
    assert (kind, device, base) == ("device", 0, t.data_ptr()) and size >= 24
    u = torch.UntypedStorage(16, device="npu")
    assert u.nbytes() == 16 and u.device == torch.device("npu:0")
    u.resize_(32)
    assert u.nbytes() == 32


def test_accelerator_api_sees_the_npu():
    assert torch.accelerator.is_available()
    assert torch.accelerator.current_accelerator() == torch.device("npu")
    assert torch.accelerator.device_count() == torch.npu.device_count() == 2
    with torch.accelerator.device_index(1):
        assert torch.accelerator.current_device_index() == 1 == torch.npu.current_device()
        assert torch.randn(2, device="npu").device.index == 1
    assert torch.accelerator.current_device_index() == 0
    before = torch.accelerator.memory_allocated(1)
    x = torch.empty(1000, device="npu:1")
    assert torch.accelerator.memory_allocated(1) - before == 4096 == torch.npu.memory_allocated(1) - before
    del x


def test_events_through_torch_event_and_torch_npu_event():
    start, end = torch.Event(device="npu", enable_timing=True), torch.npu.Event(enable_timing=True)
    a = torch.randn(128, 128, device="npu")
    start.record()
    a @ a
    end.record()
    end.synchronize()
    assert start.query() and end.query()
    assert start.event_id != end.event_id and start.event_id and end.event_id
    ms = end.elapsed_time(start) * -1  # a torch.npu.Event measures against a torch.Event too
    expected = (npu_lab.cost_model.event_us + npu_lab.cost_model.kernel_us(2 * 128**3, 3 * 128 * 128 * 4)) / 1000
    assert ms == pytest.approx(expected, rel=1e-9)
    plain = torch.Event(device="npu")
    plain.record()
    with pytest.raises(ValueError, match="enable_timing=True"):  # torch.Event's own check
        start.elapsed_time(plain)
    with pytest.raises(RuntimeError, match="enable_timing=True"):  # as torch.cuda.Event
        end.elapsed_time(plain)


def test_streams_are_torch_streams_with_their_own_clock():
    s = torch.Stream(device="npu")
    assert s.device == torch.device("npu:0") and s.stream_id > 0
    with s:  # torch.Stream is a context manager through the device guard
        assert torch.accelerator.current_stream().stream_id == s.stream_id
        torch.ones(10_000, device="npu").mul_(2)
    assert torch.accelerator.current_stream().stream_id == 0
    assert torch.npu.Stream._wrap(s).simulated_time_us > torch.npu.default_stream().simulated_time_us
    s.synchronize()
    torch.npu.synchronize()
    assert torch.npu.Stream._wrap(s).simulated_time_us == torch.npu.default_stream().simulated_time_us


def test_generators_default_and_new():
    g = torch.Generator(device="npu")
    g.manual_seed(7)
    state = g.get_state()
    a = torch.randn(5, device="npu", generator=g)
    g.set_state(state)
    b = torch.randn(5, device="npu", generator=g)
    assert torch.equal(a.cpu(), b.cpu())
    torch.npu.manual_seed(7)
    c = torch.randn(5, device="npu")  # the default generator with the same seed: the same numbers
    assert torch.equal(a.cpu(), c.cpu())
    assert torch.npu.default_generators[1].device == torch.device("npu:1")
    with pytest.raises(RuntimeError, match="Expected a 'npu' device type for generator"):
        torch.randn(3, device="npu", generator=torch.Generator())


def test_pinned_memory_and_non_blocking_copies():
    t = torch.randn(100)
    assert not t.is_pinned()
    p = t.pin_memory()
    assert p.is_pinned() and p[3:7].is_pinned() and torch.equal(p, t)
    kind, device, _base, _size = native.load().pointer_attributes(p.data_ptr())
    assert (kind, device) == ("pinned", -1)
    d = p.to("npu", non_blocking=True)
    back = torch.empty(100).pin_memory()
    back.copy_(d, non_blocking=True)
    torch.npu.synchronize()
    assert torch.equal(back, t)
    assert torch.UntypedStorage(8).pin_memory("npu").is_pinned("npu")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_autocast_runs_products_in_low_precision_and_reductions_in_float32(dtype):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))
    npu_model = torch.nn.Sequential(*[m for m in model]).to("npu")  # same Parameters, moved in place
    cpu_model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    cpu_model.load_state_dict({k: v.cpu() for k, v in npu_model.state_dict().items()})
    with torch.autocast("npu", dtype=dtype):
        out = npu_model(x.npu())
        loss = torch.nn.functional.cross_entropy(out, y.npu())
        soft = torch.softmax(out, -1)
    with torch.autocast("cpu", dtype=dtype):
        ref_out = cpu_model(x)
        ref_loss = torch.nn.functional.cross_entropy(ref_out, y)
    assert out.dtype == dtype == ref_out.dtype  # linear: lower precision
    assert loss.dtype == torch.float32 and soft.dtype == torch.float32  # fp32 policy
    torch.testing.assert_close(out.cpu().float(), ref_out.float(), atol=3e-2, rtol=3e-2)
    torch.testing.assert_close(loss.cpu(), ref_loss, atol=3e-2, rtol=3e-2)
    loss.backward()
    assert npu_model[0].weight.grad.dtype == torch.float32  # master weights stay float32
    assert "aten::mm" in native.load().autocast_policy("lower_precision_fp")
    assert "aten::softmax.int" in native.load().autocast_policy("fp32_set_opt_dtype")


def test_torch_profiler_sees_npu_kernels_with_nonnegative_times(tmp_path):
    from torch.profiler import ProfilerActivity, profile

    x = torch.randn(64, 64, device="npu")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        y = x @ x
        y.relu().cpu()
    device_events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.PrivateUse1]
    names = [e.name for e in device_events]
    assert "mm" in names and "memcpy DtoH" in names
    assert all(e.time_range.end >= e.time_range.start >= 0 for e in device_events)
    mm = next(e for e in device_events if e.name == "mm")
    expected_us = npu_lab.cost_model.kernel_us(2 * 64**3, 3 * 64 * 64 * 4)
    assert mm.time_range.elapsed_us() == pytest.approx(expected_us, abs=1.0)  # the simulated time
    averages = {a.key: a for a in prof.key_averages()}
    assert averages["aten::mm"].device_time_total > 0  # linked to the operator that launched it
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    trace = json.loads(path.read_text())
    kernels = [e for e in trace["traceEvents"] if e.get("cat") == "kernel" and e.get("name") == "mm"]
    assert kernels and kernels[0]["dur"] > 0


def test_npu_lab_profile_still_sees_copies_and_memory():
    with npu_lab.profile() as prof:
        t = torch.randn(256).npu()
        (t * 2).cpu()
    assert prof.copy_bytes == 2 * 256 * 4
    assert any(m.kind == "alloc" for m in prof.memory)


def test_memory_on_device_one_is_its_own():
    torch.npu.empty_cache()
    base0, base1 = torch.npu.memory_allocated(0), torch.npu.memory_allocated(1)
    with torch.npu.device(1):
        t = torch.randn(4096, device="npu")
        u = t * 2
    assert u.device == torch.device("npu:1")
    assert torch.npu.memory_allocated(1) - base1 == 2 * 16384 and torch.npu.memory_allocated(0) == base0
    moved = u.to("npu:0")
    stats0, stats1 = npu_lab.transfer_stats(0), npu_lab.transfer_stats(1)
    assert stats0["peer_copies"] >= 1 and stats1["peer_copies"] >= 1
    assert torch.equal(moved.cpu(), u.cpu())
    del t, u, moved
    assert torch.npu.memory_allocated(1) == base1 and torch.npu.memory_allocated(0) == base0


def test_the_pure_python_prototype_shows_the_limits_chapter_8_describes():
    """npu_lab/device/prototype.py (a device registered from Python alone, in a fresh process) cannot do
    what the native runtime does: its storages hold no bytes, tied weights come apart, UntypedStorage
    crashes the interpreter."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(npu_lab.__file__).parent / "device" / "prototype.py"
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    out = run.stdout
    assert "back on the CPU: [0.0, 1.0, 2.0, 3.0]" in out, out
    assert "its storage: nbytes, data_ptr                  (0, 0)" in out, out
    assert "shallow-copy compatible with CPU tensors       False" in out, out
    assert "tied weights after .to(device): parameters     1 -> 2" in out, out
    assert "Could not run 'aten::add.out' with arguments from the 'proto' backend" in out, out
    assert run.returncode == -11, (run.returncode, run.stderr[-500:])  # UntypedStorage(16, device="proto"): SIGSEGV


def test_a_build_interrupted_while_it_held_torchs_lock_file_does_not_hang_the_next(tmp_path):
    """cpp_extension waits forever while its ``lock`` file exists; a build killed mid-way leaves it behind.

    The builder's OS lock is released by the kernel when its holder dies, and whoever takes it next removes the
    stale ``lock``. Checked on a directory of the test's own: touching the shared build directory's ``lock``
    would hang any other process building at that moment (it did, in a run with two test workers).
    """
    import subprocess
    import sys
    import threading

    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; from pathlib import Path; from npu_lab.device import native\n"
         "with native._builder_lock(Path(sys.argv[1])):\n"
         "    (Path(sys.argv[1]) / 'lock').touch()  # cpp_extension's mark, as in a build\n"
         "    print('holding', flush=True); time.sleep(600)\n", str(tmp_path)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "holding"
        holder.kill()  # the build is interrupted while it holds both locks
        holder.wait(timeout=30)
        assert (tmp_path / "lock").exists()
        taken = threading.Event()

        def take() -> None:
            with native._builder_lock(tmp_path):
                taken.set()

        thread = threading.Thread(target=take, daemon=True)
        thread.start()
        assert taken.wait(timeout=60), "the builder lock of a killed process was never released"
        assert not (tmp_path / "lock").exists(), "the stale cpp_extension lock file was left in place"
    finally:
        holder.kill()
