"""numba kernels for the activations that are not a single elementwise expression."""

import numba
import numpy as np
from numba import prange

_F53 = 1.0 / (1 << 53)


@numba.njit(parallel=True, cache=True, nogil=True)
def rrelu_train(bits, x, out, noise, lower, span):
    """Randomized leaky ReLU in training: where x <= 0, noise = r ~ U(lower, lower + span) (53 random bits,
    rounded to the tensor's dtype) and out = x * noise; elsewhere noise = 1 and out = x."""
    for i in prange(x.shape[0]):
        xi = x[i]
        if xi <= 0:
            noise[i] = lower + span * ((bits[i] >> np.uint64(11)) * _F53)
            out[i] = xi * noise[i]
        else:
            noise[i] = 1
            out[i] = xi
