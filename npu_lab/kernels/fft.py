"""numba FFT kernels: iterative radix-2 Cooley-Tukey, and Bluestein's chirp-z for every other length.

numba has no ``np.fft``, so the transforms are written here. Every kernel transforms the
middle axis of an ``(outer, n, inner)`` array, one line at a time (lines in parallel), in
complex128 whatever the storage type (so float32 results are as accurate as the CPU's
pocketfft). A :class:`Plan` holds the tables for one length ``n``:

* ``n`` a power of two: the bit-reversal permutation and the twiddles ``exp(-2 pi i k / n)``;
* otherwise Bluestein: ``X_k = w_k * sum_j (x_j w_j) conj(w_{k-j})`` with the chirp
  ``w_k = exp(-i pi k^2 / n)``, a convolution done with power-of-two FFTs of length
  ``m >= 2n - 1`` (the FFT of the chirp filter is precomputed).

Inverse transforms use ``ifft(x) = conj(fft(conj(x)))`` (unnormalised; the caller's scale
applies the normalisation).
"""

from __future__ import annotations

import functools

import numba
import numpy as np
from numba import prange

_opts = dict(cache=True, nogil=True)


@numba.njit(**_opts)
def fft_pow2(a, rev, tw):
    """In-place forward DFT of ``a[:m]`` (complex128, m = len(rev) a power of two), iterative radix-2."""
    m = rev.shape[0]
    for i in range(m):
        j = rev[i]
        if i < j:
            t = a[i]
            a[i] = a[j]
            a[j] = t
    size = 2
    while size <= m:
        half = size // 2
        step = m // size
        for start in range(0, m, size):
            for k in range(half):
                w = tw[k * step]
                u = a[start + k]
                v = w * a[start + k + half]
                a[start + k] = u + v
                a[start + k + half] = u - v
        size *= 2


@numba.njit(**_opts)
def transform(buf, work, n, rev, tw, chirp, bfilter):
    """In-place forward DFT of ``buf[:n]``: radix-2 when ``chirp`` is empty, else Bluestein through ``work``."""
    if chirp.shape[0] == 0:
        if n > 1:
            fft_pow2(buf, rev, tw)
        return
    m = rev.shape[0]
    for k in range(n):
        work[k] = buf[k] * chirp[k]
    for k in range(n, m):
        work[k] = 0
    fft_pow2(work, rev, tw)
    for k in range(m):  # the convolution's inverse FFT as conj(fft(conj(.)))
        work[k] = (work[k] * bfilter[k]).conjugate()
    fft_pow2(work, rev, tw)
    inv_m = 1.0 / m
    for k in range(n):
        buf[k] = work[k].conjugate() * inv_m * chirp[k]


@numba.njit(parallel=True, **_opts)
def c2c(x, out, inverse, scale, rev, tw, chirp, bfilter, chunks):
    """out[o, :, i] = scale * DFT (inverse: conjugate-sign DFT) of x[o, :, i]; both (outer, n, inner)."""
    outer, n, inner = out.shape
    lines = outer * inner
    mwork = rev.shape[0] if chirp.shape[0] else 0
    for c in prange(chunks):
        buf = np.empty(max(n, rev.shape[0]), np.complex128)
        work = np.empty(mwork, np.complex128)
        for line in range(c * lines // chunks, (c + 1) * lines // chunks):
            o = line // inner
            i = line - o * inner
            for k in range(n):
                v = np.complex128(x[o, k, i])
                buf[k] = v.conjugate() if inverse else v
            transform(buf, work, n, rev, tw, chirp, bfilter)
            for k in range(n):
                v = buf[k]
                out[o, k, i] = (v.conjugate() if inverse else v) * scale


@numba.njit(parallel=True, **_opts)
def r2c(x, out, scale, rev, tw, chirp, bfilter, chunks):
    """out[o, k, i] = scale * DFT(x[o, :, i])[k] for k < out.shape[1]: real x (outer, n, inner), complex out."""
    outer, n, inner = x.shape
    nout = out.shape[1]
    lines = outer * inner
    mwork = rev.shape[0] if chirp.shape[0] else 0
    for c in prange(chunks):
        buf = np.empty(max(n, rev.shape[0]), np.complex128)
        work = np.empty(mwork, np.complex128)
        for line in range(c * lines // chunks, (c + 1) * lines // chunks):
            o = line // inner
            i = line - o * inner
            for k in range(n):
                buf[k] = np.complex128(x[o, k, i])
            transform(buf, work, n, rev, tw, chirp, bfilter)
            for k in range(nout):
                out[o, k, i] = buf[k] * scale


@numba.njit(parallel=True, **_opts)
def c2r(x, out, scale, rev, tw, chirp, bfilter, chunks):
    """Real inverse DFT of Hermitian half-spectra: x (outer, >= n//2 + 1, inner) complex, out (outer, n, inner) real.

    The full spectrum is X[k] = x[k] for k <= n/2 and conj(x[n-k]) above; the imaginary parts of
    the zero and Nyquist frequencies drop out (taking the real part), as in pocketfft.
    """
    outer, n, inner = out.shape
    lines = outer * inner
    mwork = rev.shape[0] if chirp.shape[0] else 0
    for c in prange(chunks):
        buf = np.empty(max(n, rev.shape[0]), np.complex128)
        work = np.empty(mwork, np.complex128)
        for line in range(c * lines // chunks, (c + 1) * lines // chunks):
            o = line // inner
            i = line - o * inner
            for k in range(n // 2 + 1):
                buf[k] = np.complex128(x[o, k, i]).conjugate()
            for k in range(1, (n + 1) // 2):
                buf[n - k] = np.complex128(x[o, k, i])
            transform(buf, work, n, rev, tw, chirp, bfilter)
            for k in range(n):
                out[o, k, i] = buf[k].real * scale


class Plan:
    """The tables :func:`transform` needs for a length-``n`` DFT (see the module docstring)."""

    def __init__(self, n: int) -> None:
        self.n = n
        if n & (n - 1) == 0:
            m, self.chirp, self.bfilter = max(n, 1), np.empty(0, np.complex128), np.empty(0, np.complex128)
        else:
            m = 1 << (2 * n - 2).bit_length()
            k = np.arange(n, dtype=np.int64)
            # k^2 mod 2n keeps the chirp's angle small (exact in integers) for large n
            self.chirp = np.exp(-1j * np.pi * ((k * k) % (2 * n)) / n)
        bits = max(m.bit_length() - 1, 0)
        idx = np.arange(m, dtype=np.int64)
        rev = np.zeros(m, np.int64)
        for b in range(bits):
            rev |= ((idx >> b) & 1) << (bits - 1 - b)
        self.rev = rev
        self.tw = np.exp(-2j * np.pi * np.arange(max(m // 2, 1)) / m)
        if n & (n - 1):
            b = np.zeros(m, np.complex128)
            b[:n] = np.conj(self.chirp)
            b[m - n + 1:] = np.conj(self.chirp[1:])[::-1]
            fft_pow2(b, self.rev, self.tw)
            self.bfilter = b
        self.flops = 5.0 * m * max(bits, 1) * (3 if n & (n - 1) else 1)

    @property
    def tables(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        return self.rev, self.tw, self.chirp, self.bfilter


@functools.lru_cache(maxsize=64)
def plan(n: int) -> Plan:
    """The (cached) plan of a length-``n`` transform."""
    return Plan(n)


def chunks(lines: int) -> int:
    """How many parallel chunks to split ``lines`` transforms into."""
    return max(1, min(lines, 4 * numba.get_num_threads()))


__all__ = ["Plan", "c2c", "c2r", "chunks", "fft_pow2", "plan", "r2c", "transform"]
