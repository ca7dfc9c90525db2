"""Tensor parallelism: one linear layer's weight split across ranks (Megatron-LM's layers, on npu).

Data parallelism copies the whole model to every rank and splits the batch; tensor parallelism
splits the *weights* of each layer, so a layer too big for one device fits on several. For a
linear ``y = x Wᵀ + b`` with ``W`` of shape (out, in) there are two ways to cut it:

* **column parallel** (:class:`ColumnParallelLinear`): rank ``r`` keeps rows ``r`` of ``W`` (a
  slice of the output features). Forward needs no communication: each rank computes its slice of
  ``y`` from the whole ``x``. Backward: each rank's ``∂L/∂x`` covers only its slice of the output,
  so the full ``∂L/∂x`` is their **sum**: an all-reduce (the function ``f`` of the Megatron paper:
  identity forward, all-reduce backward). ``gather_output=True`` all-gathers the slices of ``y``.
* **row parallel** (:class:`RowParallelLinear`): rank ``r`` keeps a slice of the *input* features
  (columns of ``W``) and takes the matching slice of ``x``. Each rank's product is a partial sum
  of ``y``, so forward ends with an **all-reduce** (``g``: all-reduce forward, identity backward),
  and the bias is added once, after it.

:class:`ParallelMLP` chains them, column then row: the column layer's output slice is exactly the
row layer's input slice, so a two-layer MLP costs one all-reduce forward and one backward, however
wide it is. Each layer can be built from an ordinary ``nn.Linear`` (``from_linear``), so its
outputs and gradients can be compared with the unsharded layer's.

The collectives go through ``torch.distributed`` on ``group`` (the default group if ``None``):
npu tensors use the npuccl backend, so they cost what the α–β model says on the device clock.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn
from torch.nn import functional as F  # noqa: N812


def _world(group: dist.ProcessGroup | None) -> tuple[int, int]:
    """(rank, world size) in ``group``; ``RuntimeError`` if torch.distributed is not initialised."""
    if not dist.is_initialized():
        raise RuntimeError("tensor-parallel layers need torch.distributed: call dist.init_process_group() first "
                           "(or npu_lab.distributed.launch.launch, which does it in each worker)")
    return dist.get_rank(group), dist.get_world_size(group)


def _split(size: int, world: int, what: str) -> int:
    if size % world:
        raise ValueError(f"{what} ({size}) must be divisible by the tensor-parallel world size ({world})")
    return size // world


class _CopyToParallel(torch.autograd.Function):
    """``f``: identity forward; backward all-reduces (sums) the gradient over the group."""

    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, x: torch.Tensor,
                group: dist.ProcessGroup | None) -> torch.Tensor:
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        grad = grad.contiguous().clone()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


class _ReduceFromParallel(torch.autograd.Function):
    """``g``: forward all-reduces (sums) the partial results; identity backward."""

    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, x: torch.Tensor,
                group: dist.ProcessGroup | None) -> torch.Tensor:
        out = x.contiguous().clone()
        dist.all_reduce(out, group=group)
        return out

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad, None


class _GatherFromParallel(torch.autograd.Function):
    """Forward all-gathers the last dimension's slices; backward keeps this rank's slice of the gradient."""

    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, x: torch.Tensor,
                group: dist.ProcessGroup | None) -> torch.Tensor:
        rank, world = _world(group)
        ctx.rank, ctx.world = rank, world
        x = x.contiguous()
        pieces = [torch.empty_like(x) for _ in range(world)]
        dist.all_gather(pieces, x, group=group)
        return torch.cat(pieces, dim=-1)

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad.chunk(ctx.world, dim=-1)[ctx.rank].contiguous(), None


def copy_to_parallel(x: torch.Tensor, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """``x`` unchanged; its gradient is summed over ``group`` in backward (Megatron's ``f``)."""
    return _CopyToParallel.apply(x, group)


def reduce_from_parallel(x: torch.Tensor, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """The sum of ``x`` over ``group`` (an all-reduce); the gradient passes through (Megatron's ``g``)."""
    return _ReduceFromParallel.apply(x, group)


def gather_from_parallel(x: torch.Tensor, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """Every rank's ``x`` concatenated along the last dimension (an all-gather); backward slices."""
    return _GatherFromParallel.apply(x, group)


def _parameters(weight_shape: tuple[int, int], bias_size: int, bias: bool, device: torch.device | str | None,
                dtype: torch.dtype | None) -> tuple[nn.Parameter, nn.Parameter | None]:
    """A shard's weight (initialised as ``nn.Linear`` does) and zero bias (or None)."""
    weight = nn.Parameter(torch.empty(weight_shape, device=device, dtype=dtype))
    nn.init.kaiming_uniform_(weight, a=5 ** 0.5)
    return weight, (nn.Parameter(torch.zeros(bias_size, device=device, dtype=dtype)) if bias else None)


class ColumnParallelLinear(nn.Module):
    """A linear layer whose output features are split across the ranks of ``group``.

    Rank ``r`` holds rows ``r·out/N … (r+1)·out/N`` of the weight (and of the bias) and returns that
    slice of the output, or the whole output if ``gather_output``. ``out_features`` must be
    divisible by the world size.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, gather_output: bool = False,
                 group: dist.ProcessGroup | None = None, device: torch.device | str | None = None,
                 dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.rank, self.world = _world(group)
        self.group = group
        self.in_features, self.out_features = in_features, out_features
        self.out_per_rank = _split(out_features, self.world, "out_features")
        self.gather_output = gather_output
        self.weight, self.bias = _parameters((self.out_per_rank, in_features), self.out_per_rank, bias, device, dtype)

    @classmethod
    def from_linear(cls, linear: nn.Linear, gather_output: bool = False,
                    group: dist.ProcessGroup | None = None) -> ColumnParallelLinear:
        """This rank's column-parallel shard of ``linear`` (same device and dtype, weights copied)."""
        w = linear.weight
        layer = cls(linear.in_features, linear.out_features, linear.bias is not None, gather_output, group,
                    device=w.device, dtype=w.dtype)
        rows = slice(layer.rank * layer.out_per_rank, (layer.rank + 1) * layer.out_per_rank)
        with torch.no_grad():
            layer.weight.copy_(w[rows])
            if layer.bias is not None:
                layer.bias.copy_(linear.bias[rows])
        return layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = copy_to_parallel(x, self.group)
        y = F.linear(x, self.weight, self.bias)
        return gather_from_parallel(y, self.group) if self.gather_output else y

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features} "
                f"({self.out_per_rank} on rank {self.rank} of {self.world}), gather_output={self.gather_output}")


class RowParallelLinear(nn.Module):
    """A linear layer whose input features are split across the ranks of ``group``.

    Rank ``r`` holds columns ``r·in/N … (r+1)·in/N`` of the weight. It takes that slice of the input
    (``input_is_parallel=True``, what a :class:`ColumnParallelLinear` returns) or slices the whole
    input itself, and all-reduces the partial products; the (unsplit) bias is added after the sum.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, input_is_parallel: bool = True,
                 group: dist.ProcessGroup | None = None, device: torch.device | str | None = None,
                 dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.rank, self.world = _world(group)
        self.group = group
        self.in_features, self.out_features = in_features, out_features
        self.in_per_rank = _split(in_features, self.world, "in_features")
        self.input_is_parallel = input_is_parallel
        self.weight, self.bias = _parameters((out_features, self.in_per_rank), out_features, bias, device, dtype)

    @classmethod
    def from_linear(cls, linear: nn.Linear, input_is_parallel: bool = True,
                    group: dist.ProcessGroup | None = None) -> RowParallelLinear:
        """This rank's row-parallel shard of ``linear`` (same device and dtype, weights copied)."""
        w = linear.weight
        layer = cls(linear.in_features, linear.out_features, linear.bias is not None, input_is_parallel, group,
                    device=w.device, dtype=w.dtype)
        cols = slice(layer.rank * layer.in_per_rank, (layer.rank + 1) * layer.in_per_rank)
        with torch.no_grad():
            layer.weight.copy_(w[:, cols])
            if layer.bias is not None:
                layer.bias.copy_(linear.bias)
        return layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.input_is_parallel:
            if x.shape[-1] != self.in_features:
                raise ValueError(f"expected the whole input ({self.in_features} features), got {x.shape[-1]}")
            x = x[..., self.rank * self.in_per_rank:(self.rank + 1) * self.in_per_rank]
        elif x.shape[-1] != self.in_per_rank:
            raise ValueError(f"expected this rank's slice of the input ({self.in_per_rank} of {self.in_features} "
                             f"features), got {x.shape[-1]}")
        y = reduce_from_parallel(F.linear(x, self.weight), self.group)
        return y + self.bias if self.bias is not None else y

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features} ({self.in_per_rank} on rank {self.rank} of {self.world}), "
                f"out_features={self.out_features}, input_is_parallel={self.input_is_parallel}")


class ParallelMLP(nn.Module):
    """``Linear → activation → Linear`` split column-then-row: one all-reduce forward, one backward."""

    def __init__(self, fc1: ColumnParallelLinear, fc2: RowParallelLinear, activation: nn.Module | None = None) -> None:
        super().__init__()
        if fc1.gather_output or not fc2.input_is_parallel:
            raise ValueError("ParallelMLP chains a ColumnParallelLinear(gather_output=False) into a "
                             "RowParallelLinear(input_is_parallel=True): the slice goes straight through")
        self.fc1, self.act, self.fc2 = fc1, activation if activation is not None else nn.GELU(), fc2

    @classmethod
    def from_mlp(cls, fc1: nn.Linear, fc2: nn.Linear, activation: nn.Module | None = None,
                 group: dist.ProcessGroup | None = None) -> ParallelMLP:
        """This rank's shard of the MLP ``fc2(activation(fc1(x)))`` made of two ``nn.Linear``."""
        return cls(ColumnParallelLinear.from_linear(fc1, group=group),
                   RowParallelLinear.from_linear(fc2, group=group), activation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))
