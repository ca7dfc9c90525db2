"""Tools for chapter 8's path of bringing a model up on a new chip.

* :func:`verify` - run a model on ``npu`` and on the CPU and compare outputs
  and gradients with error statistics;
* :func:`readiness` - the adaptation checklist computed live for a model:
  operators covered, conformance, fusion in the compiled graph, speed against
  the CPU.
"""

from .readiness import Readiness, readiness
from .verify import Verification, verify

__all__ = ["Readiness", "Verification", "readiness", "verify"]
