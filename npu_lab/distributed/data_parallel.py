"""One process, several npu devices: the copy primitives ``torch.nn.DataParallel`` uses.

``DataParallel`` splits a batch across devices (``scatter``), copies the module to each
(``broadcast_coalesced``), runs the copies in threads and brings the outputs back
(``gather``); backward sums the replicas' gradients (``reduce_add``). Those copies go
through ``torch.nn.parallel.comm``, which calls C++ functions that PyTorch only builds
into CUDA wheels (``torch._C._scatter``, ``_gather``, ``_broadcast_coalesced``...). This
module writes them for the npu with ordinary device-to-device copies (each counted and
costed as peer traffic on the simulated clock), and :func:`install` puts them where
``comm`` looks for them (through :mod:`npu_lab._torch_private`), so ``DataParallel`` runs
across ``npu:0`` and ``npu:1`` as it would across two GPUs: chapter 9 compares it with DDP.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def _device(index: int | None) -> torch.device:
    """npu:``index`` (the current npu device when ``None``); ``-1`` is the CPU, as in ``comm.gather``."""
    if index is None:
        return torch.device("npu", torch.npu.current_device())
    if index == -1:
        return torch.device("cpu")
    return torch.device("npu", index)


def _to(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    return t if t.device == device else t.to(device)


def broadcast(tensor: torch.Tensor, devices: Sequence[int]) -> list[torch.Tensor]:
    """``tensor`` on each device (the tensor itself where it already is)."""
    return [_to(tensor, _device(d)) for d in devices]


def broadcast_out(tensor: torch.Tensor, out: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Copy ``tensor`` into every tensor of ``out``."""
    for o in out:
        if o.shape != tensor.shape:
            raise RuntimeError(f"output tensor of shape {tuple(o.shape)} does not match the source's "
                               f"{tuple(tensor.shape)}")
        o.copy_(tensor)
    return list(out)


def broadcast_coalesced(tensors: Sequence[torch.Tensor], devices: Sequence[int],
                        buffer_size: int) -> list[list[torch.Tensor]]:
    """Each tensor on each device; ``devices[0]`` must hold the tensors and gets them back as they are."""
    if not devices:
        return []
    source = _device(devices[0])
    for t in tensors:
        if t.device != source:
            raise RuntimeError(f"broadcast_coalesced: every tensor must be on {source} (devices[0]), "
                               f"found one on {t.device}")
    return [list(tensors) if i == 0 else [t.to(_device(d)) for t in tensors] for i, d in enumerate(devices)]


def scatter(tensor: torch.Tensor, devices: Sequence[int], chunk_sizes: Sequence[int] | None, dim: int,
            streams: object = None) -> list[torch.Tensor]:
    """Split ``tensor`` along ``dim`` (in ``chunk_sizes``, or evenly) and put chunk i on ``devices[i]``."""
    if chunk_sizes is not None:
        if len(chunk_sizes) != len(devices):
            raise RuntimeError(f"expected {len(devices)} chunk sizes, got {len(chunk_sizes)}")
        if sum(chunk_sizes) != tensor.size(dim):
            raise RuntimeError(f"chunk sizes {list(chunk_sizes)} do not add up to dimension {dim}'s size "
                               f"{tensor.size(dim)}")
        chunks = tensor.split(list(chunk_sizes), dim)
    else:
        chunks = tensor.chunk(len(devices), dim)
    return [_to(c, _device(d)) for c, d in zip(chunks, devices)]


def scatter_out(tensor: torch.Tensor, out: Sequence[torch.Tensor], dim: int,
                streams: object = None) -> list[torch.Tensor]:
    """Split ``tensor`` along ``dim`` into the given outputs (their sizes along ``dim`` give the split)."""
    chunks = tensor.split([o.size(dim) for o in out], dim)
    for o, c in zip(out, chunks):
        o.copy_(c)
    return list(out)


def gather(tensors: Sequence[torch.Tensor], dim: int, destination: int | None) -> torch.Tensor:
    """Concatenate ``tensors`` along ``dim`` on ``destination`` (an npu index, -1 for the CPU)."""
    where = _device(destination)
    return torch.cat([_to(t, where) for t in tensors], dim)


def gather_out(tensors: Sequence[torch.Tensor], out: torch.Tensor, dim: int) -> torch.Tensor:
    """Concatenate ``tensors`` along ``dim`` into ``out``."""
    return torch.cat([_to(t, out.device) for t in tensors], dim, out=out)


#: torch._C name -> implementation (the names torch.nn.parallel.comm calls in torch 2.13).
PRIMITIVES = {
    "_broadcast": broadcast, "_broadcast_out": broadcast_out, "_broadcast_coalesced": broadcast_coalesced,
    "_scatter": scatter, "_scatter_out": scatter_out, "_gather": gather, "_gather_out": gather_out,
}


def install() -> None:
    """Provide the primitives where ``torch.nn.parallel.comm`` calls them (only those this build lacks)."""
    from .._torch_private import provide_c_functions

    provide_c_functions(PRIMITIVES)
