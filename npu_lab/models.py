"""The small reference models a chip team brings up first.

The same three models appear in the tests, the benchmarks and the chapters, so
that "runs on the NPU", "matches the CPU" and "this much faster" always refer
to the same code: an MLP, a small CNN and a transformer block.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


def mlp(in_features: int = 10, hidden: int = 32, classes: int = 5) -> nn.Module:
    """Three linear layers with ReLU between them."""
    return nn.Sequential(
        nn.Linear(in_features, hidden), nn.ReLU(),
        nn.Linear(hidden, hidden), nn.ReLU(),
        nn.Linear(hidden, classes),
    )


class SmallCNN(nn.Module):
    """conv-bn-relu-pool twice, then a linear classifier (for 3x32x32 images)."""

    def __init__(self, channels: tuple[int, int] = (16, 32), classes: int = 10, size: int = 32) -> None:
        super().__init__()
        c1, c2 = channels
        self.conv1 = nn.Conv2d(3, c1, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(c1)
        self.conv2 = nn.Conv2d(c1, c2, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(c2)
        self.fc = nn.Linear(c2 * (size // 4) ** 2, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        return self.fc(x.flatten(1))


class TransformerBlock(nn.Module):
    """Token embedding, then one pre-norm block: attention and a GELU MLP, with residuals."""

    def __init__(self, vocab: int = 100, dim: int = 64, heads: int = 4, hidden: int = 128,
                 causal: bool = True) -> None:
        super().__init__()
        self.heads = heads
        self.causal = causal
        self.embed = nn.Embedding(vocab, dim)
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)
        self.head = nn.Linear(dim, vocab)

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        q, k, v = (z.reshape(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        x = x + self.attention(self.norm1(x))
        x = x + self.fc2(F.gelu(self.fc1(self.norm2(x))))
        return self.head(x)


def example_batch(model: nn.Module, batch: int = 8, device: str = "cpu",
                  seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A deterministic (inputs, targets) batch for one of the reference models."""
    g = torch.Generator().manual_seed(seed)
    if isinstance(model, SmallCNN):
        x = torch.randn(batch, 3, 32, 32, generator=g)
        y = torch.randint(0, model.fc.out_features, (batch,), generator=g)
    elif isinstance(model, TransformerBlock):
        vocab = model.embed.num_embeddings
        x = torch.randint(0, vocab, (batch, 16), generator=g)
        y = torch.randint(0, vocab, (batch, 16), generator=g)
    else:
        first = next(m for m in model.modules() if isinstance(m, nn.Linear))
        last = [m for m in model.modules() if isinstance(m, nn.Linear)][-1]
        x = torch.randn(batch, first.in_features, generator=g)
        y = torch.randint(0, last.out_features, (batch,), generator=g)
    return x.to(device), y.to(device)


def loss_fn(model: nn.Module, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Cross-entropy for every reference model (flattening tokens for the transformer)."""
    return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))


def train(model: nn.Module, steps: int, device: str, batch: int = 8, lr: float = 0.05,
          optimizer: str = "sgd") -> list[float]:
    """Train ``model`` (moved to ``device``) for ``steps`` on a fixed batch; returns the losses."""
    model = model.to(device)
    x, y = example_batch(model, batch, device)
    if optimizer == "adamw":
        opt: torch.optim.Optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = loss_fn(model, model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses
