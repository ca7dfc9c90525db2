"""Run code in a fresh Python process: what a machine sees that never imported npu_lab in this session.

A notebook's process has already turned PyTorch's ``PrivateUse1`` key into the ``npu`` device, and that
happens once per process. To show how a backend package gives a device its Python face, or how
``import torch`` loads a backend by itself, chapter 8a runs the code in a new interpreter::

    def bring_up(runtime: str) -> None:
        import torch
        torch.utils.rename_privateuse1_backend("hello")
        ...

    run_fresh(bring_up, "/path/to/the/runtime.so")   # prints what the new process printed

:func:`run_fresh` runs a function's source (it imports what it needs itself) or a script, with arguments
as strings, and returns what the process printed and how it ended.
"""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

#: Variables a fresh process must not inherit from a notebook: the bare device of the bring-up track.
_DROPPED = ("NPU_LAB_BARE",)


@dataclass
class Fresh:
    """What a fresh process did: its standard output and error, and its exit status (negative: a signal)."""

    stdout: str
    stderr: str
    returncode: int

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def ending(self) -> str:
        if self.returncode < 0:
            return f"the process was killed by signal {-self.returncode}"
        return f"the process exited with {self.returncode}"

    def __repr__(self) -> str:
        text = self.stdout.rstrip()
        if not self.ok:
            last = (self.stderr.strip().splitlines() or ["(nothing on stderr)"])[-1]
            text += f"\n({self.ending()}: {last[:300]})"
        return text

    def _repr_pretty_(self, printer, cycle: bool) -> None:  # IPython shows the output as it was printed
        printer.text(repr(self))


def script_of(fn: Callable[..., object]) -> str:
    """The source of ``fn`` followed by a call to it with the process's arguments (``sys.argv[1:]``)."""
    source = textwrap.dedent(inspect.getsource(fn))
    return f"{source}\n\nif __name__ == '__main__':\n    import sys\n    {fn.__name__}(*sys.argv[1:])\n"


def run_fresh(code: Callable[..., object] | str, *args: object, env: Mapping[str, str] | None = None,
              path: Sequence[str] = (), timeout: float = 300.0) -> Fresh:
    """Run ``code`` (a function, called with ``args`` as strings, or a script's text) in a new Python process.

    The process uses this environment's interpreter; ``env`` adds or replaces environment variables,
    ``path`` goes in front of ``PYTHONPATH`` (where a package installed with ``pip --target`` is found).
    Raises ``TimeoutError`` if it runs past ``timeout`` seconds (it is stopped).
    """
    script = script_of(code) if callable(code) else str(code)
    environment = {k: v for k, v in os.environ.items() if k not in _DROPPED}
    environment.update(env or {})
    if path:
        environment["PYTHONPATH"] = os.pathsep.join([*map(str, path), environment.get("PYTHONPATH", "")]).rstrip(
            os.pathsep)
    try:
        proc = subprocess.run([sys.executable, "-c", script, *map(str, args)], capture_output=True, text=True,
                              timeout=timeout, env=environment)
    except subprocess.TimeoutExpired as exc:
        raise TimeoutError(f"the fresh process did not finish within {timeout:g} s (it was stopped)") from exc
    return Fresh(proc.stdout, proc.stderr, proc.returncode)
