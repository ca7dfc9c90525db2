"""Plausible wrong answers to chapter 5a's exercises (dispatch modes, FakeTensor, functionalization).

Each is run in the namespace of the executed solution notebook, which has imported ``torch``,
``FakeTensorMode`` and ``TorchDispatchMode``.
"""


def _fake(body: str) -> str:
    return "def window_sums_fake(x, size, step):\n" + body


def _counter(count: str, run: str = "    with FakeTensorMode(), Count() as c:\n        program()\n") -> str:
    """A count_new_bytes whose mode adds ``count`` (an expression over func, out) for every call."""
    return ("class Count(TorchDispatchMode):\n"
            "    def __init__(self):\n        super().__init__()\n        self.total = 0\n"
            "    def __torch_dispatch__(self, func, types, args=(), kwargs=None):\n"
            "        out = func(*args, **(kwargs or {}))\n"
            f"        self.total += {count}\n"
            "        return out\n"
            "def count_new_bytes(program):\n" + run + "    return c.total\n")


#: the right rule, over the schema's returns (used by the wrong answers that get something else wrong)
_FRESH = ("sum(t.untyped_storage().nbytes() for r, v in zip(func._schema.returns, "
          "out if len(func._schema.returns) > 1 else [out]) if r.alias_info is None "
          "for t in (v if isinstance(v, (list, tuple)) else [v]) if isinstance(t, torch.Tensor))")

WRONG: dict[str, list[str]] = {
    "ch5a.fake_impl": [
        # forgets the leading dimensions: one row of windows
        _fake("    n = (x.shape[-1] - size) // step + 1 if x.shape[-1] >= size else 0\n"
              "    return x.new_empty((n,))"),
        # one window too few
        _fake("    n = (x.shape[-1] - size) // step if x.shape[-1] >= size else 0\n"
              "    return x.new_empty((*x.shape[:-1], n))"),
        # ignores the step
        _fake("    n = x.shape[-1] - size + 1 if x.shape[-1] >= size else 0\n"
              "    return x.new_empty((*x.shape[:-1], n))"),
        # no case for a window longer than the row: a negative (or wrong) count
        _fake("    n = (x.shape[-1] - size) // step + 1\n"
              "    return x.new_empty((*x.shape[:-1], n))"),
        # computes the windows with unfold, which refuses a window longer than the row
        _fake("    return x.unfold(-1, size, step).sum(-1)"),
        # torch.empty with the default dtype: float32 for a float64 input
        _fake("    n = (x.shape[-1] - size) // step + 1 if x.shape[-1] >= size else 0\n"
              "    return torch.empty((*x.shape[:-1], n), device=x.device)"),
        # torch.empty on the default device: the cpu for an npu input
        _fake("    n = (x.shape[-1] - size) // step + 1 if x.shape[-1] >= size else 0\n"
              "    return torch.empty((*x.shape[:-1], n), dtype=x.dtype)"),
        # "only the shape matters": a slice of x of the right shape, a view of the input
        _fake("    n = (x.shape[-1] - size) // step + 1 if x.shape[-1] >= size else 0\n"
              "    return x[..., :n]"),
        # turns the length into a Python int: the symbolic length becomes a constant
        _fake("    length = int(x.shape[-1])\n"
              "    n = (length - size) // step + 1 if length >= size else 0\n"
              "    return x.new_empty((*x.shape[:-1], n))"),
        # computes the real sums from the data: a fake tensor has none
        _fake("    n = (x.shape[-1] - size) // step + 1 if x.shape[-1] >= size else 0\n"
              "    rows = x.reshape(-1, x.shape[-1]).tolist()\n"
              "    sums = [[sum(r[j * step:j * step + size]) for j in range(n)] for r in rows]\n"
              "    return torch.tensor(sums, dtype=x.dtype, device=x.device).reshape(*x.shape[:-1], n)"),
    ],
    "ch5a.new_bytes": [
        # counts every returned tensor: views and in-place results too
        _counter("sum(t.untyped_storage().nbytes() for t in (out if isinstance(out, (list, tuple)) else [out]) "
                 "if isinstance(t, torch.Tensor))"),
        # numel * element_size: misses the gap in a strided storage
        _counter(_FRESH.replace("t.untyped_storage().nbytes()", "t.numel() * t.element_size()")),
        # only a single returned tensor counts: misses (values, indices) and lists of outputs
        _counter("(out.untyped_storage().nbytes() if isinstance(out, torch.Tensor) "
                 "and func._schema.returns[0].alias_info is None else 0)"),
        # counts only the first return of each call
        _counter("sum(t.untyped_storage().nbytes() for t in ((out[0] if isinstance(out, tuple) else out) if "
                 "isinstance(out, (list, tuple)) and len(func._schema.returns) > 1 else "
                 "(out if isinstance(out, list) else [out])) if isinstance(t, torch.Tensor) "
                 "and func._schema.returns[0].alias_info is None)"),
        # no FakeTensorMode: the right count, but the program really runs and allocates on the npu
        _counter(_FRESH, run="    with Count() as c:\n        program()\n"),
        # skips the calls that return lists ("a list is never a tensor")
        _counter("(0 if isinstance(out, list) else " + _FRESH + ")"),
        # returns the mode's count as a float (bytes as a size in a unit)
        _counter(_FRESH).replace("    return c.total\n", "    return float(c.total)\n"),
    ],
}
