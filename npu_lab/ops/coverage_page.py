"""The operator coverage page: the OpInfo sweep's results, grouped by family.

``python -m npu_lab.ops.sweep --write`` runs :func:`npu_lab.ops.sweep.sweep`
with the CPU fallback off and on and writes ``docs/coverage.md``: the counts
for both modes, then one table per family (activations, convolution and
pooling, linear algebra, ...) saying which OpInfos are native, which pass only
through the fallback and which are missing. ``tests/test_opinfo_sweep.py``
checks that the committed page is the one the sweep writes today.
"""

from __future__ import annotations

import re
from pathlib import Path

from .sweep import STATUSES, SweepReport

PAGE = Path(__file__).resolve().parents[2] / "docs" / "coverage.md"

_MATMUL = {"addmm", "addmm.decomposed", "addmv", "addbmm", "baddbmm", "dot", "vdot", "bmm", "mv", "addr", "mm",
           "matmul", "__rmatmul__", "einsum", "inner", "outer", "kron", "tensordot", "nn.functional.linear",
           "nn.functional.bilinear", "torch._scaled_mm", "torch._scaled_mm_v2", "bmm.triton_optimized",
           "chain_matmul", "linalg.multi_dot", "linalg.vecdot", "cdist", "nn.functional.pdist", "dist",
           "nn.functional.pairwise_distance", "nn.functional.cosine_similarity"}
_LINALG_WORDS = ("cholesky", "lu", "qr", "svd", "pinverse", "det", "triangular_solve", "geqrf", "ormqr",
                 "matrix_exp", "eig", "inverse", "solve", "lstsq", "pca_lowrank")
_SORTING = {"sort", "argsort", "msort", "topk", "kthvalue", "median", "nanmedian", "mode", "unique",
            "unique_consecutive", "bucketize", "searchsorted", "histc", "histogram", "histogramdd", "bincount",
            "nonzero", "nonzero_static", "argwhere", "isin", "quantile", "nanquantile"}
_SCANS = {"cumsum", "cumprod", "cummax", "cummin", "logcumsumexp", "cumulative_trapezoid", "diff", "gradient",
          "trapz", "trapezoid"}
_INDEXING = ("gather", "scatter", "index_", "take", "put", "masked_fill", "masked_scatter", "masked_select",
             "__getitem__", "where", "_unsafe_masked", "nn.functional.embedding", "nn.functional.one_hot",
             "_segment_reduce")
_FACTORIES = ("empty", "zeros", "ones", "full", "new_", "arange", "linspace", "logspace", "eye", "scalar_tensor",
              "tril_indices", "triu_indices")
_COPIES = {"item", "to", "clone", "contiguous", "zero_", "fill", "resize_", "resize_as_", "equal", "allclose"}
_SPECIAL = {"mvlgamma", "polygamma", "digamma", "erf", "erfc", "erfinv", "lgamma", "i0", "igamma", "igammac", "sinc",
            "logit", "xlogy"}
_RANDOM_WORDS = ("rand", "normal.", "uniform", "bernoulli", "multinomial", "cauchy", "exponential", "geometric",
                 "log_normal", "dropout", "rrelu", "fractional_max_pool")
_SPATIAL = ("conv", "pool", "unpool", "nn.functional.unfold", "pixel_", "interpolate", "upsample", "grid_sample",
            "grid_sampler", "nn.functional.pad", "constant_pad_nd", "channel_shuffle")
_ATTENTION = ("attention", "multi_head")

FAMILIES = ("activations and softmax", "losses", "normalization", "convolution, pooling and resampling",
            "attention", "matmul and distances", "linear algebra", "fft and signal", "reductions", "scans",
            "sorting, searching and counting", "indexing, scatter and embedding", "random",
            "factories and copies", "special functions", "masked", "sparse", "pointwise unary",
            "pointwise binary and ternary", "views and shapes")


_LOSS_PREFIXES = ("nn.functional.cross_entropy", "nn.functional.binary_cross_entropy",
                  "nn.functional.linear_cross_entropy", "nn.functional.kl_div", "nn.functional.nll")


def family(name: str, kind: str = "OpInfo") -> str:
    """The family an OpInfo belongs to on the coverage page (``kind`` is its OpInfo class's name)."""
    base = name.split(".")[0] if not name.startswith(("nn.", "torch.", "linalg.", "fft.", "special.")) else name
    if name.startswith("masked."):
        return "masked"
    if name.startswith("special.") or base in _SPECIAL:
        return "special functions"
    if name.startswith("sparse.") or name == "to_sparse":
        return "sparse"
    if name.startswith(("fft.", "signal.")) or base in ("stft", "istft"):
        return "fft and signal"
    if (any(w in name for w in _RANDOM_WORDS) or base == "normal") and name != "__rand__":
        return "random"
    if any(w in name for w in _ATTENTION):
        return "attention"
    if "loss" in name or name.startswith(_LOSS_PREFIXES):
        return "losses"
    if name in _MATMUL:
        return "matmul and distances"
    if re.search(r"(^|[._])(group|layer|batch|instance|rms|local_response)_norm|^nn\.functional\.normalize|"
                 r"^native_batch|_native_batch|_batch_norm", name):
        return "normalization"
    if any(w in name for w in _SPATIAL):
        return "convolution, pooling and resampling"
    if name.startswith("linalg.") or any(re.search(rf"(^|_){w}", base) for w in _LINALG_WORDS) or base in (
            "logdet", "slogdet", "cholesky_inverse"):
        if name.startswith("linalg.") and name in ("linalg.diagonal", "linalg.cross", "linalg.vander"):
            return "views and shapes" if name == "linalg.diagonal" else "pointwise binary and ternary"
        return "linear algebra"
    if "softmax" in name or "softmin" in name or name.startswith("nn.functional.") and kind == "UnaryUfuncInfo" \
            or name in ("nn.functional.hardswish", "nn.functional.leaky_relu", "nn.functional.glu",
                        "nn.functional.gelu", "nn.functional.logsigmoid", "nn.functional.prelu"):
        return "activations and softmax"
    if name in _SORTING:
        return "sorting, searching and counting"
    if base in _SCANS or name in _SCANS:
        return "scans"
    if kind == "ReductionOpInfo" or base in ("max", "min", "aminmax", "var_mean", "std_mean", "logsumexp", "norm",
                                              "trace", "renorm"):
        return "reductions"
    if any(name.startswith(w) for w in _INDEXING) or "_scatter" in name:
        return "indexing, scatter and embedding"
    if base.startswith(_FACTORIES) or base in _COPIES:
        return "factories and copies"
    if kind == "UnaryUfuncInfo":
        return "pointwise unary"
    if kind == "BinaryUfuncInfo" or base in ("addcmul", "addcdiv", "lerp", "clamp", "logaddexp2", "cross",
                                             "jiterator_4inputs_with_extra_args", "jiterator_2inputs_2outputs"):
        return "pointwise binary and ternary"
    return "views and shapes"


def _count_line(report: SweepReport) -> str:
    c = report.counts()
    mode = "on" if report.fallback else "off"
    return f"| {mode} | {len(report.ops)} | " + " | ".join(str(c.get(s, 0)) for s in STATUSES) + " |"


def render(off: SweepReport, on: SweepReport, kinds: dict[str, str], seconds: float | None = None) -> str:
    """The page's Markdown for the two sweeps (``kinds``: OpInfo name -> its OpInfo class name)."""
    on_status = {o.name: o for o in on.ops}
    lines = [
        "# Operator coverage: PyTorch's OpInfo database on the npu",
        "",
        "Written by `python -m npu_lab.ops.sweep --write` (do not edit by hand); "
        "`tests/test_opinfo_sweep.py` fails when this page is out of date or an OpInfo is `wrong`.",
        "",
        f"Every OpInfo in `op_db`, {str(off.dtype).removeprefix('torch.')}, its first 3 samples, forward and "
        "(where the OpInfo supports autograd) backward, compared with PyTorch's CPU result. "
        "**native**: passes with no operator falling back to the CPU; **fallback**: passes only because some "
        "operators ran on the CPU; **missing**: an operator has no npu kernel; **wrong**: differs from the CPU, "
        "or wrote outside a tensor's storage (every OpInfo runs under `npu_lab.memcheck()`, guard bytes after "
        "every block) (a bug; the test allows none); **error**: the npu raised where the CPU did not; "
        "**skipped**: nothing to compare (no CPU float32 kernel, or the CPU rejects every sample).",
        "",
        "| CPU fallback | OpInfos | " + " | ".join(STATUSES) + " |",
        "|---|---|" + "---|" * len(STATUSES),
        _count_line(off),
        _count_line(on),
        "",
    ]
    if seconds is not None:
        lines += [f"The sweep took {seconds:.0f} s on the machine that wrote this page (with the fallback on, "
                  "only the OpInfos that are not native with it off run again).", ""]
    lines += ["The \"other\" column counts skipped OpInfos. Half precision: the core of a mixed-precision "
              "training step (matmul, convolution, elementwise, reductions, softmax, norms, losses, attention, "
              "embedding: 36 OpInfos) is native in float16 and bfloat16 too "
              "(`tests/test_opinfo_sweep.py::test_half_precision_core_is_native`).", ""]
    by_family: dict[str, list] = {f: [] for f in FAMILIES}
    for o in off.ops:
        by_family[family(o.name, kinds.get(o.name, "OpInfo"))].append(o)
    lines += ["## By family", "", "| family | OpInfos | native | fallback only | missing | other |",
              "|---|---|---|---|---|---|"]
    for fam, ops in by_family.items():
        n = sum(o.status == "native" for o in ops)
        fb = sum(o.status == "missing" and on_status[o.name].status in ("native", "fallback") for o in ops)
        miss = sum(o.status == "missing" for o in ops) - fb
        lines.append(f"| [{fam}](#{_anchor(fam)}) | {len(ops)} | {n} | {fb} | {miss} | {len(ops) - n - fb - miss} |")
    lines.append("")
    for fam, ops in by_family.items():
        lines += [f"## {fam}", "", "| OpInfo | fallback off | fallback on | notes |", "|---|---|---|---|"]
        for o in sorted(ops, key=lambda o: o.name):
            other = on_status[o.name]
            note = o.detail if o.status != "native" else ("forward and backward" if o.grads_checked else "forward")
            if other.status == "fallback":
                note = (note + "; falls back: " if note else "falls back: ") + ", ".join(other.fell_back)
            note = note.replace("|", "\\|").replace("\n", " ")[:160]
            lines.append(f"| `{o.name}` | {o.status} | {other.status} | {note} |")
        lines.append("")
    return "\n".join(lines)


def _anchor(title: str) -> str:
    return re.sub(r"[^a-z0-9 -]", "", title.lower()).replace(" ", "-")


def parse_statuses(text: str) -> dict[str, tuple[str, str]]:
    """OpInfo name -> (status with the fallback off, status with it on), read back from a page."""
    rows = re.findall(r"^\| `([^`]+)` \| (\w+) \| (\w+) \|", text, flags=re.M)
    return {name: (off, on) for name, off, on in rows}


def write(off: SweepReport, on: SweepReport, kinds: dict[str, str], seconds: float | None = None,
          path: Path = PAGE) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(off, on, kinds, seconds) + "\n")
    return path
