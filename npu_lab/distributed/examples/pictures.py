"""Drawings for chapter 9: the ring all-reduce step by step, and timelines of buckets and backward."""

from __future__ import annotations

from typing import Any


def ring_states(world: int) -> list[tuple[str, list[list[frozenset[int]]]]]:
    """The ring all-reduce's state after each step: ``state[rank][chunk]`` = ranks whose data it holds.

    Reduce-scatter step ``s``: rank ``r`` sends chunk ``(r - s) % N`` to ``r + 1``, which adds it to
    its own. All-gather step ``s``: rank ``r`` passes its finished chunk ``(r - s + 1) % N`` on.
    """
    state = [[frozenset([r]) for _ in range(world)] for r in range(world)]
    out = [("start", [row[:] for row in state])]
    for s in range(world - 1):
        before = [row[:] for row in state]
        for r in range(world):
            c = (r - s) % world
            state[(r + 1) % world][c] = before[(r + 1) % world][c] | before[r][c]
        out.append((f"reduce-scatter {s + 1}", [row[:] for row in state]))
    for s in range(world - 1):
        before = [row[:] for row in state]
        for r in range(world):
            c = (r - s + 1) % world
            state[(r + 1) % world][c] = before[r][c]
        out.append((f"all-gather {s + 1}", [row[:] for row in state]))
    return out


def draw_ring(world: int = 4, width_in: float = 10.5) -> Any:
    """A row of small grids, one per step: rank (rows) x chunk (columns), shaded by how many ranks'
    data the chunk holds; the number is that count. Returns the matplotlib figure."""
    import matplotlib.pyplot as plt
    import numpy as np

    states = ring_states(world)
    fig, axes = plt.subplots(1, len(states), figsize=(width_in, 1.9))
    for ax, (title, st) in zip(axes, states):
        counts = np.array([[len(c) for c in row] for row in st])
        ax.imshow(counts, cmap="Blues", vmin=0, vmax=world + 1)
        for r in range(world):
            for c in range(world):
                ax.text(c, r, str(counts[r, c]), ha="center", va="center", fontsize=8,
                        color="white" if counts[r, c] == world else "black")
        ax.set_title(title, fontsize=8)
        ax.set_xticks(range(world))
        ax.set_yticks(range(world))
        ax.tick_params(labelsize=7, length=0)
    axes[0].set_ylabel("rank", fontsize=8)
    axes[0].set_xlabel("chunk", fontsize=8)
    fig.tight_layout()
    return fig


def draw_buckets(ax: Any, trace: Any, schedule: list[tuple[float, float, int]], title: str) -> None:
    """Backward (each gradient's ready time) on one row and each bucket's all-reduce on another."""
    ax.barh(1, trace.backward_us, left=0, height=0.5, color="#9ecae1")
    for t in trace.ready_us:
        ax.plot([t, t], [0.75, 1.25], color="#3182bd", lw=0.8)
    for i, (start, end, _) in enumerate(schedule):
        ax.barh(0, end - start, left=start, height=0.5, color="#fd8d3c" if i % 2 else "#e6550d")
    end = max([trace.backward_us] + [e for _, e, _ in schedule])
    ax.axvline(end, color="k", lw=0.8, ls="--")
    ax.set_yticks([0, 1], ["all-reduce", "backward"], fontsize=8)
    ax.set_title(f"{title}: step {end:.0f} us", fontsize=9)
    ax.tick_params(labelsize=8)
