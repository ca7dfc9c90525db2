"""torch.save / torch.load / deepcopy of npu tensors and modules."""

import copy
import io

import torch


def _roundtrip(obj, **load_kwargs):
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf, **load_kwargs)


def test_tensor_roundtrip_stays_on_npu():
    x = torch.randn(3, 4)
    t = _roundtrip(x.npu())
    assert t.device.type == "npu" and torch.equal(t.cpu(), x)


def test_map_location_cpu():
    x = torch.randn(5)
    t = _roundtrip(x.npu(), map_location="cpu")
    assert t.device.type == "cpu" and torch.equal(t, x)


def test_map_location_npu_from_cpu_file():
    x = torch.randn(6)
    t = _roundtrip({"x": x, "v": x[1:4]}, map_location="npu")
    assert t["x"].device.type == "npu" and torch.equal(t["x"].cpu(), x)
    assert torch.equal(t["v"].cpu(), x[1:4])


def test_state_dict_roundtrip():
    m = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4)).npu()
    sd = _roundtrip(m.state_dict())
    assert all(v.device.type == "npu" for v in sd.values())
    m2 = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    m2.load_state_dict(_roundtrip(m.state_dict(), map_location="cpu"))
    for (k, a), (_, b) in zip(m.state_dict().items(), m2.state_dict().items()):
        assert torch.equal(a.cpu(), b), k


def test_whole_module_and_requires_grad():
    m = torch.nn.Linear(2, 2).npu()
    m2 = _roundtrip(m, weights_only=False)
    assert isinstance(m2.weight, torch.nn.Parameter) and m2.weight.requires_grad
    assert m2.weight.device.type == "npu"
    assert torch.equal(m2.weight.cpu(), m.weight.cpu())


def test_deepcopy_model():
    m = torch.nn.Linear(3, 2).npu()
    m2 = copy.deepcopy(m)
    assert m2.weight.device.type == "npu"
    assert torch.equal(m2.weight.cpu(), m.weight.cpu())
    with torch.no_grad():
        m2.weight.add_(1)
    assert not torch.equal(m2.weight.cpu(), m.weight.cpu())


def test_deepcopy_of_npu_tensors_and_modules_with_buffers():
    import copy

    t = torch.randn(3, device="npu", requires_grad=True)
    u = copy.deepcopy(t)
    assert u.device.type == "npu" and u.requires_grad and u.is_leaf
    assert torch.equal(u.detach().cpu(), t.detach().cpu())
    u.data.add_(1)
    assert not torch.equal(u.detach().cpu(), t.detach().cpu())  # a copy, not an alias
    bn = torch.nn.BatchNorm1d(4).to("npu")
    bn(torch.randn(8, 4, device="npu"))
    clone = copy.deepcopy(bn)
    assert torch.equal(clone.running_mean.cpu(), bn.running_mean.cpu())
    assert clone.num_batches_tracked.item() == 1
    shared = {"a": t, "b": t}
    copied = copy.deepcopy(shared)
    assert copied["a"] is copied["b"]  # the memo keeps identity


def test_saved_views_load_as_views_and_keep_sharing():
    base = torch.arange(12.0, device="npu")
    views = {"base": base, "row": base.view(3, 4)[1], "strided": base[::3]}
    for loc in (None, "npu", "cpu"):
        got = _roundtrip(views, map_location=loc)
        dev = "cpu" if loc == "cpu" else "npu"
        assert all(t.device.type == dev for t in got.values())
        ptrs = {t.untyped_storage().data_ptr() for t in got.values()}
        assert len(ptrs) == 1, loc  # one storage, as when saved
        got["base"][4] = -1.0
        assert got["row"][0].item() == -1.0  # writes through the base are seen by the view
        assert got["strided"].stride() == (3,) and got["strided"].tolist() == [0.0, 3.0, 6.0, 9.0]


def test_map_location_moves_cpu_files_to_a_chosen_device():
    got = _roundtrip({"a": torch.ones(2), "b": torch.zeros(3)}, map_location="npu:1")
    assert {t.device for t in got.values()} == {torch.device("npu:1")}


def test_jit_save_and_load_of_npu_modules(tmp_path):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit's deprecation warning
        model = torch.nn.Linear(3, 2).to("npu")
        scripted = torch.jit.script(model)
        path = tmp_path / "m.pt"
        torch.jit.save(scripted, str(path))
        on_cpu = torch.jit.load(str(path), map_location="cpu")
        on_npu = torch.jit.load(str(path), map_location="npu")
    torch.testing.assert_close(on_cpu.weight, model.weight.detach().cpu())
    assert on_npu.weight.device.type == "npu"
    torch.testing.assert_close(on_npu.weight.cpu(), model.weight.detach().cpu())
    x = torch.randn(4, 3)
    torch.testing.assert_close(on_npu(x.npu()).cpu(), model(x.npu()).detach().cpu())


def test_export_save_and_load_of_npu_programs(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2).to("npu")
    program = torch.export.export(model, (torch.randn(1, 3, device="npu"),))
    path = tmp_path / "m.pt2"
    torch.export.save(program, str(path))
    loaded = torch.export.load(str(path))
    w = loaded.state_dict["weight"]
    assert w.device.type == "npu"
    torch.testing.assert_close(w.cpu(), model.weight.detach().cpu())
    x = torch.randn(1, 3, device="npu")
    torch.testing.assert_close(loaded.module()(x).cpu(), model(x).detach().cpu())


def test_dlpack_in_and_out():
    x = torch.arange(6.0).reshape(2, 3).npu()
    capsule_tensor = torch.from_dlpack(x)  # npu -> npu, zero copy
    assert capsule_tensor.device == x.device and capsule_tensor.data_ptr() == x.data_ptr()
    cpu = torch.arange(4.0)
    back = torch.from_dlpack(torch.utils.dlpack.to_dlpack(cpu))
    assert back.data_ptr() == cpu.data_ptr()
