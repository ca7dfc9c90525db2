"""numba kernels for sorting, selection and searching.

Sorting kernels see their input as a contiguous ``x[outer, n, inner]`` and sort
each of the ``outer * inner`` fibres of length ``n`` (gathered into a buffer,
sorted with numba's stable merge sort, written back), in parallel over fibres.

The order is PyTorch's: NaN compares greater than every number (last when
ascending, first when descending), and equal keys keep their input order
(a stable sort; PyTorch's unstable CPU sort leaves the order of ties unspecified).
"""

import numba
import numpy as np
from numba import prange

_opts = dict(cache=True, nogil=True, error_model="numpy")


@numba.njit(**_opts)
def _argsort(row, descending):
    """Stable argsort of a 1-D array, NaN greatest; descending keeps equal keys in input order."""
    n = row.shape[0]
    if not descending:
        return np.argsort(row, kind="mergesort")
    # sort the reversed row ascending (ties then come out in reverse input order) and read it backwards
    o = np.argsort(row[::-1].copy(), kind="mergesort")
    idx = np.empty(n, np.int64)
    for j in range(n):
        idx[j] = n - 1 - o[n - 1 - j]
    return idx


@numba.njit(parallel=True, **_opts)
def sort(x, descending, k, values, indices):
    """The first ``k`` entries of each fibre's stable sort: values[o, :k, i] and their positions."""
    outer, n, inner = x.shape
    for w in prange(outer * inner):
        o = w // inner
        i = w % inner
        row = x[o, :, i].copy()
        idx = _argsort(row, descending)
        for j in range(k):
            values[o, j, i] = row[idx[j]]
            indices[o, j, i] = idx[j]


@numba.njit(**_opts)
def _gt_or_nan(a, b):
    return (a != a and b == b) or a > b


@numba.njit(parallel=True, **_opts)
def kthvalue(x, k, values, indices):
    """The k-th smallest (0-based ``k``) of each fibre and its position.

    The selection is ATen's ``quick_select_template`` (Sedgewick's partitioning, median of
    three), step for step, so ties resolve to the same index as on the CPU.
    """
    outer, n, inner = x.shape
    for w in prange(outer * inner):
        o = w // inner
        i = w % inner
        arr = x[o, :, i].copy()
        idx = np.arange(n)
        lo = 0
        hi = n - 1
        while True:
            if hi <= lo:
                break
            if hi == lo + 1:
                if _gt_or_nan(arr[lo], arr[hi]):
                    arr[lo], arr[hi] = arr[hi], arr[lo]
                    idx[lo], idx[hi] = idx[hi], idx[lo]
                break
            p = (lo + hi) >> 1
            arr[p], arr[lo + 1] = arr[lo + 1], arr[p]
            idx[p], idx[lo + 1] = idx[lo + 1], idx[p]
            if _gt_or_nan(arr[lo + 1], arr[hi]):
                arr[lo + 1], arr[hi] = arr[hi], arr[lo + 1]
                idx[lo + 1], idx[hi] = idx[hi], idx[lo + 1]
            if _gt_or_nan(arr[lo], arr[hi]):
                arr[lo], arr[hi] = arr[hi], arr[lo]
                idx[lo], idx[hi] = idx[hi], idx[lo]
            if _gt_or_nan(arr[lo + 1], arr[lo]):
                arr[lo + 1], arr[lo] = arr[lo], arr[lo + 1]
                idx[lo + 1], idx[lo] = idx[lo], idx[lo + 1]
            a = lo + 1
            b = hi
            piv = arr[lo]
            while True:
                a += 1
                while _gt_or_nan(piv, arr[a]):
                    a += 1
                b -= 1
                while _gt_or_nan(arr[b], piv):
                    b -= 1
                if b < a:
                    break
                arr[a], arr[b] = arr[b], arr[a]
                idx[a], idx[b] = idx[b], idx[a]
            arr[lo], arr[b] = arr[b], arr[lo]
            idx[lo], idx[b] = idx[b], idx[lo]
            if b <= k:
                lo = a
            if b >= k:
                hi = b - 1
        values[o, i] = arr[k]
        indices[o, i] = idx[k]


@numba.njit(parallel=True, **_opts)
def median(x, ignore_nan, values, indices):
    """The lower median of each fibre and its position (ATen's order: by value, then position).

    ``ignore_nan=False``: a fibre holding a NaN gives its first NaN. ``True`` (nanmedian): the
    median of the non-NaN values (the first element when all are NaN).
    """
    outer, n, inner = x.shape
    for w in prange(outer * inner):
        o = w // inner
        i = w % inner
        row = x[o, :, i].copy()
        nan_at = -1
        nans = 0
        for j in range(n):
            if row[j] != row[j]:
                nans += 1
                if nan_at < 0:
                    nan_at = j
        if nans and not ignore_nan:
            values[o, i] = row[nan_at]
            indices[o, i] = nan_at
            continue
        m = n - nans
        pos = (m - 1) // 2 if m > 0 else 0
        idx = np.argsort(row, kind="mergesort")
        values[o, i] = row[idx[pos]]
        indices[o, i] = idx[pos]


@numba.njit(parallel=True, **_opts)
def mode(x, values, indices):
    """The most frequent value of each fibre (the smallest on a tie) and a position of it: ATen's CPU loop
    over the fibre's (value, position) pairs sorted by std::sort (the last of the run)."""
    outer, n, inner = x.shape
    for w in prange(outer * inner):
        o = w // inner
        i = w % inner
        v = x[o, :, i].copy()
        ix = np.arange(n)
        std_sort(v, ix, 0, n, 2)
        best = 0
        best_at = 0
        run = 0
        for j in range(n):
            run += 1
            if j == n - 1 or v[j] != v[j + 1]:
                if run > best:
                    best = run
                    best_at = j
                run = 0
        values[o, i] = v[best_at]
        indices[o, i] = ix[best_at]


@numba.njit(parallel=True, **_opts)
def searchsorted(seq, vals, out, right, sorter, use_sorter):
    """For each value, the insertion point in its row of ``seq`` (rows of ``vals`` pair with rows of ``seq``,
    or all with its one row): the first position whose element is >= the value (> when ``right``).

    The comparisons are ATen's (``!(mid >= val)``), so a NaN value goes past the end. With
    ``use_sorter``, ``seq``'s row is read in the order ``sorter`` gives.
    """
    rows, k = vals.shape
    m = seq.shape[1]
    for w in prange(rows * k):
        r = w // k
        c = w % k
        sr = r if seq.shape[0] > 1 else 0
        v = vals[r, c]
        lo = 0
        hi = m
        while lo < hi:
            mid = lo + ((hi - lo) >> 1)
            mv = seq[sr, sorter[sr, mid]] if use_sorter else seq[sr, mid]
            if right:
                go_right = not (mv > v)
            else:
                go_right = not (mv >= v)
            if go_right:
                lo = mid + 1
            else:
                hi = mid
        out[r, c] = lo


@numba.njit(parallel=True, **_opts)
def isin(elements, sorted_tests, invert, out):
    """out[i] = (elements[i] is equal to some test element) != invert; ``sorted_tests`` ascending, NaN last."""
    m = sorted_tests.shape[0]
    for i in prange(elements.shape[0]):
        v = elements[i]
        lo = 0
        hi = m
        while lo < hi:
            mid = (lo + hi) >> 1
            if sorted_tests[mid] < v:
                lo = mid + 1
            else:
                hi = mid
        found = lo < m and sorted_tests[lo] == v
        out[i] = found != invert


@numba.njit(**_opts)
def _upper_bound(edges, lo, hi, v):
    """std::upper_bound over edges[lo:hi]: the first position whose edge is > v."""
    while lo < hi:
        mid = (lo + hi) >> 1
        if not (v < edges[mid]):
            lo = mid + 1
        else:
            hi = mid
    return lo


@numba.njit(parallel=True, **_opts)
def histogramdd(x, weight, edges, nedges, nbins, strides, hist, algorithm):
    """Accumulate the D-dimensional histogram of the rows of ``x[M, D]`` into ``hist`` (flat, float64).

    ``edges[d, :nedges[d]]`` are dimension d's increasing bin edges. ``algorithm`` is ATen's bin
    selection: 0 linear interpolation (histc), 1 linear interpolation corrected by a local search
    (histogram with a bin count), 2 binary search (explicit edges). An element outside the edges or
    NaN is skipped; the last bin includes its right edge. ``weight`` is empty for unit weights.
    ``edges`` and ``nbins`` (= nedges - 1) have ``x``'s dtype, so the interpolation rounds as ATen's does.
    """
    rows, dims = x.shape
    chunks = 8
    step = (rows + chunks - 1) // chunks
    part = np.zeros((chunks, hist.shape[0]))
    for c in prange(chunks):
        for r in range(c * step, min(rows, (c + 1) * step)):
            at = 0
            skip = False
            for d in range(dims):
                v = x[r, d]
                ne = nedges[d]
                left = edges[d, 0]
                right = edges[d, ne - 1]
                if not (v >= left and v <= right):
                    skip = True
                    break
                if algorithm == 2:
                    pos = _upper_bound(edges[d], 0, ne, v) - 1
                else:
                    pos = np.int64((v - left) * nbins[d] / (right - left))
                    if algorithm == 1:
                        pos = _upper_bound(edges[d], max(0, pos - 1), min(pos + 2, ne), v) - 1
                if pos == ne - 1:
                    pos -= 1
                at += strides[d] * pos
            if not skip:
                part[c, at] += weight[r] if weight.shape[0] else 1.0
    for h in range(hist.shape[0]):
        acc = 0.0
        for c in range(chunks):
            acc += part[c, h]
        hist[h] = acc


# --- libstdc++'s unstable algorithms, step for step ---------------------------------------------------------
# PyTorch's CPU topk (std::partial_sort, std::nth_element + std::sort) and mode (std::sort) leave the order of
# equal keys to the C++ library. These are GCC's libstdc++ algorithms (introsort, introselect, heap select)
# on (value, index) pairs, so ties come out in the CPU's order. ``kind`` picks the comparison:
# 0 "greater, NaN greatest" (topk largest), 1 "less, NaN greatest" (topk smallest), 2 plain "<" (mode).


@numba.njit(**_opts)
def _comp(a, b, kind):
    if kind == 0:
        return (a != a and b == b) or a > b
    if kind == 1:
        return (a == a and b != b) or a < b
    return a < b


@numba.njit(**_opts)
def _swap(v, ix, a, b):
    v[a], v[b] = v[b], v[a]
    ix[a], ix[b] = ix[b], ix[a]


@numba.njit(**_opts)
def _push_heap(v, ix, first, hole, top, val, vi, kind):
    parent = (hole - 1) // 2
    while hole > top and _comp(v[first + parent], val, kind):
        v[first + hole] = v[first + parent]
        ix[first + hole] = ix[first + parent]
        hole = parent
        parent = (hole - 1) // 2
    v[first + hole] = val
    ix[first + hole] = vi


@numba.njit(**_opts)
def _adjust_heap(v, ix, first, hole, length, val, vi, kind):
    top = hole
    child = hole
    while child < (length - 1) // 2:
        child = 2 * (child + 1)
        if _comp(v[first + child], v[first + child - 1], kind):
            child -= 1
        v[first + hole] = v[first + child]
        ix[first + hole] = ix[first + child]
        hole = child
    if (length & 1) == 0 and child == (length - 2) // 2:
        child = 2 * (child + 1)
        v[first + hole] = v[first + child - 1]
        ix[first + hole] = ix[first + child - 1]
        hole = child - 1
    _push_heap(v, ix, first, hole, top, val, vi, kind)


@numba.njit(**_opts)
def _make_heap(v, ix, first, last, kind):
    length = last - first
    if length < 2:
        return
    parent = (length - 2) // 2
    while True:
        _adjust_heap(v, ix, first, parent, length, v[first + parent], ix[first + parent], kind)
        if parent == 0:
            return
        parent -= 1


@numba.njit(**_opts)
def _pop_heap(v, ix, first, last, result, kind):
    val = v[result]
    vi = ix[result]
    v[result] = v[first]
    ix[result] = ix[first]
    _adjust_heap(v, ix, first, 0, last - first, val, vi, kind)


@numba.njit(**_opts)
def _heap_select(v, ix, first, middle, last, kind):
    _make_heap(v, ix, first, middle, kind)
    for i in range(middle, last):
        if _comp(v[i], v[first], kind):
            _pop_heap(v, ix, first, middle, i, kind)


@numba.njit(**_opts)
def _sort_heap(v, ix, first, last, kind):
    while last - first > 1:
        last -= 1
        _pop_heap(v, ix, first, last, last, kind)


@numba.njit(**_opts)
def partial_sort(v, ix, first, middle, last, kind):
    """std::partial_sort: the smallest (by ``kind``) ``middle - first`` elements, sorted, at the front."""
    _heap_select(v, ix, first, middle, last, kind)
    _sort_heap(v, ix, first, middle, kind)


@numba.njit(**_opts)
def _move_median_to_first(v, ix, result, a, b, c, kind):
    if _comp(v[a], v[b], kind):
        if _comp(v[b], v[c], kind):
            _swap(v, ix, result, b)
        elif _comp(v[a], v[c], kind):
            _swap(v, ix, result, c)
        else:
            _swap(v, ix, result, a)
    elif _comp(v[a], v[c], kind):
        _swap(v, ix, result, a)
    elif _comp(v[b], v[c], kind):
        _swap(v, ix, result, c)
    else:
        _swap(v, ix, result, b)


@numba.njit(**_opts)
def _partition_pivot(v, ix, first, last, kind):
    mid = first + (last - first) // 2
    _move_median_to_first(v, ix, first, first + 1, mid, last - 1, kind)
    lo = first + 1
    hi = last
    while True:
        while _comp(v[lo], v[first], kind):
            lo += 1
        hi -= 1
        while _comp(v[first], v[hi], kind):
            hi -= 1
        if not lo < hi:
            return lo
        _swap(v, ix, lo, hi)
        lo += 1


@numba.njit(**_opts)
def _linear_insert(v, ix, last, kind):
    val = v[last]
    vi = ix[last]
    nxt = last - 1
    while _comp(val, v[nxt], kind):
        v[last] = v[nxt]
        ix[last] = ix[nxt]
        last = nxt
        nxt -= 1
    v[last] = val
    ix[last] = vi


@numba.njit(**_opts)
def _insertion_sort(v, ix, first, last, kind):
    if first == last:
        return
    for i in range(first + 1, last):
        if _comp(v[i], v[first], kind):
            val = v[i]
            vi = ix[i]
            for j in range(i, first, -1):
                v[j] = v[j - 1]
                ix[j] = ix[j - 1]
            v[first] = val
            ix[first] = vi
        else:
            _linear_insert(v, ix, i, kind)


@numba.njit(**_opts)
def _lg(n):
    k = 0
    while n > 1:
        n >>= 1
        k += 1
    return k


@numba.njit(**_opts)
def _introsort_loop(v, ix, first, last, depth, kind):
    """libstdc++'s introsort loop. It recurses on the right part of each partition and loops on the left;
    the parts are disjoint, so a stack of pending (first, last, depth) ranges does the same work in the
    same way (numba's cache cannot hold recursive functions)."""
    lo = np.empty(132, np.int64)
    hi = np.empty(132, np.int64)
    dl = np.empty(132, np.int64)
    lo[0], hi[0], dl[0] = first, last, depth
    top = 1
    while top:
        top -= 1
        f, l, d = lo[top], hi[top], dl[top]
        while l - f > 16:
            if d == 0:
                partial_sort(v, ix, f, l, l, kind)
                break
            d -= 1
            cut = _partition_pivot(v, ix, f, l, kind)
            lo[top], hi[top], dl[top] = cut, l, d
            top += 1
            l = cut


@numba.njit(**_opts)
def std_sort(v, ix, first, last, kind):
    """std::sort (introsort, then the final insertion sort) of v[first:last], moving ix along."""
    if first == last:
        return
    _introsort_loop(v, ix, first, last, _lg(last - first) * 2, kind)
    if last - first > 16:
        _insertion_sort(v, ix, first, first + 16, kind)
        for i in range(first + 16, last):
            _linear_insert(v, ix, i, kind)
    else:
        _insertion_sort(v, ix, first, last, kind)


@numba.njit(**_opts)
def nth_element(v, ix, first, nth, last, kind):
    """std::nth_element (introselect) of v[first:last] around position ``nth``, moving ix along."""
    if first == last or nth == last:
        return
    depth = _lg(last - first) * 2
    while last - first > 3:
        if depth == 0:
            _heap_select(v, ix, first, nth + 1, last, kind)
            _swap(v, ix, first, nth)
            return
        depth -= 1
        cut = _partition_pivot(v, ix, first, last, kind)
        if cut <= nth:
            first = cut
        else:
            last = cut
    _insertion_sort(v, ix, first, last, kind)


@numba.njit(parallel=True, **_opts)
def topk(x, k, largest, ordered, values, indices):
    """ATen's CPU topk loop: partial_sort when k * 64 <= n, else nth_element then (``ordered``) std::sort
    of the first k - 1."""
    outer, n, inner = x.shape
    kind = 0 if largest else 1
    for w in prange(outer * inner):
        o = w // inner
        i = w % inner
        v = x[o, :, i].copy()
        ix = np.arange(n)
        if k * 64 <= n:
            partial_sort(v, ix, 0, k, n, kind)
        else:
            nth_element(v, ix, 0, k - 1, n, kind)
            if ordered:
                std_sort(v, ix, 0, k - 1, kind)
        for j in range(k):
            values[o, j, i] = v[j]
            indices[o, j, i] = ix[j]


@numba.njit(parallel=True, **_opts)
def unstable_sort(x, descending, values, indices):
    """std::sort of (value, position) pairs with ATen's comparisons (NaN greatest), per fibre."""
    outer, n, inner = x.shape
    kind = 0 if descending else 1
    for w in prange(outer * inner):
        o = w // inner
        i = w % inner
        v = x[o, :, i].copy()
        ix = np.arange(n)
        std_sort(v, ix, 0, n, kind)
        for j in range(n):
            values[o, j, i] = v[j]
            indices[o, j, i] = ix[j]
