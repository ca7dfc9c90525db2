"""Deployment through ONNX (npu_lab/deploy.py): export an npu model, run it with ONNX Runtime."""

import pytest
import torch

from npu_lab import deploy, models


class AsModule(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


@pytest.fixture(scope="module")
def mlp_program():
    torch.manual_seed(0)
    model = models.mlp().npu().eval()
    x = torch.randn(8, 10, device="npu")
    return model, deploy.export_onnx(model, (x,), dynamic_batch=True)


def test_exported_mlp_matches_eager_for_any_batch(mlp_program):
    model, program = mlp_program
    session = deploy.onnx_session(program)
    for n in (8, 3):
        x = torch.randn(n, 10, device="npu")
        (out,) = deploy.run_onnx(session, x)
        torch.testing.assert_close(out, model(x).detach().cpu())


def test_listing_shows_onnx_operators(mlp_program):
    _, program = mlp_program
    listing = deploy.onnx_listing(program)
    assert listing.count("= Gemm(") == 3 and listing.count("= Relu(") == 2
    assert "input[batch, 10]" in listing and "0.weight[32, 10]" in listing
    assert "transB=1" in listing  # Gemm reads the (out, in) weight transposed


def test_torch_cond_becomes_an_onnx_if():
    def branchy_cond(x):
        return torch.cond(x.sum() > 0, lambda x: x.relu() * 2, lambda x: x.sin() - 1, (x,))

    pos = torch.rand(4, 10, device="npu") + 0.1
    program = deploy.export_onnx(AsModule(branchy_cond), (pos,))
    assert "= If(" in deploy.onnx_listing(program)
    for t in (pos, -pos):
        (out,) = deploy.run_onnx(program, t)
        want = t.relu() * 2 if t.sum() > 0 else t.sin() - 1
        torch.testing.assert_close(out, want.cpu())


def test_data_dependent_python_branch_is_refused():
    def branchy(x):
        if x.sum() > 0:
            return x.relu() * 2
        return x.sin() - 1

    with pytest.raises(torch.onnx.OnnxExporterError):
        deploy.export_onnx(AsModule(branchy), (torch.rand(4, 10, device="npu"),))


def test_bad_arguments(mlp_program):
    _, program = mlp_program
    with pytest.raises(TypeError, match="tuple"):
        deploy.export_onnx(models.mlp(), torch.randn(2, 10))
    with pytest.raises(ValueError, match="takes 1 inputs"):
        deploy.run_onnx(program, torch.randn(2, 10), torch.randn(2, 10))
