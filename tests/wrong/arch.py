"""Plausible wrong answers to the architecture exercises (chapter ``arch``)."""

#: A SlopedSwish class around a forward and a backward body (the wrong answers differ in those).
_FN = ("class SlopedSwish(torch.autograd.Function):\n    @staticmethod\n    def forward(ctx, x, beta):\n"
       "%s\n    @staticmethod\n    def backward(ctx, grad_out):\n%s")
_FWD = "        s = torch.sigmoid(beta * x)\n        ctx.save_for_backward(x, beta, s)\n        return x * s\n"

WRONG: dict[str, list[str]] = {
    "arch.view_geometry": [
        # asks PyTorch only when the index has a step slice (the rule: no tensor in any case)
        "def view_geometry(size, stride, offset, index):\n"
        "    if any(isinstance(i, slice) and (i.step or 1) > 1 for i in index):\n"
        "        v = torch.empty(1000).as_strided(size, stride, offset)[index]\n"
        "        return tuple(v.shape), tuple(v.stride()), v.storage_offset()\n"
        "    sizes, strides = [], []\n    for d, item in enumerate(index):\n"
        "        if isinstance(item, slice):\n            start, stop, step = item.indices(size[d])\n"
        "            sizes.append(len(range(start, stop, step)))\n            strides.append(stride[d] * step)\n"
        "            offset += start * stride[d]\n        else:\n            offset += (item % size[d]) * stride[d]\n"
        "    n = len(index)\n    return tuple(sizes) + tuple(size[n:]), tuple(strides) + tuple(stride[n:]), offset",
        # right numbers as lists: the text asks for (tuple, tuple, int)
        "def view_geometry(size, stride, offset, index):\n    sizes, strides = [], []\n"
        "    for d, item in enumerate(index):\n        if isinstance(item, slice):\n"
        "            start, stop, step = item.indices(size[d])\n"
        "            sizes.append(len(range(start, stop, step)))\n"
        "            strides.append(stride[d] * step)\n            offset += start * stride[d]\n"
        "        else:\n            offset += (item % size[d]) * stride[d]\n"
        "    n = len(index)\n    return sizes + list(size[n:]), strides + list(stride[n:]), offset",
        # ignores negative integers
        "def view_geometry(size, stride, offset, index):\n    sizes, strides = [], []\n"
        "    for d, item in enumerate(index):\n        if isinstance(item, slice):\n"
        "            start, stop, step = item.indices(size[d])\n"
        "            sizes.append(len(range(start, stop, step)))\n"
        "            strides.append(stride[d] * step)\n            offset += start * stride[d]\n"
        "        else:\n            offset += item * stride[d]\n"
        "    n = len(index)\n    return tuple(sizes) + tuple(size[n:]), tuple(strides) + tuple(stride[n:]), offset",
        # forgets to multiply the stride by the step
        "def view_geometry(size, stride, offset, index):\n    sizes, strides = [], []\n"
        "    for d, item in enumerate(index):\n        if isinstance(item, slice):\n"
        "            start, stop, step = item.indices(size[d])\n"
        "            sizes.append(len(range(start, stop, step)))\n"
        "            strides.append(stride[d])\n            offset += start * stride[d]\n"
        "        else:\n            offset += (item % size[d]) * stride[d]\n"
        "    n = len(index)\n    return tuple(sizes) + tuple(size[n:]), tuple(strides) + tuple(stride[n:]), offset",
        # size as (stop - start) // step: wrong when the step does not divide, negative for empty slices
        "def view_geometry(size, stride, offset, index):\n    sizes, strides = [], []\n"
        "    for d, item in enumerate(index):\n        if isinstance(item, slice):\n"
        "            start, stop, step = item.indices(size[d])\n            sizes.append((stop - start) // step)\n"
        "            strides.append(stride[d] * step)\n            offset += start * stride[d]\n"
        "        else:\n            offset += (item % size[d]) * stride[d]\n"
        "    n = len(index)\n    return tuple(sizes) + tuple(size[n:]), tuple(strides) + tuple(stride[n:]), offset",
        # asks PyTorch instead of computing
        "def view_geometry(size, stride, offset, index):\n"
        "    v = torch.empty(1000).as_strided(size, stride, offset)[index]\n"
        "    return tuple(v.shape), v.stride(), v.storage_offset()",
    ],
    "arch.contiguity": [
        # right answers, by asking PyTorch (the text: "without creating a tensor")
        "def is_contiguous_by_strides(size, stride):\n"
        "    return torch.empty_strided(size, stride).is_contiguous()",
        # compares with the contiguous strides exactly: wrong for size-1 dimensions
        "def is_contiguous_by_strides(size, stride):\n    want, step = [], 1\n    for s in reversed(size):\n"
        "        want.append(step)\n        step *= max(s, 1)\n    return tuple(stride) == tuple(reversed(want))",
        # skips size-1 dims but forgets empty tensors
        "def is_contiguous_by_strides(size, stride):\n    expected = 1\n"
        "    for s, st in zip(reversed(size), reversed(stride)):\n        if s == 1:\n            continue\n"
        "        if st != expected:\n            return False\n        expected *= s\n    return True",
        # only looks at the last stride
        "def is_contiguous_by_strides(size, stride):\n    return len(stride) == 0 or stride[-1] == 1",
    ],
    "arch.backward_nodes": [
        # a tree walk: counts a node once per path that reaches it
        "def backward_nodes(root):\n    counts = {}\n    todo = [root]\n    while todo:\n"
        "        node = todo.pop()\n        if node is None:\n            continue\n"
        "        counts[type(node).__name__] = counts.get(type(node).__name__, 0) + 1\n"
        "        todo.extend(n for n, _ in node.next_functions)\n    return counts",
        # deduplicates by name instead of by node: two AccumulateGrad nodes count once
        "def backward_nodes(root):\n    names, todo = set(), [root]\n    while todo:\n"
        "        node = todo.pop()\n        if node is None:\n            continue\n"
        "        names.add(type(node).__name__)\n        todo.extend(n for n, _ in node.next_functions)\n"
        "    return {n: 1 for n in names}",
        # forgets the None slots and the leaf case
        "def backward_nodes(root):\n    counts, seen, todo = {}, set(), [root]\n    while todo:\n"
        "        node = todo.pop()\n        if node in seen:\n            continue\n        seen.add(node)\n"
        "        counts[node.name()] = counts.get(node.name(), 0) + 1\n"
        "        todo.extend(n for n, _ in node.next_functions)\n    return counts",
    ],
    "arch.fix_inplace": [
        # the original bug: divides exp's saved output in place
        "def softmax_rows(x):\n    y = x.exp()\n    y /= y.sum(dim=1, keepdim=True)\n    return y",
        # avoids the error by updating the input in place instead
        "def softmax_rows(x):\n    y = x.detach().exp_()\n    return y / y.sum(dim=1, keepdim=True)",
        # stable, but shifts the caller's x in place behind autograd's back (through .data)
        "def softmax_rows(x):\n    x.data -= x.data.max(dim=1, keepdim=True).values\n    y = x.exp()\n"
        "    return y / y.sum(dim=1, keepdim=True)",
        # normalises over the wrong dimension
        "def softmax_rows(x):\n    y = x.exp()\n    return y / y.sum(dim=0, keepdim=True)",
        # replaces the function instead of repairing it (the text: keep exp and the division)
        "def softmax_rows(x):\n    return torch.softmax(x, dim=1)",
        "def softmax_rows(x):\n    return x.softmax(dim=-1)",
    ],
    "arch.custom_function": [
        # forgets the product rule: dL/dx = grad_out * s
        _FN % (_FWD, "        x, beta, s = ctx.saved_tensors\n        ds = s * (1 - s)\n"
                     "        return grad_out * s, (grad_out * x * x * ds).sum_to_size(beta.shape)"),
        # returns the gradient of x only (beta "is a parameter"): one gradient per input is required
        _FN % (_FWD, "        x, beta, s = ctx.saved_tensors\n        ds = s * (1 - s)\n"
                     "        return grad_out * (s + x * beta * ds)"),
        # the derivative written with exp: inf / inf = nan where beta * x is very negative
        _FN % ("        ctx.save_for_backward(x, beta)\n        return x / (1 + torch.exp(-beta * x))\n",
               "        x, beta = ctx.saved_tensors\n        e = torch.exp(-beta * x)\n"
               "        s = 1 / (1 + e)\n        ds = e / (1 + e) ** 2\n"
               "        return grad_out * (s + x * beta * ds), (grad_out * x * x * ds).sum_to_size(beta.shape)"),
        # computes on the host with NumPy (values right, but bytes cross to the host and back)
        _FN % ("        import numpy as np\n        xn, bn = x.detach().cpu().numpy(), beta.detach().cpu().numpy()\n"
               "        s = torch.from_numpy(1 / (1 + np.exp(-bn * xn))).to(x.device)\n"
               "        ctx.save_for_backward(x, beta, s)\n        return x * s\n",
               "        x, beta, s = ctx.saved_tensors\n        ds = s * (1 - s)\n"
               "        return grad_out * (s + x * beta * ds), (grad_out * x * x * ds).sum_to_size(beta.shape)"),
        # backward ignores grad_out (right only when the loss is a plain sum)
        _FN % (_FWD, "        x, beta, s = ctx.saved_tensors\n        ds = s * (1 - s)\n"
                     "        return s + x * beta * ds, (x * x * ds).sum_to_size(beta.shape)"),
        # lets autograd differentiate the forward again inside backward (the text: by hand, no autograd there)
        _FN % ("        ctx.save_for_backward(x, beta)\n        return x * torch.sigmoid(beta * x)\n",
               "        x, beta = ctx.saved_tensors\n        with torch.enable_grad():\n"
               "            xd, bd = x.detach().requires_grad_(), beta.detach().requires_grad_()\n"
               "            y = xd * torch.sigmoid(bd * xd)\n"
               "            return torch.autograd.grad(y, (xd, bd), grad_out)"),
        # no Function at all: autograd of the expression (no node of its own)
        "class SlopedSwish(torch.autograd.Function):\n    @staticmethod\n    def forward(ctx, x, beta):\n"
        "        return x * torch.sigmoid(beta * x)\n    @staticmethod\n    def backward(ctx, g):\n"
        "        raise RuntimeError('unused')\n"
        "    @classmethod\n    def apply(cls, x, beta):\n        return x * torch.sigmoid(beta * x)",
    ],
}
