"""ATen operator implementations for the ``npu`` device (PrivateUse1 kernels).

Importing this package registers every kernel with the dispatcher.
"""

from . import (  # noqa: F401  (each module registers its kernels on import)
    activations,
    attention,
    conv,
    copy,
    factories,
    fft,
    foreach,
    fused,
    indexing,
    layout,
    linalg,
    linalg_decomp,
    losses,
    norm,
    pointwise,
    random,
    recurrent,
    reductions,
    rnn_sequence,
    scans,
    shape,
    sorting,
    spatial,
    special,
)
from .registry import CLAIMED, claimed_ops  # noqa: F401
