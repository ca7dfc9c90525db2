"""Checks that run the learner's code in a forked process (chapter 9's ranks): plain data back, errors of the
same kind, a time limit that kills every thread, nothing left running."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import threading
import time

import pytest
import torch

from npu_lab.grading import EXERCISES, NOT_STARTED, NOT_YET, PASSED, grade, guard, load_all
from npu_lab.grading.forked import ChildError, ChildTimeout, Unreturned, call_forked
from npu_lab.grading.tester import is_stub_error

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="fork() is what this module tests")
load_all()


def _children() -> set[int]:
    """Processes whose parent is this one."""
    me, out = os.getpid(), set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) == me:
                    out.add(int(pid))
        except (OSError, ValueError, IndexError):
            continue
    return out


def test_plain_data_comes_back_equal():
    values = {
        "f32": torch.randn(3, 4), "bf16": torch.randn(5).bfloat16(), "bool": torch.tensor([True, False]),
        "c64": torch.randn(2, dtype=torch.complex64), "scalar": torch.tensor(7, dtype=torch.int64),
        "empty": torch.empty(0, 3), "strided": torch.arange(12.0).reshape(3, 4).t(),
        "npu": torch.arange(6.0).to("npu"), ("a", 1): [1, 2.5, None, True, "s", b"b", 1 + 2j],
        "atoms": (torch.float16, torch.device("cpu"), torch.Size([2, 3])), "sets": ({1, 2}, frozenset({3})),
    }
    back = call_forked(lambda: values, 30)
    assert set(back) == set(values)
    for k, v in values.items():
        if isinstance(v, torch.Tensor):
            got = back[k]
            assert type(got) is torch.Tensor and got.device.type == "cpu" and got.dtype == v.dtype
            assert got.shape == v.shape and torch.equal(got, v.cpu()), k
        else:
            assert back[k] == v and type(back[k]) is type(v), k


def test_objects_that_are_not_plain_data_do_not_come_back():
    class AlwaysEqual:
        def __eq__(self, other):
            return True

    class Sneaky(torch.Tensor):
        pass

    back = call_forked(lambda: [AlwaysEqual(), torch.ones(2).as_subclass(Sneaky), 3], 30)
    assert type(back[0]) is Unreturned and "AlwaysEqual" in back[0].why
    assert type(back[1]) is Unreturned and "subclass" in back[1].why
    assert back[2] == 3 and not (back[0] == object())


def _stub():
    raise NotImplementedError("YOUR CODE HERE")


def _learner_bug():
    return {}["missing"]


def test_exceptions_come_back_as_their_kind_with_the_learners_frames():
    with pytest.raises(NotImplementedError) as info:
        call_forked(_stub, 30)
    assert is_stub_error(info.value)
    for raised, kind in [(KeyboardInterrupt, KeyboardInterrupt), (SystemExit, SystemExit),
                         (ValueError, ValueError), (TimeoutError, TimeoutError)]:
        with pytest.raises(kind):
            call_forked(lambda e=raised: (_ for _ in ()).throw(e("x")), 30)
    with pytest.raises(ChildError) as info:
        call_forked(_learner_bug, 30)
    text = guard.trim(info.value)
    assert "_learner_bug" in text and "KeyError: 'missing'" in text


def test_output_comes_back_and_a_dead_child_is_reported(capsys):
    assert call_forked(lambda: print("from the child") or 1, 30) == 1
    assert "from the child" in capsys.readouterr().out
    with pytest.raises(ChildError, match="died"):
        call_forked(lambda: os._exit(3), 30)
    with pytest.raises(ChildError, match="signal 11"):
        call_forked(lambda: ctypes.string_at(0), 30)  # a segmentation fault


def _sleeping_threads():
    """What no signal or exception can stop in-process: a thread asleep in C with signals blocked."""
    def sleep():
        signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGALRM, signal.SIGINT])
        time.sleep(3600)

    threads = [threading.Thread(target=sleep) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def test_a_child_out_of_time_is_killed_with_every_thread_it_started():
    before = _children()  # (processes earlier tests of this worker left running: a kernel, a browser)
    start = time.monotonic()
    with pytest.raises(ChildTimeout, match="did not finish within 0.5 s"):
        call_forked(_sleeping_threads, 0.5)
    assert time.monotonic() - start < 3
    assert _children() <= before


@pytest.mark.parametrize("limit", [0.002, 0.02, 0.1, 0.3])
def test_the_checks_own_limit_kills_the_child_too(limit):
    # Limits this short strike while the child is being forked, or killed and reaped: it must still go
    # (a limit that cut the reaping short left a zombie child behind, once in a CI run).
    before = _children()
    for _ in range(3):
        outcome = guard.call(lambda: call_forked(_sleeping_threads, 60), timeout=limit)
        assert outcome.timed_out
        assert _children() <= before


def test_a_limit_that_strikes_while_a_child_is_reaped_leaves_no_zombie(monkeypatch):
    real_waitpid = os.waitpid

    def slow_waitpid(pid, options):
        time.sleep(0.3)  # a large process takes a while to tear down after SIGKILL (as in CI's workers)
        return real_waitpid(pid, options)

    before = _children()
    monkeypatch.setattr(os, "waitpid", slow_waitpid)
    try:
        outcome = guard.call(lambda: call_forked(_sleeping_threads, 60), timeout=0.1)
    finally:
        monkeypatch.undo()
        left = _children() - before
        for pid in left:  # do not hand a zombie (or a running child) to the tests after this one
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
    assert outcome.timed_out
    assert not left, f"the check left {len(left)} child process(es) behind"


def test_a_limit_that_expires_while_it_is_being_set_up_is_not_left_behind(monkeypatch):
    # The limit's set-up starts the watchdog thread (threading's code, where the limit can already raise).
    # A limit that expired there stayed on the list of active limits: every later call then raised its
    # timeout out of guard.call, which never raises (seen under load, with very short limits).
    def slow_start():
        time.sleep(0.05)  # the 1 ms limit expires in here

    monkeypatch.setattr(guard, "_start_watchdog", slow_start)
    outcome = guard.call(lambda: None, timeout=0.001)
    monkeypatch.undo()
    assert outcome.timed_out
    assert not guard._active, "a limit stayed active after its call returned"
    assert guard.call(lambda: 42, timeout=1.0).value == 42


def test_a_limit_that_expires_in_a_held_section_waits_for_its_end():
    done = []

    def body():
        with guard.held():  # e.g. reaping a killed child
            time.sleep(0.4)  # longer than the limit: the timer fires in here and must not raise
            done.append("held section finished")
        while True:
            time.sleep(0.01)  # the limit ends this loop

    start = time.monotonic()
    outcome = guard.call(body, timeout=0.1)
    assert outcome.timed_out and done == ["held section finished"] and guard._held == 0
    assert time.monotonic() - start < 2


def test_ctrl_c_in_a_held_section_is_raised_at_its_end():
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # a background run ignores SIGINT
    done = []
    try:
        with pytest.raises(KeyboardInterrupt):
            with guard.held():
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.05)
                done.append("held section finished")
        assert done == ["held section finished"]
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # its own handler is gone
        assert guard._held == 0  # limits work again
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_grandchild_dies_with_the_child_that_would_have_killed_it():
    pid = os.fork()
    if pid == 0:  # a probe's child, say, that runs a forked check in turn and is killed
        try:
            call_forked(_sleeping_threads, 60)
        finally:
            os._exit(0)
    time.sleep(1.0)
    grandchildren = [p for p in _all_pids() if _parent(p) == pid]
    assert grandchildren
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    end = time.monotonic() + 5
    while time.monotonic() < end and any(_alive(p) for p in grandchildren):
        time.sleep(0.05)
    assert not any(_alive(p) for p in grandchildren)


def _all_pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def _parent(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return -1


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


# ---------------------------------------------------------------------------------------------
# chapter 9's checks
# ---------------------------------------------------------------------------------------------

def good_ring(tensor, rank, world_size, send, recv):
    flat = tensor.reshape(-1).clone()
    chunks = list(torch.tensor_split(flat, world_size))
    right, left = (rank + 1) % world_size, (rank - 1) % world_size
    for step in range(world_size - 1):
        i_send, i_recv = (rank - step) % world_size, (rank - step - 1) % world_size
        send(chunks[i_send], right)
        incoming = torch.empty_like(chunks[i_recv])
        recv(incoming, left)
        chunks[i_recv] += incoming
    for step in range(world_size - 1):
        i_send, i_recv = (rank + 1 - step) % world_size, (rank - step) % world_size
        send(chunks[i_send], right)
        recv(chunks[i_recv], left)
    return flat.reshape(tensor.shape)


def asleep_in_c(tensor, rank, world_size, send, recv):
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGALRM, signal.SIGINT])
    time.sleep(3600)


def test_ring_ranks_asleep_in_c_end_with_the_check_and_leave_nothing_running():
    ring = EXERCISES["ch9.ring_allreduce"]
    assert grade(ring, {"ring_allreduce": good_ring}).status == PASSED
    before = _children()
    start = time.monotonic()
    r = grade(ring, {"ring_allreduce": asleep_in_c}, timeout=1.0)
    assert time.monotonic() - start < 5
    assert r.status == NOT_YET and "CheckTimeout" in str(r), str(r)
    assert _children() <= before
    assert not [t for t in threading.enumerate() if t.name.startswith("rank") and t.is_alive()]
    assert grade(ring, {"ring_allreduce": good_ring}).status == PASSED


def test_a_stub_in_a_rank_is_still_not_started_and_a_rank_error_shows_the_learners_line():
    ring = EXERCISES["ch9.ring_allreduce"]

    def stub(tensor, rank, world_size, send, recv):
        raise NotImplementedError("YOUR CODE HERE")

    assert grade(ring, {"ring_allreduce": stub}).status == NOT_STARTED

    def off_by_one(tensor, rank, world_size, send, recv):
        send(tensor, world_size)  # no such rank
        return tensor

    text = str(grade(ring, {"ring_allreduce": off_by_one}))
    assert "send(tensor, world_size)" in text and "the peer must be another rank" in text, text
