"""End to end: the reference models train on npu with the CPU's losses."""

import pytest
import torch

from npu_lab import models


def _compare_training(make, steps: int, optimizer: str = "sgd", lr: float = 0.05, tol: float = 1e-4,
                      skip: tuple[str, ...] = ()):
    torch.manual_seed(0)
    ref = make()
    npu_model = make()
    npu_model.load_state_dict(ref.state_dict())
    cpu_losses = models.train(ref, steps, "cpu", optimizer=optimizer, lr=lr)
    npu_losses = models.train(npu_model, steps, "npu", optimizer=optimizer, lr=lr)
    assert cpu_losses[-1] < cpu_losses[0], "the model should learn its fixed batch"
    for step, (a, b) in enumerate(zip(cpu_losses, npu_losses)):
        assert abs(a - b) <= tol * max(1.0, abs(a)), f"step {step}: cpu {a} npu {b}"
    for (name, p), q in zip(ref.state_dict().items(), npu_model.state_dict().values()):
        if name not in skip:
            torch.testing.assert_close(q.cpu(), p, rtol=1e-3, atol=1e-3, msg=name)


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_mlp_trains_like_cpu(optimizer):
    _compare_training(models.mlp, 10, optimizer, lr=0.01)


def test_cnn_trains_like_cpu():
    _compare_training(models.SmallCNN, 10, lr=0.01, tol=1e-3)


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_transformer_block_trains_like_cpu(optimizer):
    # The key part of qkv.bias cannot change attention (softmax ignores a per-row shift),
    # so its true gradient is 0 and both devices see rounding noise (~1e-11). AdamW divides
    # by sqrt(v) and turns that noise into full-size steps of random sign: those parameters
    # are not comparable under AdamW. The losses, which they cannot affect, still match.
    skip = ("qkv.bias",) if optimizer == "adamw" else ()
    _compare_training(models.TransformerBlock, 10, optimizer, lr=0.01, tol=1e-3, skip=skip)


def test_eval_mode_inference_matches():
    torch.manual_seed(0)
    cnn = models.SmallCNN()
    models.train(cnn, 2, "cpu", lr=0.01)
    cnn.eval()
    x, _ = models.example_batch(cnn, 4)
    ref = cnn(x)
    out = cnn.npu()(x.npu())
    torch.testing.assert_close(out.cpu(), ref, rtol=1e-4, atol=1e-4)
