"""Device memory handed to numba kernels as addresses instead of NumPy arrays.

Passing a NumPy array to a numba kernel costs more than the work of a small
kernel: the array is made (``npu_lab._C.flat_view``), typed, unboxed into a
numba array structure that keeps a reference to it, and released afterwards,
about a microsecond per operand. The elementwise fast path
(:mod:`npu_lab.ops.pointwise`) passes each contiguous operand as its address
(``tensor.data_ptr()``, a plain integer) and its length instead, and the kernel
rebuilds the array view itself with :func:`ptr_array`. A NumPy scalar of the
operand's dtype (a *witness*: its value is never read) tells numba which dtype
the memory holds, so one kernel source still serves every dtype.

The caller guarantees what the array would have guaranteed: the address points
at ``n`` values of the witness's dtype inside a live tensor's storage.
"""

from __future__ import annotations

from numba import types
from numba.core import cgutils
from numba.extending import intrinsic
from numba.np.arrayobj import make_array, populate_array

__all__ = ["VERSION", "ptr_array"]

#: Bump when :func:`ptr_array` changes: generated kernels embed it, so their numba cache is rebuilt.
VERSION = 1


@intrinsic
def ptr_array(typingctx, addr, n, witness):  # noqa: ANN001, ARG001 - numba's intrinsic protocol
    """``ptr_array(addr, n, witness)``: the 1-D C-contiguous array of ``n`` values of ``witness``'s
    dtype at address ``addr`` (no copy, no ownership: the tensor keeps the memory alive)."""
    if not isinstance(addr, types.Integer) or not isinstance(n, types.Integer):
        return None
    if not isinstance(witness, (types.Number, types.Boolean)):
        return None
    dtype = witness
    arrty = types.Array(dtype, 1, "C")

    def codegen(context, builder, signature, args):
        addr_v, n_v, _ = args
        data_t = context.get_data_type(dtype)
        data = builder.inttoptr(context.cast(builder, addr_v, signature.args[0], types.intp),
                                data_t.as_pointer())
        ary = make_array(arrty)(context, builder)
        itemsize = context.get_abi_sizeof(data_t)
        n_intp = context.cast(builder, n_v, signature.args[1], types.intp)
        populate_array(ary, data=data, shape=[n_intp], strides=[cgutils.intp_t(itemsize)],
                       itemsize=cgutils.intp_t(itemsize), meminfo=None)
        return ary._getvalue()

    return arrty(addr, n, witness), codegen
