"""Memcheck: catch a kernel that writes past the end of a tensor's storage.

What compute-sanitizer's memcheck does for CUDA, with guard bytes: while a
:class:`memcheck` is active, the allocator gives every new npu block at least 256
bytes more than asked for and paints them with ``0xA5``. A kernel that writes
outside its output's storage changes them; the allocator checks them when the block
is freed, and :meth:`memcheck.scan` checks every live block. (Blocks allocated
before the check began have no guard bytes and are not checked.)

    with npu_lab.memcheck() as mc:
        y = torch.sort(x_npu).values
    mc.damaged            # 0: every block's guard bytes were intact

Leaving the ``with`` block raises :class:`MemcheckError` if any guard was
damaged. The OpInfo sweep (``npu_lab.ops.sweep``) runs every operator under it.
"""

from __future__ import annotations

from . import native


class MemcheckError(RuntimeError):
    """A kernel wrote outside a tensor's storage (into the guard bytes after its block)."""


class memcheck:  # noqa: N801 - used like a function, as torch.no_grad is
    """Guard bytes after every npu block allocated while active; see the module docstring."""

    def __init__(self) -> None:
        self._C = native.load()
        self.checked = 0
        self.damaged = 0
        self.notes: list[str] = []

    def __enter__(self) -> memcheck:
        if self._C.memcheck_enabled():
            raise RuntimeError("npu_lab.memcheck() is already active")
        self._C.memcheck_reset()
        self._C.memcheck_enable(True)
        return self

    def scan(self) -> int:
        """Check every live guarded block now; the total of damaged blocks found so far."""
        self._C.memcheck_scan()
        self.checked, self.damaged, self.notes = self._C.memcheck_report()
        return self.damaged

    def reset(self) -> None:
        """Forget the damage found so far (the guard bytes themselves are not repainted)."""
        self._C.memcheck_reset()
        self.checked, self.damaged, self.notes = 0, 0, []

    def __exit__(self, kind: object, *rest: object) -> None:
        self.scan()
        self._C.memcheck_enable(False)
        if self.damaged and kind is None:
            raise MemcheckError(f"{self.damaged} npu block(s) written past the end of their storage:\n  "
                                + "\n  ".join(self.notes))

    def __repr__(self) -> str:
        return f"memcheck(checked={self.checked}, damaged={self.damaged})"
