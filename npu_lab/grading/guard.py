"""Run a learner's code safely: a time limit, and exceptions trimmed to their own frames."""

from __future__ import annotations

import os
import signal
import sysconfig
import threading
import traceback
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

#: Seconds a single call of the learner's code may take before it is stopped.
DEFAULT_TIMEOUT = 5.0

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_STDLIB = os.path.abspath(sysconfig.get_paths()["stdlib"])


class CheckTimeout(Exception):
    """The learner's code ran longer than the check allows."""


@dataclass
class Outcome:
    """What calling the learner's code gave: a value, or a trimmed error."""

    value: Any = None
    error: str = ""
    exception: BaseException | None = None

    @property
    def ok(self) -> bool:
        return self.exception is None


def _is_learner_frame(filename: str) -> bool:
    if filename.startswith("<"):  # "<ipython-input-...>", "<string>": code typed by the learner
        return True
    path = os.path.abspath(filename)
    if path.startswith(_PACKAGE_DIR + os.sep) or path.startswith(_STDLIB + os.sep):
        return False
    # Installed libraries (torch, numba, IPython...); notebook cells live in temporary files.
    return "site-packages" not in path and "dist-packages" not in path


def trim(exc: BaseException) -> str:
    """The exception as the learner should see it: only frames of their own code.

    Frames inside npu_lab (the check itself), PyTorch or other installed
    libraries are dropped; the last library frame is named in one line so the
    learner knows where their call went wrong.
    """
    frames = traceback.extract_tb(exc.__traceback__)
    mine = [f for f in frames if _is_learner_frame(f.filename)]
    lines = []
    for f in mine:
        where = f.filename if not f.filename.startswith("/tmp/ipykernel") else "cell"
        lines.append(f"  {where}, line {f.lineno}, in {f.name}")
        if f.line:
            lines.append(f"    {f.line.strip()}")
    if frames and frames[-1] not in mine:
        last = frames[-1]
        lib = os.path.basename(os.path.dirname(last.filename)) or last.filename
        lines.append(f"  (raised inside {lib}/{os.path.basename(last.filename)})")
    message = f"{type(exc).__name__}: {exc}".strip()
    if len(message) > 600:
        message = message[:600] + " ..."
    return "\n".join(lines + [message])


@contextmanager
def _time_limit(seconds: float):
    """Raise CheckTimeout in the main thread after ``seconds`` (SIGALRM on POSIX)."""
    usable = (hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread())
    if not usable or seconds <= 0:
        yield
        return

    def _alarm(signum, frame):
        raise CheckTimeout(f"your code ran longer than {seconds:g} s (an infinite loop?)")

    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def call(fn: Callable[[], Any], timeout: float = DEFAULT_TIMEOUT) -> Outcome:
    """Call ``fn()`` under a time limit; never raises (except KeyboardInterrupt)."""
    try:
        with _time_limit(timeout):
            return Outcome(value=fn())
    except KeyboardInterrupt:
        raise
    except CheckTimeout as exc:
        return Outcome(error=f"CheckTimeout: {exc}", exception=exc)
    except BaseException as exc:  # noqa: BLE001 - the learner's code may raise anything
        return Outcome(error=trim(exc), exception=exc)
