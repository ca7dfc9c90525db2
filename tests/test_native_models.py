"""Models nobody here wrote: tiny Hugging Face ``transformers`` GPT-2 and BERT on npu.

They check what a real library expects of a PyTorch device: ``model.to("npu")`` keeps
Parameter objects and tied weights, training matches the CPU step by step, a model on
``npu:1`` lives (and is accounted) on device 1, memory returns to its baseline, and
cross-device mistakes and copies behave as on CUDA. All configs are random-init, no downloads.
"""

import copy
import gc

import pytest
import torch
import transformers
from transformers import BertConfig, BertForMaskedLM, GPT2Config, GPT2LMHeadModel

import npu_lab
from npu_lab.device.memory import round_size

VOCAB = 100
SEQ = 16
BATCH = 4
STEPS = 5


@pytest.fixture(autouse=True, scope="module")
def _quiet_transformers():
    # Tiny configs make transformers warn about its defaults (loss_type etc.); keep the output readable.
    prev = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()
    yield
    transformers.logging.set_verbosity(prev)


def _gpt2() -> GPT2LMHeadModel:
    # Dropout 0: the CPU and the npu have different random streams, and the comparison must be exact.
    config = GPT2Config(
        n_layer=2,
        n_embd=32,
        n_head=2,
        vocab_size=VOCAB,
        n_positions=32,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=0,
        eos_token_id=0,
    )
    return GPT2LMHeadModel(config)


def _bert() -> BertForMaskedLM:
    config = BertConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=32,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    return BertForMaskedLM(config)


MODELS = {"gpt2": _gpt2, "bert": _bert}


def _batches(n: int = STEPS) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1234)
    return [torch.randint(0, VOCAB, (BATCH, SEQ), generator=g) for _ in range(n)]


def _optimizer(name: str, params) -> torch.optim.Optimizer:
    if name == "sgd":
        return torch.optim.SGD(params, lr=0.1, momentum=0.9)
    return torch.optim.AdamW(params, lr=1e-2)


def _train(model, opt, batches, device) -> tuple[list[float], torch.Tensor]:
    """Train on ``batches``; return the losses and the input-embedding gradient after the first step."""
    losses, first_grad = [], None
    for i, ids in enumerate(batches):
        opt.zero_grad()
        ids = ids.to(device)
        out = model(input_ids=ids, labels=ids)
        out.loss.backward()
        if i == 0:
            first_grad = model.get_input_embeddings().weight.grad.detach().cpu().clone()
        opt.step()
        losses.append(out.loss.item())
    return losses, first_grad


def _allocated() -> tuple[int, int]:
    return torch.npu.memory_allocated(0), torch.npu.memory_allocated(1)


def _storage_bytes(model) -> int:
    """Bytes the caching allocator hands out for the model's tensors: one rounded block per storage."""
    storages = {
        t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in (*model.parameters(), *model.buffers())
    }
    return sum(round_size(n) for n in storages.values())


# --------------------------------------------------------------------------------------------
# a. tied weights and Parameter identity survive .to("npu")
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", MODELS)
def test_tied_weights_and_parameter_identity_survive_to_npu(name):
    model = MODELS[name]()
    emb, head = model.get_input_embeddings(), model.get_output_embeddings()
    assert head.weight is emb.weight, "the tiny config should tie the LM head to the embedding"
    params = list(model.parameters())
    n_all = len(list(model.named_parameters(remove_duplicate=False)))
    ids = [id(p) for p in params]
    values = [p.detach().clone() for p in params]

    moved = model.to("npu")

    assert moved is model
    after = list(model.parameters())
    assert len(after) == len(params)
    assert len(list(model.named_parameters(remove_duplicate=False))) == n_all
    assert [id(p) for p in after] == ids, "model.to('npu') replaced Parameter objects"
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
    assert model.get_input_embeddings().weight is emb.weight
    assert head.weight.data_ptr() == emb.weight.data_ptr()
    for p, v in zip(after, values):
        assert isinstance(p, torch.nn.Parameter) and p.requires_grad
        assert p.device == torch.device("npu", 0)
        assert torch.equal(p.detach().cpu(), v)
    if name == "bert":  # BERT also ties the decoder bias to cls.predictions.bias
        assert model.cls.predictions.decoder.bias is model.cls.predictions.bias


def test_param_data_assignment_moves_a_cpu_parameter_to_npu():
    p = torch.nn.Parameter(torch.randn(3, 4))
    pid = id(p)
    new = torch.randn(3, 4, device="npu")
    p.data = new
    assert id(p) == pid and isinstance(p, torch.nn.Parameter) and p.requires_grad
    assert p.device == torch.device("npu", 0)
    assert p.data_ptr() == new.data_ptr(), ".data should share the assigned tensor's storage"
    assert torch.equal(p.detach().cpu(), new.cpu())
    (p * 2).sum().backward()
    assert p.grad.device == p.device
    assert torch.equal(p.grad.cpu(), torch.full((3, 4), 2.0))


# --------------------------------------------------------------------------------------------
# b. a tied-embedding language model trains on npu like on the CPU
# --------------------------------------------------------------------------------------------

# float32: the npu kernels reduce in a different order from the CPU's, so each op carries a
# relative error of a few ulp (eps = 1.2e-7) times sqrt(reduction length); 5 smooth SGD steps
# amplify it mildly. rtol 1e-4 / atol 1e-5 leaves ~100x head-room over that and still catches any
# wrong kernel, which is off by O(1e-2) or more. (Measured: losses <= 1e-6, params <= 1e-7.)
#
# AdamW divides each element's gradient by sqrt(v): where the true gradient is ~0 (the attention
# key bias has an exactly-zero gradient, softmax ignores a per-row shift) the step is rounding
# noise normalised to about lr in size, so it is not an ulp-level quantity. Parameters are then
# compared to 5e-4 = 1% of the largest possible displacement (STEPS * lr); a wrong kernel moves
# elements by O(lr) per step. Losses keep the tight tolerance. (Measured: params <= 7.5e-5.)
CASES = [("gpt2", "sgd", 1e-5), ("bert", "sgd", 1e-5), ("gpt2", "adamw", 5e-4)]


@pytest.mark.parametrize(("name", "optim", "param_atol"), CASES, ids=[f"{n}-{o}" for n, o, _ in CASES])
def test_tied_lm_trains_like_cpu(name, optim, param_atol, fallback_off):
    fell_back_before = npu_lab.fallback_report()
    cpu = MODELS[name]()
    dev = copy.deepcopy(cpu).to("npu")
    init = [p.detach().clone() for p in cpu.parameters()]
    batches = _batches()

    cpu_losses, cpu_grad = _train(cpu, _optimizer(optim, cpu.parameters()), batches, "cpu")
    npu_losses, npu_grad = _train(dev, _optimizer(optim, dev.parameters()), batches, "npu")

    # Fallback was off, so a missing operator would have raised; the record must not have grown.
    fell_back = {
        k: v - fell_back_before.get(k, 0)
        for k, v in npu_lab.fallback_report().items()
        if v != fell_back_before.get(k, 0)
    }
    print(f"{name}/{optim}: operators that fell back to the CPU: {sorted(fell_back) or 'none'}")
    assert fell_back == {}

    loss_diff = max(abs(a - b) for a, b in zip(cpu_losses, npu_losses))
    param_diff = max(
        (p.detach() - q.detach().cpu()).abs().max().item() for p, q in zip(cpu.parameters(), dev.parameters())
    )
    print(f"{name}/{optim}: max |loss diff| {loss_diff:.3g}, max |param diff| {param_diff:.3g}")
    for step, (a, b) in enumerate(zip(cpu_losses, npu_losses)):
        assert b == pytest.approx(a, rel=1e-4, abs=1e-5), f"step {step}: cpu {a} npu {b}"

    # The tied weight's gradient sums the embedding lookup's and the LM head's contributions.
    assert cpu_grad.abs().max() > 1e-3
    torch.testing.assert_close(npu_grad, cpu_grad, rtol=1e-4, atol=1e-5)

    assert dev.get_output_embeddings().weight is dev.get_input_embeddings().weight
    assert dev.get_input_embeddings().weight.device == torch.device("npu", 0)
    moved = max((p.detach() - p0).abs().max().item() for p, p0 in zip(cpu.parameters(), init))
    assert moved > 100 * param_atol, "training should move the parameters well beyond the tolerance"
    for (pname, p), q in zip(cpu.named_parameters(), dev.parameters()):
        torch.testing.assert_close(q.detach().cpu(), p.detach(), rtol=1e-4, atol=param_atol, msg=pname)


# --------------------------------------------------------------------------------------------
# c. a model on npu:1 trains on device 1, and device 0 is never touched
# --------------------------------------------------------------------------------------------


def test_gpt2_on_npu1_trains_on_device_1(fallback_off):
    gc.collect()
    base0, base1 = _allocated()
    current = torch.npu.current_device()
    torch.npu.reset_peak_memory_stats(0)
    dev1 = torch.device("npu", 1)

    cpu = _gpt2()
    model = copy.deepcopy(cpu).to(dev1)
    assert torch.npu.memory_allocated(1) - base1 == _storage_bytes(model) > 0
    assert torch.npu.memory_allocated(0) == base0

    cpu_opt = torch.optim.SGD(cpu.parameters(), lr=0.1, momentum=0.9)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    cpu_losses, _ = _train(cpu, cpu_opt, _batches(3), "cpu")
    losses = []
    for ids in _batches(3):
        opt.zero_grad()
        ids = ids.to(dev1)
        out = model(input_ids=ids, labels=ids)
        assert out.logits.device == dev1 and out.loss.device == dev1
        during = torch.npu.memory_allocated(1)
        out.loss.backward()
        assert all(p.grad is not None and p.grad.device == dev1 for p in model.parameters())
        opt.step()
        losses.append(out.loss.item())
        assert during > base1 + _storage_bytes(model), "activations should be accounted on npu:1"
        assert torch.npu.memory_allocated(0) == base0

    assert all(s.device == dev1 for st in opt.state.values() for s in st.values())
    assert torch.npu.max_memory_allocated(0) == base0, "nothing may be allocated on npu:0, not even briefly"
    assert torch.npu.current_device() == current
    for step, (a, b) in enumerate(zip(cpu_losses, losses)):
        assert b == pytest.approx(a, rel=1e-4, abs=1e-5), f"step {step}: cpu {a} npu:1 {b}"
    for (pname, p), q in zip(cpu.named_parameters(), model.parameters()):
        assert q.device == dev1
        torch.testing.assert_close(q.detach().cpu(), p.detach(), rtol=1e-4, atol=1e-5, msg=pname)


# --------------------------------------------------------------------------------------------
# d. memory returns to its baseline on both devices
# --------------------------------------------------------------------------------------------


def test_memory_returns_to_baseline_after_training(fallback_off):
    gc.collect()
    base = _allocated()
    torch.npu.reset_peak_memory_stats(0)
    torch.npu.reset_peak_memory_stats(1)

    model0 = _gpt2().to("npu:0")
    opt0 = torch.optim.AdamW(model0.parameters(), lr=1e-2)  # optimizer state: exp_avg, exp_avg_sq
    model1 = _bert().to("npu:1")
    opt1 = torch.optim.SGD(model1.parameters(), lr=0.1, momentum=0.9)  # momentum buffers
    loss0, _ = _train(model0, opt0, _batches(2), "npu:0")
    loss1, _ = _train(model1, opt1, _batches(2), "npu:1")
    held = _allocated()
    assert held[0] > base[0] and held[1] > base[1]
    assert torch.npu.max_memory_allocated(0) > held[0] and torch.npu.max_memory_allocated(1) > held[1]

    del model0, opt0, model1, opt1
    gc.collect()
    assert _allocated() == base
    assert all(isinstance(v, float) for v in loss0 + loss1)


# --------------------------------------------------------------------------------------------
# e. mixing devices: PyTorch's own error; peer copies move and count the exact bytes
# --------------------------------------------------------------------------------------------

MIXED = {
    "add": lambda a, b: a + b,
    "matmul": lambda a, b: a @ b,
    "linear": lambda a, b: torch.nn.functional.linear(a, b),
    "cat": lambda a, b: torch.cat([a, b]),
    "add_": lambda a, b: a.add_(b),
}


@pytest.mark.parametrize("op", MIXED)
def test_mixing_devices_raises_pytorch_error(op):
    a = torch.ones(2, 2, device="npu:0")
    b = torch.ones(2, 2, device="npu:1")
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device") as err:
        MIXED[op](a, b)
    assert "npu:0" in str(err.value) and "npu:1" in str(err.value)
    assert torch.equal(a.cpu(), torch.ones(2, 2))  # an in-place op that raised left its input alone


def test_the_exact_example_raises():
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.ones(2, device="npu:0") + torch.ones(2, device="npu:1")


def _delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before[k] for k in after}


@pytest.mark.parametrize(("src", "dst"), [(0, 1), (1, 0)])
def test_peer_copy_moves_and_counts_exact_bytes(src, dst):
    g = torch.Generator().manual_seed(7)
    host = torch.randint(0, 256, (4093,), dtype=torch.uint8, generator=g)  # odd size: no rounding
    t = host.to(f"npu:{src}")
    s_before, d_before = npu_lab.transfer_stats(src), npu_lab.transfer_stats(dst)
    dst_mem = torch.npu.memory_allocated(dst)

    u = t.to(f"npu:{dst}")

    s_delta = _delta(s_before, npu_lab.transfer_stats(src))
    d_delta = _delta(d_before, npu_lab.transfer_stats(dst))
    expected = {k: 0 for k in s_delta} | {"peer_bytes": 4093, "peer_copies": 1}
    assert s_delta == expected, "one peer copy, not staged through the host"
    assert d_delta == expected
    assert u.device == torch.device("npu", dst)
    assert torch.npu.memory_allocated(dst) - dst_mem == round_size(4093)
    assert torch.equal(u.cpu(), host)


def test_peer_copy_preserves_float_bit_patterns():
    special = torch.tensor([0.0, -0.0, float("inf"), float("-inf"), float("nan"), 1e-310, -1.5], dtype=torch.float64)
    t = special.to("npu:0")
    before = npu_lab.transfer_stats(1)
    dst = torch.empty(7, dtype=torch.float64, device="npu:1")
    dst.copy_(t)  # copy_ across devices is allowed, as on CUDA
    assert _delta(before, npu_lab.transfer_stats(1))["peer_bytes"] == special.nbytes == 56
    assert torch.equal(dst.cpu().view(torch.int64), special.view(torch.int64))
