"""Kernels cached on one machine and used on another are compiled again, never reused wrongly.

A home directory shared by two machines, or a Binder image built on one node and run on another,
carries the lab's caches to a CPU they were not made for: numba's machine code (``~/.cache/npu_lab``
and ``npu_lab/kernels/__pycache__``), the native runtime (``~/.cache/npu_lab/native``) and
TorchInductor's generated C++. Each test fills a cache in a process that targets another CPU
(``NUMBA_CPU_NAME`` / ``NUMBA_CPU_FEATURES``, ``ATEN_CPU_CAPABILITY``) and then uses it in a process
with this machine's own settings: the results must be right and nothing may crash.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(code: str, env: dict[str, str | None], *args: str, timeout: int = 600) -> dict:
    """Run ``code`` (with ``args``) in a fresh interpreter with ``env`` added (None: removed); it prints one JSON
    line last."""
    full = {k: v for k, v in {**os.environ, **env}.items() if v is not None}
    out = subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, env=full, capture_output=True, text=True,
                         timeout=timeout)
    assert out.returncode == 0, f"exit {out.returncode}\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}"
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture
def kernel_cache(tmp_path) -> dict[str, str]:
    """An empty kernel cache for the child processes, sharing this machine's build of the native runtime."""
    from npu_lab.device import native

    (tmp_path / "native").symlink_to(native.build_directory().parent, target_is_directory=True)
    return {"NPU_LAB_CACHE_DIR": str(tmp_path)}


#: This machine's own CPU code paths, whatever the run sets (``./run test`` has numba compile for its generic CPU).
HOST: dict[str, str | None] = {"NUMBA_CPU_NAME": None, "NUMBA_CPU_FEATURES": None, "ATEN_CPU_CAPABILITY": None}


def _foreign_cpu() -> dict[str, str]:
    """Settings under which numba compiles for an AVX-512 Xeon, whatever this machine is."""
    from llvmlite import binding

    features = binding.get_host_cpu_features()
    for name in ("avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl", "avx", "avx2", "fma"):
        features[name] = True
    return {"NUMBA_CPU_NAME": "skylake-avx512", "NUMBA_CPU_FEATURES": features.flatten()}


# A generated kernel module, as the lab's elementwise and fused kernels are: written to the cache
# directory and compiled with cache=True.
_KERNEL = '''
import numba

@numba.njit(cache=True)
def scale_shift(x, out):
    for i in range(x.shape[0]):
        out[i] = x[i] * 2.0 + 1.0
'''

_COMPILE_ONLY = f"""
import json, numba
from npu_lab.kernels import codegen
mod = codegen.load_module({_KERNEL!r}, "portability")
mod.scale_shift.compile("void(float32[::1], float32[::1])")  # machine code for the foreign CPU, cached
print(json.dumps({{"cpu": numba.config.CPU_NAME}}))
"""

_CALL = f"""
import json
import numpy as np
from npu_lab.kernels import codegen
mod = codegen.load_module({_KERNEL!r}, "portability")
x = np.arange(1000, dtype=np.float32)
out = np.empty_like(x)
mod.scale_shift(x, out)
stats = mod.scale_shift.stats
print(json.dumps({{"right": bool((out == x * 2 + 1).all()), "hits": sum(stats.cache_hits.values()),
                  "misses": sum(stats.cache_misses.values())}}))
"""


def test_machine_code_cached_for_another_cpu_is_compiled_again(tmp_path, kernel_cache):
    cache = kernel_cache
    if sys.platform != "linux" or os.uname().machine != "x86_64":
        pytest.skip("does not apply here: the foreign CPU of this test is an x86-64 Xeon")
    made = _run(_COMPILE_ONLY, {**cache, **_foreign_cpu()})
    assert made["cpu"] == "skylake-avx512"
    index = list(tmp_path.rglob("*portability*.nbi"))
    assert index, "the foreign process left no numba cache index behind"
    first = _run(_CALL, {**cache, **HOST})
    # Reusing the AVX-512 code here would be a cache hit (and, on a CPU without AVX-512, a crash).
    assert first == {"right": True, "hits": 0, "misses": 1}, first
    second = _run(_CALL, {**cache, **HOST})
    assert second == {"right": True, "hits": 1, "misses": 0}, "this machine's own entry is reused"


_WORKLOAD = """
import json, torch, npu_lab
torch.manual_seed(0)
a, b = torch.randn(300, 200), torch.randn(200, 100)
got = ((a.npu() @ b.npu()).relu() * 0.5 + 1).sum(dim=0).cpu()
want = ((a @ b).relu() * 0.5 + 1).sum(dim=0)
print(json.dumps({"close": torch.allclose(got, want, rtol=1e-4, atol=1e-3),
                  "cpu": npu_lab._torch_private.cpu_identity()}))
"""


def test_lab_kernels_cached_with_other_cpu_settings_run_right_here(kernel_cache):
    """The lab's own kernels (elementwise, reduction, matmul) through a cache made for the generic CPU."""
    cache = kernel_cache
    other = _run(_WORKLOAD, {**cache, "NUMBA_CPU_NAME": "generic", "ATEN_CPU_CAPABILITY": "default",
                             "NUMBA_NUM_THREADS": "1"})
    here = _run(_WORKLOAD, {**cache, **HOST})
    assert other["close"] and here["close"]
    assert other["cpu"] != here["cpu"], "the two processes should name different CPUs"


_INDUCTOR = """
import json, os, sys, torch, torch._inductor.config
import npu_lab
torch._inductor.config.compile_threads = 1
def f(x):
    return torch.tanh(x) * 2 + 1
torch.manual_seed(0)
x = torch.randn(4, 8)
# Inductor's scalar tanh and ATen's may differ in the last bit: near tanh(x) = -1 that is more than allclose's
# default absolute tolerance of 1e-8 (an unseeded input failed the test once in that way)
close = torch.allclose(torch.compile(f)(x), f(x), atol=1e-6) if sys.argv[1:] == ["compile"] else None
print(json.dumps({"close": close, "cache": os.environ["TORCHINDUCTOR_CACHE_DIR"]}))
"""


def test_inductor_cache_is_kept_per_cpu(tmp_path):
    """TorchInductor's cache, filled with AVX2 code, then used with ATEN_CPU_CAPABILITY=default.

    Without a folder per CPU identity the second process compiles the first one's vector code without
    the vector headers and fails ("'at::vec' has not been declared"; torch 2.13).
    """
    env = {**HOST, "TMPDIR": str(tmp_path), "TORCHINDUCTOR_CACHE_DIR": None}
    # The folders differ, so the second process never sees the first one's AVX2 code: the first need not
    # compile (a cold Inductor compile is a minute on CI's machine); the second compiles, in the scalar setting.
    plain = _run(_INDUCTOR, env)
    scalar = _run(_INDUCTOR, {**env, "ATEN_CPU_CAPABILITY": "default"}, "compile")
    assert scalar["close"]
    assert plain["cache"] != scalar["cache"]
    assert Path(plain["cache"]).parent == Path(scalar["cache"]).parent
    assert Path(plain["cache"]).parent.parent == tmp_path


def test_native_runtime_is_built_per_machine_architecture():
    import platform

    from npu_lab.device import native

    assert native.build_directory().name.endswith(platform.machine())
    assert native._compiler_version(), "the compiler's version is part of the build's hash"
