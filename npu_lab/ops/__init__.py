"""ATen operator implementations for the ``npu`` device (PrivateUse1 kernels).

Importing this package registers every kernel with the dispatcher.
"""

from . import (  # noqa: F401  (each module registers its kernels on import)
    attention,
    conv,
    copy,
    factories,
    fused,
    indexing,
    layout,
    linalg,
    losses,
    norm,
    pointwise,
    random,
    recurrent,
    reductions,
    shape,
)
from .registry import CLAIMED, claimed_ops  # noqa: F401
