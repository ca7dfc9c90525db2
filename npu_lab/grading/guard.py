"""Run a learner's code safely: a time limit that always ends, capped output, trimmed exceptions.

Every call into the learner's code goes through :func:`call`. It

* stops the code after ``timeout`` seconds with :class:`CheckTimeout`, a
  ``BaseException`` (so ``except Exception:`` in the learner's code does not
  swallow it) that is raised again until the call has ended: code that
  swallows even that (a bare ``except:`` in a loop) is traced, and gets it
  again at the next line of the handler that caught it; code that
  ignores, blocks or replaces the ``SIGALRM`` handler, or cancels the timer,
  is stopped by a watchdog thread that raises the timeout in the main thread
  without any signal (and puts the alarm back);
* can first run the call in a forked child process (:func:`probe`): compiled
  code (an ``@numba.njit`` loop) holds the interpreter and no signal reaches
  it, so a child that runs out of time is killed instead, and the call is
  never run in this process; a child that crashes (a segmentation fault from
  an out-of-bounds write) is reported instead of killing the notebook's kernel;
* captures what the code prints (to ``sys.stdout``/``sys.stderr``), capped;
* never raises: any exception, ``KeyboardInterrupt`` and ``SystemExit``
  included, comes back in the :class:`Outcome`, trimmed to the learner's frames.

:func:`safe_text` turns any object into text without trusting its
``__repr__``/``__str__`` (which may raise or never return).
"""

from __future__ import annotations

import _thread
import contextlib
import ctypes
import faulthandler
import io
import os
import select
import signal
import sys
import sysconfig
import threading
import time
import traceback
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

#: Seconds a single call of the learner's code may take before it is stopped.
DEFAULT_TIMEOUT = 5.0
#: Characters of printed output kept per call (the rest is counted, not kept).
OUTPUT_LIMIT = 2000
#: After a deadline has passed, the timeout is raised again this often (seconds) until the call ends.
REFIRE = 0.05
#: Seconds after a deadline during which a timeout already raised once is raised again only in the
#: learner's own code, not inside a library (or a garbage-collection finalizer) it is running.
LIBRARY_GRACE = 1.0

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_STDLIB = os.path.abspath(sysconfig.get_paths()["stdlib"])
_THIS_FILE = os.path.abspath(__file__)
if _THIS_FILE.endswith((".pyc", ".pyo")):
    _THIS_FILE = _THIS_FILE[:-1]

_TYPE_NAME = type.__dict__["__name__"].__get__  # a class's own name, whatever its metaclass says
_CAUSE = BaseException.__dict__["__cause__"].__get__
_CONTEXT = BaseException.__dict__["__context__"].__get__
_TRACEBACK = BaseException.__dict__["__traceback__"].__get__


def type_name(obj: Any) -> str:
    """The name of ``obj``'s class, without running any code of the class."""
    try:
        return str.__str__(_TYPE_NAME(type(obj)))
    except BaseException:  # noqa: BLE001 - a name is never worth an error
        return "object"


# ---------------------------------------------------------------------------------------------
# deadlines
# ---------------------------------------------------------------------------------------------

class CheckTimeout(BaseException):
    """The learner's code ran longer than the check allows.

    A ``BaseException``, so ``except Exception:`` does not catch it. When it is
    created in the main thread after a deadline passed (also when the watchdog
    raises it there, without a signal) it puts the check's alarm back in place,
    in case the learner's code replaced the handler or cancelled the timer.
    """

    def __init__(self, *args: Any, deadline: _Deadline | None = None) -> None:
        self.deadline = deadline if deadline is not None else _expired()
        if not args:
            seconds = self.deadline.seconds if self.deadline is not None else DEFAULT_TIMEOUT
            args = (f"your code ran longer than {seconds:g} s (an infinite loop?)",)
        super().__init__(*args)
        if self.deadline is not None and threading.current_thread() is threading.main_thread():
            _rearm_after_tampering()


class _Deadline:
    """One active time limit (limits nest: the whole check, and each call inside it)."""

    def __init__(self, seconds: float, owner: Any) -> None:
        self.seconds = seconds
        self.at = time.monotonic() + seconds
        self.owner = owner  # the frame that set the limit
        self.fired = 0
        self.last_fired = 0.0
        self.nudged = 0


_lock = threading.RLock()
_active: list[_Deadline] = []
_saved_handler: Any = None


def _expired() -> _Deadline | None:
    """The outermost active deadline that has passed (it encloses the others)."""
    now = time.monotonic()
    with _lock:
        for d in _active:
            if now >= d.at:
                return d
    return None


def _in_guard(frame: Any) -> bool:
    return _held > 0 or (frame is not None and frame.f_code.co_filename == _THIS_FILE)


_held = 0  # how many held sections the check is in
_MAIN_THREAD = threading.main_thread().ident


class held:
    """``with held(): ...``: a piece of the check's own work that must not be cut short (forking a child
    process, killing and reaping it).

    A time limit that expires inside waits (its timer fires again right after); a ``KeyboardInterrupt``
    (Ctrl-C, in the main thread) is raised when the section ends. Without this, a limit that struck while a
    killed child was being reaped left it behind. Written as a class in this module, so that no frame of
    another module runs between the ``with`` and the section's start (a limit raises in any such frame).
    """

    def __init__(self) -> None:
        self._hits: list[int] = []
        self._previous: Any = None

    def __enter__(self) -> None:
        global _held
        _held += 1  # first: from here on no limit raises
        try:
            if _thread.get_ident() == _MAIN_THREAD and \
                    signal.getsignal(signal.SIGINT) is signal.default_int_handler:
                with contextlib.suppress(ValueError):
                    self._previous = signal.signal(signal.SIGINT, self._on_sigint)
        except BaseException:  # a Ctrl-C just before the handler was swapped: the section never began
            _held -= 1
            raise

    def _on_sigint(self, signum: int, frame: Any) -> None:
        self._hits.append(signum)

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        global _held
        try:
            if self._previous is not None:
                with contextlib.suppress(ValueError):
                    signal.signal(signal.SIGINT, self._previous)
        finally:
            _held -= 1  # whatever happens, limits work again after the section
        if self._hits and kind is None:
            raise KeyboardInterrupt


def _arm() -> None:
    """Point the interval timer at the nearest active deadline (then every REFIRE seconds)."""
    if not _active:
        signal.setitimer(signal.ITIMER_REAL, 0)
        return
    delay = max(min(d.at for d in _active) - time.monotonic(), 1e-3)
    signal.setitimer(signal.ITIMER_REAL, delay, REFIRE)


def _on_alarm(signum: int, frame: Any) -> None:
    d = _expired()
    if d is None:
        _arm()
        return
    if _in_guard(frame):  # the check's own bookkeeping: let it finish, the timer fires again
        d.last_fired = time.monotonic()  # the timer works: no need for the watchdog to step in
        return
    now = time.monotonic()
    if d.fired and now - d.at < LIBRARY_GRACE and not (frame is not None and _escalates(frame.f_code.co_filename)):
        # raised once already, and now inside a library (or a finalizer, a hook...) the learner's code called:
        # raise again in the learner's own code, where it can only end their loop, unless it never comes back
        return
    d.fired += 1
    d.last_fired = now
    if d.fired >= 2:  # raised before and still running: the code swallows the timeout
        _escalate(frame)
    raise CheckTimeout(deadline=d)


def _rearm_after_tampering() -> None:
    """Put the check's SIGALRM handler and timer back if the learner's code changed them."""
    if not _active:
        return
    try:
        if hasattr(signal, "pthread_sigmask"):
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGALRM])
        if signal.getsignal(signal.SIGALRM) is not _on_alarm:
            signal.signal(signal.SIGALRM, _on_alarm)
        if signal.getsignal(_WATCHDOG_SIGNAL) is not _on_watchdog:
            signal.signal(_WATCHDOG_SIGNAL, _on_watchdog)
        if signal.getitimer(signal.ITIMER_REAL)[0] == 0.0:  # cancelled, or stopped while the signal was ignored
            _arm()
    except (ValueError, OSError):
        pass


def _is_learner_frame(filename: str) -> bool:
    if filename.startswith("<"):  # "<ipython-input-...>", "<string>": code typed by the learner
        return not filename.startswith("<frozen")  # "<frozen posixpath>": the standard library
    path = os.path.abspath(filename)
    if path.startswith(_PACKAGE_DIR + os.sep) or path.startswith(_STDLIB + os.sep):
        return False
    # Installed libraries (torch, numba, IPython...); notebook cells live in temporary files.
    return "site-packages" not in path and "dist-packages" not in path


# Escalation, for code that swallows the timeout (a bare ``except:`` in a loop): the learner's frames
# are traced, and the timeout is raised again at their next line - from inside the handler that
# caught it, so it escapes. A trace function that raises is switched off by Python, so the alarm
# switches it on again every time it fires, and a profile function switches it on for the caller
# whenever one of the learner's frames is left.
_saved_hooks: tuple[Any, Any] | None = None


def _escalates(filename: str) -> bool:
    """Frames the escalation raises in: the learner's files and notebook cells, not generated code
    ("<string>": a namedtuple's methods, anything made with exec) whatever library it runs in."""
    return _is_learner_frame(filename) and (not filename.startswith("<") or filename.startswith("<ipython"))


def _tracer(frame: Any, event: str, arg: Any) -> Any:
    if event == "line" and _expired() is not None and _escalates(frame.f_code.co_filename):
        raise CheckTimeout()
    return _tracer


def _profiler(frame: Any, event: str, arg: Any) -> None:
    if event == "return" and _expired() is not None and frame.f_back is not None \
            and _escalates(frame.f_back.f_code.co_filename):
        sys.settrace(_tracer)
        frame.f_back.f_trace = _tracer
        frame.f_back.f_trace_lines = True


def _escalate(frame: Any) -> None:
    global _saved_hooks
    with _lock:
        if _saved_hooks is None:
            _saved_hooks = (sys.gettrace(), sys.getprofile())
        owners = {id(d.owner) for d in _active}
    sys.settrace(_tracer)
    sys.setprofile(_profiler)
    f = frame
    while f is not None and id(f) not in owners:
        if _escalates(f.f_code.co_filename):
            f.f_trace = _tracer
            f.f_trace_lines = True
        f = f.f_back
    signal.setitimer(signal.ITIMER_REAL, REFIRE / 5, REFIRE / 5)


def _stop_escalation() -> None:
    global _saved_hooks
    if _saved_hooks is not None and _expired() is None:
        trace, profile = _saved_hooks
        _saved_hooks = None
        sys.settrace(trace)
        sys.setprofile(profile)


# The watchdog: when the alarm cannot do its job (the learner's code replaced, ignored or blocked the
# SIGALRM handler, or cancelled the timer), a thread raises the timeout in the main thread another way:
# through a second signal of the check's own, simulated (``_thread.interrupt_main``: no signal mask or
# timer involved), whose handler puts the alarm back; and if that handler was replaced too, with an
# asynchronous exception.
_WATCHDOG_SIGNAL = getattr(signal, "SIGRTMIN", signal.SIGUSR2) + 3 if hasattr(signal, "SIGRTMIN") \
    else signal.SIGUSR2
_set_async_exc = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_ulong, ctypes.py_object)(
    ("PyThreadState_SetAsyncExc", ctypes.pythonapi))
_watchdog: threading.Thread | None = None
_wake = threading.Event()
_saved_watchdog_handler: Any = None


def _on_watchdog(signum: int, frame: Any) -> None:
    d = _expired()
    if d is None or _in_guard(frame):
        return
    _rearm_after_tampering()
    d.last_fired = time.monotonic()
    raise CheckTimeout(deadline=d)


def _watchdog_loop() -> None:
    import _thread

    main = threading.main_thread().ident
    while True:
        with _lock:
            nearest = min((d.at for d in _active), default=None)
        if nearest is None:
            _wake.wait()
            _wake.clear()
            continue
        now = time.monotonic()
        if now < nearest + 0.1:
            _wake.wait(max(nearest + 0.1 - now, 0.01))
            _wake.clear()
            continue
        with _lock:
            d = next((x for x in _active if now >= x.at), None)
            silent = d is not None and now - max(d.last_fired, d.at) > 2 * REFIRE  # no alarm lately
            if silent:
                d.nudged += 1
                if d.nudged <= 3 and signal.getsignal(_WATCHDOG_SIGNAL) is _on_watchdog:
                    _thread.interrupt_main(_WATCHDOG_SIGNAL)
                else:
                    frame = sys._current_frames().get(main)
                    if frame is not None and not _in_guard(frame):
                        _set_async_exc(main, CheckTimeout)
        time.sleep(REFIRE)


def _start_watchdog() -> None:
    global _watchdog
    if _watchdog is None or not _watchdog.is_alive():
        _watchdog = threading.Thread(target=_watchdog_loop, name="npu_lab-check-watchdog", daemon=True)
        _watchdog.start()


def _forget_limits_in_child() -> None:
    """In a forked child: the parent's limits, their timer and watchdog thread did not come along (and the
    lock may have been held by a thread that did not either): start with none."""
    global _lock, _active, _watchdog, _wake, _saved_hooks, _held, _MAIN_THREAD
    _lock, _active, _watchdog, _wake, _saved_hooks = threading.RLock(), [], None, threading.Event(), None
    _held, _MAIN_THREAD = 0, _thread.get_ident()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_limits_in_child)


class time_limit:
    """``with time_limit(seconds): ...`` raises :class:`CheckTimeout` in the block after ``seconds``.

    Limits nest; each ends within its time whatever the code inside does (see the module's
    docstring). Outside the main thread, or with ``seconds <= 0``, there is no limit.
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.deadline: _Deadline | None = None

    def __enter__(self) -> _Deadline | None:
        global _saved_handler, _saved_watchdog_handler
        if self.seconds <= 0 or threading.current_thread() is not threading.main_thread() \
                or not hasattr(signal, "setitimer"):
            return None
        d = _Deadline(self.seconds, sys._getframe(1))
        with _lock:
            if not _active:
                _saved_handler = signal.getsignal(signal.SIGALRM)
                _saved_watchdog_handler = signal.getsignal(_WATCHDOG_SIGNAL)
                signal.signal(signal.SIGALRM, _on_alarm)
                signal.signal(_WATCHDOG_SIGNAL, _on_watchdog)
            else:
                _rearm_after_tampering()
            _active.append(d)
            _arm()
        self.deadline = d
        try:  # threading's code runs here, where a limit (this one, or an enclosing one) can raise
            _start_watchdog()
            _wake.set()
        except BaseException:
            self.__exit__()  # the with block is not entered: take the deadline off the list again
            raise
        return d

    def __exit__(self, *exc: object) -> None:
        d = self.deadline
        if d is None:
            return
        with _lock:
            if d in _active:
                _active.remove(d)
            try:
                if _active:
                    signal.signal(signal.SIGALRM, _on_alarm)
                    _arm()
                else:
                    signal.setitimer(signal.ITIMER_REAL, 0)
                    signal.signal(signal.SIGALRM, _saved_handler if _saved_handler is not None else signal.SIG_DFL)
                    signal.signal(_WATCHDOG_SIGNAL, _saved_watchdog_handler
                                  if _saved_watchdog_handler is not None else signal.SIG_DFL)
            except (ValueError, OSError, TypeError):
                pass
            _stop_escalation()


def owns(exc: BaseException, limit: time_limit) -> bool:
    """Whether ``exc`` is the timeout of ``limit`` (and not of an enclosing limit)."""
    if not isinstance(exc, CheckTimeout):
        return False
    return exc.deadline is None or exc.deadline is limit.deadline or exc.deadline not in _active


# ---------------------------------------------------------------------------------------------
# text that never fails
# ---------------------------------------------------------------------------------------------

_ENDLESS_TEXT: weakref.WeakSet[type] = weakref.WeakSet()


def safe_text(obj: Any, how: Callable[[Any], Any] = repr, limit: int = 2000, seconds: float = 0.5) -> str:
    """``how(obj)`` (``repr`` or ``str``) as a plain string, or a description if that fails.

    The learner's ``__repr__``/``__str__`` may raise, return a non-string, or never
    return; none of that reaches the check.
    """
    if type(obj) in (str, int, float, bool, type(None)) and how in (repr, str):
        text = how(obj)
    elif type(obj) in _ENDLESS_TEXT:  # its class's __str__/__repr__ never returned before: do not wait again
        text = f"<{type_name(obj)} object: its {getattr(how, '__name__', 'repr')}() never returned>"
    else:
        limiter = time_limit(seconds)
        try:
            with limiter:
                text = how(obj)
            if type(text) is not str:
                text = str.__str__(text) if isinstance(text, str) else \
                    f"<{type_name(obj)} object: its {how.__name__}() returned a {type_name(text)}>"
        except BaseException as exc:  # noqa: BLE001 - the learner's object may raise anything
            if isinstance(exc, CheckTimeout) and not owns(exc, limiter):
                raise
            what = "never returned" if isinstance(exc, CheckTimeout) else f"raised {type_name(exc)}"
            if isinstance(exc, CheckTimeout):
                _ENDLESS_TEXT.add(type(obj))
            text = f"<{type_name(obj)} object: its {getattr(how, '__name__', 'repr')}() {what}>"
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return text


def _safe_attr(exc: BaseException, name: str) -> Any:
    try:
        return object.__getattribute__(exc, name)
    except BaseException:  # noqa: BLE001
        return None


def causes(exc: BaseException | None, limit: int = 10) -> list[BaseException]:
    """``exc`` and the exceptions it wraps (``inner_exception``, ``__cause__``, ``__context__``)."""
    out: list[BaseException] = []
    while isinstance(exc, BaseException) and len(out) < limit and all(e is not exc for e in out):
        out.append(exc)
        inner = _safe_attr(exc, "inner_exception")
        exc = inner if isinstance(inner, BaseException) else (_CAUSE(exc) or _CONTEXT(exc))
    return out


#: Frames shown at most, the first and the last ones (a recursion has thousands).
MAX_FRAMES = (3, 6)


def trim(exc: BaseException) -> str:
    """The exception as the learner should see it: only frames of their own code.

    Frames inside npu_lab (the check itself), PyTorch or other installed
    libraries are dropped; the last library frame is named in one line so the
    learner knows where their call went wrong. An exception rebuilt from a forked child
    (:mod:`.forked`) was trimmed there, where its frames are.
    """
    from .forked import trimmed  # here: that module imports this one

    shown = trimmed(exc)
    if shown is not None:
        return shown
    try:
        frames = traceback.extract_tb(_TRACEBACK(exc))
    except BaseException:  # noqa: BLE001
        frames = []
    mine = [f for f in frames if _is_learner_frame(f.filename)]
    lines = []
    head, tail = MAX_FRAMES
    shown = mine if len(mine) <= head + tail else mine[:head] + [None] + mine[-tail:]
    for f in shown:
        if f is None:
            lines.append(f"  ... ({len(mine) - head - tail} more frames of your code)")
            continue
        where = f.filename if not f.filename.startswith("/tmp/ipykernel") else "cell"
        lines.append(f"  {where}, line {f.lineno}, in {f.name}")
        if f.line:
            lines.append(f"    {f.line.strip()}")
    if frames and frames[-1] not in mine:
        last = frames[-1]
        lib = os.path.basename(os.path.dirname(last.filename)) or last.filename
        lines.append(f"  (raised inside {lib}/{os.path.basename(last.filename)})")
    text = safe_text(exc, str, limit=600)
    message = f"{type_name(exc)}: {text}".strip() if text else type_name(exc)
    if len(message) > 600:
        message = message[:600] + " ..."
    return "\n".join(lines + [message])


# ---------------------------------------------------------------------------------------------
# captured output
# ---------------------------------------------------------------------------------------------

class CappedOutput(io.TextIOBase):
    """A text stream that keeps the first ``limit`` characters written to it and counts the rest."""

    def __init__(self, limit: int = OUTPUT_LIMIT) -> None:
        super().__init__()
        self.limit = limit
        self.parts: list[str] = []
        self.kept = 0
        self.dropped = 0

    def writable(self) -> bool:
        return True

    def write(self, s: Any) -> int:
        s = s if type(s) is str else safe_text(s, str)
        room = self.limit - self.kept
        if room > 0:
            self.parts.append(s[:room])
            self.kept += min(len(s), room)
        self.dropped += max(len(s) - max(room, 0), 0)
        return len(s)

    def text(self) -> str:
        out = "".join(self.parts)
        if self.dropped:
            out += f"\n... ({self.dropped:,} more characters not shown)"
        return out


# ---------------------------------------------------------------------------------------------
# calling the learner's code
# ---------------------------------------------------------------------------------------------

@dataclass
class Outcome:
    """What calling the learner's code gave: a value, or a trimmed error; and what it printed."""

    value: Any = None
    error: str = ""
    exception: BaseException | None = None
    output: str = ""

    @property
    def ok(self) -> bool:
        return self.exception is None

    @property
    def timed_out(self) -> bool:
        return isinstance(self.exception, CheckTimeout)

    @property
    def interrupted(self) -> bool:
        return isinstance(self.exception, KeyboardInterrupt)


class ProcessExit(BaseException):  # noqa: N818 - named for what the learner's code asked for
    """Raised in place of ``os._exit`` / ``os.abort`` called by the learner's code under :func:`call`.

    Those end the whole process at once (no ``finally``, no ``SystemExit``): in a notebook, the kernel dies and the
    check never gives a verdict. Under :func:`call` they raise this instead, on the calling thread only.
    """

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


@contextlib.contextmanager
def _exits_raise() -> Iterator[None]:
    """``os._exit``, ``posix._exit`` and ``os.abort`` raise :class:`ProcessExit` on this thread for the duration."""
    import posix

    me, pid = threading.get_ident(), os.getpid()
    real_exit, real_abort = os._exit, os.abort

    # A child forked on this thread has the same thread id but is another process: its own os._exit (a forked
    # check's child ends that way) must end it.
    def _exit(status: int = 0, *rest: Any) -> None:
        if threading.get_ident() != me or os.getpid() != pid:
            real_exit(status, *rest)
        raise ProcessExit(f"os._exit({status!r})")

    def abort() -> None:
        if threading.get_ident() != me or os.getpid() != pid:
            real_abort()
        raise ProcessExit("os.abort()")

    os._exit = posix._exit = _exit  # type: ignore[assignment]
    os.abort = abort  # type: ignore[assignment]
    try:
        yield
    finally:
        os._exit = posix._exit = real_exit  # type: ignore[assignment]
        os.abort = real_abort  # type: ignore[assignment]


def call(fn: Callable[[], Any], timeout: float = DEFAULT_TIMEOUT, capture: bool = True) -> Outcome:
    """Call ``fn()`` under a time limit, capturing its output; never raises.

    Exceptions of every kind (``KeyboardInterrupt`` and ``SystemExit`` too) come back
    in the outcome, trimmed; so does the timeout. Only the timeout of an enclosing
    limit (the whole check ran out of time) passes through. ``os._exit`` and ``os.abort``
    called by ``fn`` on this thread raise :class:`ProcessExit` instead of ending the process.
    """
    out = CappedOutput() if capture else None
    limiter = time_limit(timeout)
    result = Outcome()
    try:
        with contextlib.ExitStack() as stack:
            if out is not None:
                stack.enter_context(contextlib.redirect_stdout(out))
                stack.enter_context(contextlib.redirect_stderr(out))
            stack.enter_context(_exits_raise())
            with limiter:
                result.value = fn()
            if limiter.deadline is not None and limiter.deadline.fired:  # it swallowed the timeout, then returned
                raise CheckTimeout(deadline=limiter.deadline)
    except BaseException as exc:  # noqa: BLE001 - the learner's code may raise anything
        if isinstance(exc, CheckTimeout) and not owns(exc, limiter):
            raise
        if limiter.deadline is not None and limiter.deadline.fired and not isinstance(exc, CheckTimeout):
            exc = CheckTimeout(deadline=limiter.deadline)  # it swallowed the timeout, then failed otherwise
        result = Outcome(exception=exc)
        if isinstance(exc, CheckTimeout):
            result.error = f"CheckTimeout: your code ran longer than {timeout:g} s and was stopped (an infinite loop?)"
        elif isinstance(exc, KeyboardInterrupt):
            result.error = "KeyboardInterrupt: the call was interrupted, and the check stopped there\n" + trim(exc)
        elif isinstance(exc, SystemExit):
            result.error = trim(exc) + "\n(your code called exit() or sys.exit(); the check went on without it)"
        elif isinstance(exc, ProcessExit):
            result.error = (f"ProcessExit: your code called {exc.what}, which ends the whole process (in a notebook, "
                            "the kernel); the check stopped that call and went on without it")
        else:
            result.error = trim(exc)
    if out is not None:
        result.output = out.text()
    return result


# ---------------------------------------------------------------------------------------------
# a watchdog process for code no signal can stop
# ---------------------------------------------------------------------------------------------

_CRASH_SIGNALS = {signal.SIGSEGV: "a segmentation fault", signal.SIGBUS: "a bus error",
                  signal.SIGFPE: "a floating-point exception", signal.SIGILL: "an illegal instruction"}


def _running(pid: int, samples: int = 5) -> bool:
    """Whether the process is computing (state R, running or waiting for a CPU) rather than blocked."""
    for _ in range(samples):
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "R":
                    return True
        except (OSError, IndexError):
            return True  # cannot tell: assume it was computing
        time.sleep(0.01)
    return False


def _cpu_seconds(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return float("inf")  # cannot tell: assume it was computing


def die_with_parent() -> None:
    """In a forked child: be killed when the parent dies (Linux), so a child that forks in turn (a check that
    runs ranks in a process, probed in a child of its own) never outlives the one that would kill it."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the parent still kills its own child on time
        pass


def become_child() -> None:
    """First thing in a forked child that runs a piece of a check: die with the parent, drop the parent's
    alarm, signal mask, tracers and faulthandler, and send what C code prints (fds 1 and 2) to /dev/null
    (a crash is reported by the parent, not dumped on the learner's terminal)."""
    die_with_parent()
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    sys.settrace(None)
    sys.setprofile(None)
    faulthandler.disable()
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 1)
    os.dup2(null, 2)
    os.close(null)


def probe(fn: Callable[[], Any], timeout: float = DEFAULT_TIMEOUT) -> Outcome | None:
    """Run ``fn()`` in a forked child process first, where it can be killed.

    Returns an outcome that fails (the child ran out of time while computing, or
    crashed) or ``None`` when the call may run in this process (the child finished,
    or the probe could not tell, e.g. no ``fork`` on this system).
    """
    if not hasattr(os, "fork") or timeout <= 0:
        return None
    r, w = os.pipe()
    pid = -1
    reaped = False
    try:
        with held():  # a Ctrl-C that comes now is raised once the child is known (the cleanup below covers it)
            try:
                pid = os.fork()
            except OSError:
                os.close(w)
                return None
            if pid == 0:  # the child: no output, no Jupyter sockets, no handlers of the parent
                _probe_child(fn, w, timeout)
            os.close(w)
        start = time.monotonic()
        ready = False
        while True:
            left = timeout - (time.monotonic() - start)
            if left <= 0:
                break
            try:
                ready = bool(select.select([r], [], [], left)[0])
                break
            except InterruptedError:
                continue
        if ready:
            os.read(r, 16)
            _, status = os.waitpid(pid, 0)
            reaped = True
            if os.WIFSIGNALED(status) and os.WTERMSIG(status) in _CRASH_SIGNALS:
                what = _CRASH_SIGNALS[os.WTERMSIG(status)]
                return Outcome(exception=RuntimeError(what),
                               error=f"your code crashed the process it ran in ({what}): an index out of "
                                     "bounds in a compiled (numba) kernel? The check ran it in a separate "
                                     "process, so your notebook's kernel is still alive.")
            return None
        computing = _cpu_seconds(pid) >= 0.2 * timeout or _running(pid)
        end_child(pid)
        reaped = True
        if computing:  # it was computing, not blocked: a loop that does not end
            exc = CheckTimeout(f"your code ran longer than {timeout:g} s (an infinite loop?)")
            return Outcome(exception=exc, error=f"CheckTimeout: your code ran longer than {timeout:g} s and was "
                                                "stopped (an infinite loop? compiled code cannot be interrupted, "
                                                "so the check ran it in a separate process and ended that)")
        return None  # blocked, not computing: the fork itself may be the reason; let the process decide
    finally:
        end_child(pid, r, reaped)  # interrupted (Ctrl-C): do not leave the child running


def _probe_child(fn: Callable[[], Any], w: int, timeout: float) -> None:
    """The child's side of :func:`probe`: run ``fn`` quietly, say "done" through ``w``; never returns."""
    try:
        become_child()
        sys.stdout = sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - the process ends below
        signal.alarm(int(timeout) + 5)  # a backstop: the parent kills it first
        try:
            fn()
        except BaseException:  # noqa: BLE001 - the parent runs it again and reports the error
            pass
        os.write(w, b"done")
    finally:
        os._exit(0)


def end_child(pid: int, fd: int | None = None, reaped: bool = False) -> None:
    """Close ``fd`` and, unless it was ``reaped``, kill the child process ``pid`` and wait for it.

    Nothing interrupts this (see :class:`held`): call it as the first statement of a ``finally``.
    """
    with held():
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)
        if pid > 0 and not reaped:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)


def calls_compiled_code(obj: Any, depth: int = 6) -> bool:
    """Whether ``obj`` is, or may call, a function compiled by numba (which no signal can stop).

    Follows functions through the names they use (globals, closures, defaults),
    methods of classes, ``functools.partial`` and bound methods, ``depth`` levels deep.
    """
    numba = sys.modules.get("numba")
    if numba is None:
        return False
    try:
        from numba.core.dispatcher import Dispatcher
    except ImportError:  # pragma: no cover - another numba layout
        return False
    import functools
    import types

    seen: set[int] = set()

    def code_names(code: types.CodeType) -> set[str]:
        names = set(code.co_names)
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                names |= code_names(const)
        return names

    def visit(x: Any, level: int) -> bool:
        if id(x) in seen or level > depth:
            return False
        seen.add(id(x))
        try:
            if isinstance(x, Dispatcher):
                return True
            if isinstance(x, types.MethodType):
                return visit(x.__func__, level)
            if isinstance(x, functools.partial):
                return any(visit(v, level + 1) for v in (x.func, *x.args, *x.keywords.values()))
            if isinstance(x, types.FunctionType):
                g = x.__globals__
                refs = [g[n] for n in code_names(x.__code__) if n in g]
                refs += [c.cell_contents for c in (x.__closure__ or ()) if _has_contents(c)]
                refs += list(x.__defaults__ or ()) + list((x.__kwdefaults__ or {}).values())
                return any(visit(v, level + 1) for v in refs
                           if callable(v) or type(v) in (dict, list, tuple, set, frozenset)
                           or isinstance(v, types.ModuleType))
            if isinstance(x, type) and x.__module__ not in ("builtins",) and not x.__module__.startswith("torch"):
                return any(visit(v, level + 1) for v in vars(x).values()
                           if isinstance(v, (types.FunctionType, staticmethod, classmethod, Dispatcher)))
            if isinstance(x, (staticmethod, classmethod)):
                return visit(x.__func__, level)
            if type(x) in (dict, list, tuple, set, frozenset) and len(x) <= 200:
                items = x.values() if type(x) is dict else x
                return any(visit(v, level + 1) for v in items if callable(v) or type(v) in (dict, list, tuple))
            if isinstance(x, types.ModuleType) and _is_learner_frame(getattr(x, "__file__", None) or "<"):
                return any(visit(v, level + 1) for v in list(vars(x).values())[:500]
                           if isinstance(v, (types.FunctionType, Dispatcher, type)))
        except BaseException:  # noqa: BLE001 - an object that will not be looked at: assume not
            return False
        return False

    return visit(obj, 0)


def _has_contents(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018
        return True
    except ValueError:
        return False
