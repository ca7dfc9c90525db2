"""ATen operator implementations for the ``npu`` device (PrivateUse1 kernels).

Importing this package registers every kernel with the dispatcher.
"""

from . import copy, factories, indexing, linalg, losses, pointwise, random, reductions, views  # noqa: F401
from .registry import CLAIMED, claimed_ops  # noqa: F401
