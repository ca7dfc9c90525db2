"""Shared fixtures: every test sees a registered npu device and fixed seeds."""

import gc

import pytest
import torch

import npu_lab  # noqa: F401  (registers the device)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    torch.npu.manual_seed(0)
    yield


@pytest.fixture
def fresh_dynamo():
    """Forget Dynamo's compiled frames and the npu compiler's cache and records, before and after."""
    torch._dynamo.reset()
    npu_lab.compiler.reset()
    yield
    torch._dynamo.reset()


@pytest.fixture
def fallback_off():
    prev = npu_lab.cpu_fallback_enabled()
    npu_lab.set_cpu_fallback(False)
    yield
    npu_lab.set_cpu_fallback(prev)


@pytest.fixture
def clean_memory():
    """Collect garbage and return the baseline allocated bytes."""
    gc.collect()
    return torch.npu.memory_allocated()
