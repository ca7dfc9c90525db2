"""torch.save / torch.load / deepcopy of npu tensors and modules."""

import copy
import io

import pytest
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


def test_jit_save_refuses_npu_weights_and_writes_nothing(tmp_path):
    """TorchScript's C++ serializer cannot read npu storages: a clear error instead of empty weights."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit's deprecation warning
        scripted = torch.jit.script(torch.nn.Linear(3, 2).to("npu"))
        path = tmp_path / "m.pt"
        with pytest.raises(RuntimeError, match=r"torch.jit.save cannot save npu tensors \(weight, bias\)"):
            torch.jit.save(scripted, str(path))
        assert not path.exists()
        with pytest.raises(RuntimeError, match="cannot save npu tensors"):
            scripted.save_to_buffer()
        torch.jit.save(scripted.cpu(), str(path))  # the way the error suggests
        loaded = torch.jit.load(str(path))
    torch.testing.assert_close(loaded.weight, scripted.weight)


def test_export_save_refuses_npu_weights(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    program = torch.export.export(copy.deepcopy(model).to("npu"), (torch.randn(1, 3, device="npu"),))
    path = tmp_path / "m.pt2"
    with pytest.raises(RuntimeError, match="torch.export.save cannot save npu tensors"):
        torch.export.save(program, str(path))
    assert not path.exists()
    cpu_program = torch.export.export(model, (torch.randn(1, 3),))
    torch.export.save(cpu_program, str(path))
    torch.testing.assert_close(torch.export.load(str(path)).state_dict["weight"], model.weight)
