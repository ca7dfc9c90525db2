"""Start N worker processes from a notebook and bring their results back to it.

``torchrun`` starts one process per rank from a shell; a notebook wants the same without leaving
the page, and wants the results back to draw them::

    from npu_lab.distributed.launch import launch
    from npu_lab.distributed.examples import workers

    results = launch(workers.ddp_step_times, nprocs=2, args=(5,), debug=True)
    results[0].value, results[0].seconds, results[0].log[:3]

Each worker is a fresh Python process (``spawn``, as ``torchrun`` and ``torch.multiprocessing``
do), so the function it runs must be importable: defined at the top level of a module (a ``.py``
file), not in the notebook. In each worker :func:`launch` sets the npu device (``rank % device
count``), calls ``init_process_group`` (npu tensors on npuccl, CPU tensors on gloo), runs
``fn(*args, **kwargs)``, and sends back a :class:`WorkerResult`: the returned value (tensors moved
to the CPU), the host seconds ``fn`` took, and what it wrote to stderr, which holds the
``NPU_LAB_CCL_DEBUG=INFO`` log when ``debug=True``.

A worker that raises, dies, or is still running at ``timeout`` makes :func:`launch` stop the
others and raise :class:`WorkerError`, naming the rank and showing its traceback and last log lines.
"""

from __future__ import annotations

import datetime
import os
import pickle
import queue as queue_module
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.multiprocessing as mp


@dataclass
class WorkerResult:
    """What one worker sent back."""

    rank: int
    value: Any  #: what ``fn`` returned (tensors moved to the CPU)
    seconds: float  #: host seconds ``fn`` took (after the process group was up)
    startup_seconds: float  #: host seconds from :func:`launch` to ``fn`` starting (process start, imports, rendezvous)
    log: list[str] = field(default_factory=list)  #: lines the worker wrote to stderr (the debug log)
    output: str = ""  #: what the worker printed


class WorkerError(RuntimeError):
    """A worker raised, died, or did not finish in time; ``rank``, ``reason`` and ``logs`` say more."""

    def __init__(self, message: str, rank: int | None, reason: str, logs: dict[int, list[str]]) -> None:
        super().__init__(message)
        self.rank = rank
        self.reason = reason
        self.logs = logs


def _cpu(value: Any) -> Any:
    """``value`` with every tensor detached and moved to the CPU (so it can cross to the notebook process)."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, dict):
        return {k: _cpu(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)) and type(value) in (list, tuple):
        return type(value)(_cpu(v) for v in value)
    return value


def _check_importable(fn: Callable[..., Any]) -> None:
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", "")
    if not callable(fn):
        raise TypeError(f"launch needs a function to run in each worker, got {type(fn).__name__}")
    if module in (None, "__main__") or "<locals>" in qualname or "<lambda>" in qualname:
        raise TypeError(
            f"{qualname or fn!r} is defined in the notebook (module {module!r}): a spawned worker starts a "
            f"fresh Python and can only run a function it can import. Put it at the top level of a .py "
            f"file (e.g. npu_lab/distributed/examples/workers.py) and import it from there.")


def _worker(rank: int, world: int, fn: Callable[..., Any], args: tuple, kwargs: dict, backend: str,
            init_file: str, out_dir: str, env: dict[str, str], pg_timeout_s: float, t0: float,
            results: Any) -> None:
    """The body of each spawned process (module level, so ``spawn`` can import it)."""
    torch.set_num_threads(int(env.get("OMP_NUM_THREADS", "1")))
    log_path, out_path = Path(out_dir, f"rank{rank}.log"), Path(out_dir, f"rank{rank}.out")
    # Python's and C++'s output (gloo, c10d warnings) both go to the rank's files, not the notebook's.
    sys.stderr = open(log_path, "w", buffering=1)  # noqa: SIM115 - lives as long as the process
    sys.stdout = open(out_path, "w", buffering=1)  # noqa: SIM115
    os.dup2(sys.stderr.fileno(), 2)
    os.dup2(sys.stdout.fileno(), 1)
    try:
        import torch.distributed as dist

        import npu_lab  # noqa: F401 - registers npuccl

        torch.npu.set_device(rank % torch.npu.device_count())
        dist.init_process_group(backend, init_method=f"file://{init_file}", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=pg_timeout_s))
        start = time.perf_counter()
        startup = time.time() - t0
        value = fn(*args, **kwargs)
        seconds = time.perf_counter() - start
        results.put(("ok", rank, pickle.dumps(_cpu(value)), seconds, startup))  # by value, not shared fds
        try:
            dist.destroy_process_group()
        except Exception:  # noqa: BLE001,S110 - the result is already sent
            pass
    except BaseException as exc:  # noqa: BLE001 - every failure goes back to the notebook
        results.put(("error", rank, f"{type(exc).__name__}: {exc}", traceback.format_exc(), 0.0))
    finally:
        sys.stderr.flush()
        sys.stdout.flush()
        results.close()
        results.join_thread()


def _root_cause(errors: dict[int, tuple[str, str]], results: Any, got: dict[int, tuple],
                grace_s: float = 1.0) -> tuple[int, str, str]:
    """The failure to report: waits ``grace_s`` for the other ranks' errors, then prefers one that is not
    a ``DistBackendError`` (those are usually ranks that lost a peer which failed first)."""
    end = time.monotonic() + grace_s
    while time.monotonic() < end:
        try:
            msg = results.get(timeout=max(0.01, end - time.monotonic()))
        except queue_module.Empty:
            break
        if msg[0] == "error":
            errors[msg[1]] = (msg[2], msg[3])
        else:
            got[msg[1]] = msg
    rank = next((r for r, (why, _) in sorted(errors.items()) if not why.startswith("DistBackendError")),
                min(errors))
    return rank, errors[rank][0], errors[rank][1]


def _read_lines(path: Path) -> list[str]:
    try:
        return path.read_text().splitlines()
    except OSError:
        return []


def _tail(lines: list[str], n: int = 6) -> str:
    return "\n".join(f"    {line}" for line in lines[-n:]) or "    (nothing)"


def launch(fn: Callable[..., Any], nprocs: int = 2, args: tuple = (), kwargs: dict[str, Any] | None = None, *,
           debug: bool = False, backend: str = "cpu:gloo,npu:npuccl", timeout: float = 120.0,
           collective_timeout: float | None = None, env: dict[str, str] | None = None) -> list[WorkerResult]:
    """Run ``fn(*args, **kwargs)`` in ``nprocs`` new processes joined in one process group.

    ``fn`` must be importable (a module-level function of a ``.py`` file). ``debug=True`` sets
    ``NPU_LAB_CCL_DEBUG=INFO`` in the workers, so each result's ``log`` holds one line per
    collective. ``timeout``: seconds for the whole run; ``collective_timeout``: the process
    group's timeout (how long a collective waits for a peer; default ``timeout``). ``env``: more
    environment variables for the workers (``OMP_NUM_THREADS`` and ``NUMBA_NUM_THREADS`` are 1
    unless given, as ``torchrun`` does for OpenMP: N workers each with a thread per core would fight
    over the cores). Returns one :class:`WorkerResult` per rank, in rank
    order; raises :class:`WorkerError` if a worker fails, dies, or runs out of time.
    """
    _check_importable(fn)
    if type(nprocs) is not int or nprocs < 1:
        raise ValueError(f"nprocs must be a positive int, got {nprocs!r}")
    if timeout <= 0:
        raise ValueError(f"timeout must be positive, got {timeout!r}")
    # As torchrun does for OpenMP: one thread per worker for PyTorch and numba (the npu's kernels), or
    # N workers each running a thread per core fight over the cores (numba's idle threads spin).
    child_env = {"OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1", **(env or {})}
    if debug:
        child_env["NPU_LAB_CCL_DEBUG"] = "INFO"
    pg_timeout = collective_timeout if collective_timeout is not None else timeout
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="npu_lab_launch_") as tmp:
        procs = [ctx.Process(target=_worker, daemon=True,
                             args=(r, nprocs, fn, tuple(args), dict(kwargs or {}), backend, os.path.join(tmp, "init"),
                                   tmp, child_env, pg_timeout, t0, results))
                 for r in range(nprocs)]
        saved = {k: os.environ.get(k) for k in child_env}
        os.environ.update(child_env)  # a spawned process copies the environment when it starts
        try:
            for p in procs:
                p.start()
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        got: dict[int, tuple] = {}
        errors: dict[int, tuple[str, str]] = {}
        failure: tuple[int | None, str, str] | None = None
        finished = False
        deadline = time.monotonic() + timeout
        try:
            while len(got) < nprocs and failure is None:
                try:
                    msg = results.get(timeout=0.2)
                except queue_module.Empty:
                    msg = None
                if msg is not None:
                    status, rank = msg[0], msg[1]
                    if status == "error":
                        errors[rank] = (msg[2], msg[3])
                        failure = _root_cause(errors, results, got)
                    else:
                        got[rank] = msg
                    continue
                dead = [r for r, p in enumerate(procs) if r not in got and p.exitcode not in (None, 0)]
                if dead:
                    time.sleep(0.3)  # its own error report may still be in the queue
                    try:
                        while True:
                            msg = results.get_nowait()
                            if msg[0] == "error":
                                errors[msg[1]] = (msg[2], msg[3])
                                failure = _root_cause(errors, results, got)
                                break
                            got[msg[1]] = msg
                    except queue_module.Empty:
                        pass
                    if failure is None and dead[0] not in got:
                        r = dead[0]
                        failure = (r, f"the process exited with code {procs[r].exitcode} without a result", "")
                elif time.monotonic() > deadline:
                    missing = [r for r in range(nprocs) if r not in got]
                    failure = (None, f"ranks {missing} did not finish within {timeout:g} s (a hang: a collective "
                                     f"waiting for a peer that called another one?)", "")
            finished = True
        finally:
            for p in procs:
                if (failure is not None or not finished) and p.is_alive():  # failed, or the notebook was interrupted
                    p.terminate()
                p.join(timeout=10)
                if p.is_alive():
                    p.kill()
                    p.join(timeout=5)
            logs = {r: _read_lines(Path(tmp, f"rank{r}.log")) for r in range(nprocs)}
            outputs = {r: "\n".join(_read_lines(Path(tmp, f"rank{r}.out"))) for r in range(nprocs)}
    if failure is not None:
        rank, reason, trace = failure
        who = f"rank {rank}" if rank is not None else "the workers"
        lines = [f"{getattr(fn, '__qualname__', fn)} failed in {who}: {reason}"]
        if trace:
            lines.append("its traceback (last lines):\n" + "\n".join(trace.rstrip().splitlines()[-8:]))
        lines += [f"  rank {r} also failed: {why}" for r, (why, _) in sorted(errors.items()) if r != rank]
        for r in range(nprocs):
            lines.append(f"  rank {r} log (last lines):\n{_tail(logs[r])}")
        raise WorkerError("\n".join(lines), rank, reason, logs)
    values = {r: pickle.loads(got[r][2]) for r in range(nprocs)}  # noqa: S301 - our own workers' results
    return [WorkerResult(r, values[r], got[r][3], got[r][4], logs[r], outputs[r]) for r in range(nprocs)]
