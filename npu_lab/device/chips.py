"""Named chips: presets of the cost model (``npu_lab.chips()``, ``npu_lab.use_chip(name)``).

Every simulated device follows one cost model (:mod:`npu_lab.device.clock`). A preset is a whole
set of its figures, so a learner can run the same program on a different chip and watch where
the crossovers move: when a 16-bit matrix unit makes mixed precision pay, when the host's launch
cost makes a program launch-bound, when pinned memory matters.

``NPU_LAB_CHIP=<name>`` in the environment picks the chip at ``import npu_lab``; the default is
``"teaching"``, the chip the chapters were written on.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields

from .clock import CostModel, cost_model


@dataclass(frozen=True)
class Chip:
    """A named set of cost-model figures.

    Attributes:
        name: what :func:`use_chip` takes.
        summary: one line on what the chip is like.
        figures: the cost model (:class:`npu_lab.device.clock.CostModel`).
        sources: where each figure comes from. Figures no datasheet gives (launch and host costs)
            are typical measured values, and say so.
    """

    name: str
    summary: str
    figures: CostModel
    sources: tuple[str, ...] = ()

    def describe(self) -> str:
        """The chip's figures and their sources, as text."""
        f = self.figures
        matrix32 = f"{f.matrix_gflops / 1e3:g} TFLOP/s" if f.matrix_gflops else "none (vector unit)"
        matrix16 = f"{f.matrix16_gflops / 1e3:g} TFLOP/s" if f.matrix16_gflops else "as 32-bit"
        lines = [
            f"{self.name}: {self.summary}",
            f"  vector unit {f.peak_gflops / 1e3:g} TFLOP/s; matrix unit 32-bit {matrix32}, 16-bit {matrix16}",
            f"  memory {f.bandwidth_gbs:g} GB/s; kernel launch {f.launch_us:g} us on the device, "
            f"{f.host_launch_us:g} us on the host",
            f"  host link {f.link_gbs:g} GB/s + {f.link_latency_us:g} us; pageable staging "
            + (f"{f.host_memcpy_gbs:g} GB/s" if f.host_memcpy_gbs else "free")
            + f"; peer link {f.peer_gbs:g} GB/s",
        ]
        lines += [f"  source: {s}" for s in self.sources]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<Chip {self.name}: {self.summary}>"


_PRESETS = (
    Chip(
        "teaching",
        "the chapters' chip: one 2 TFLOP/s unit for every kernel, and a host that costs nothing",
        CostModel(),
        ("made up for teaching: round figures, so that the roofline arithmetic is easy to follow",),
    ),
    Chip(
        "gpu-like",
        "a data-centre GPU (NVIDIA A100 SXM4 80GB): fast 16-bit tensor cores, HBM, PCIe 4.0",
        CostModel(peak_gflops=19_500.0, matrix_gflops=19_500.0, matrix16_gflops=312_000.0,
                  bandwidth_gbs=2_039.0, launch_us=2.5, host_launch_us=6.0, link_gbs=32.0, link_latency_us=10.0,
                  host_memcpy_gbs=12.0, peer_gbs=300.0, peer_latency_us=3.0, event_us=0.5),
        ("NVIDIA A100 Tensor Core GPU datasheet (2021): FP32 19.5 TFLOPS, FP16/BF16 tensor core 312 TFLOPS "
         "(dense), HBM2e 2,039 GB/s, PCIe Gen4 64 GB/s (32 GB/s each way), NVLink 600 GB/s (300 GB/s each way)",
         "float32 matrix products use the FP32 figure: PyTorch keeps TF32 off for matmul by default "
         "(torch.backends.cuda.matmul.allow_tf32 = False)",
         "launch (2.5 us on the device, 6 us of host dispatch per operator), copy latency and the 12 GB/s "
         "pageable staging copy: typical measured values, not datasheet figures"),
    ),
    Chip(
        "npu-like",
        "a training NPU (Huawei Ascend 910): a 16-bit cube (matrix) unit, a slower vector unit, HBM",
        CostModel(peak_gflops=4_000.0, matrix_gflops=0.0, matrix16_gflops=256_000.0, bandwidth_gbs=1_200.0,
                  launch_us=5.0, host_launch_us=10.0, link_gbs=32.0, link_latency_us=10.0, host_memcpy_gbs=12.0,
                  peer_gbs=30.0, peer_latency_us=5.0, event_us=0.5),
        ("Liao et al., 'DaVinci: A Scalable Architecture for Neural Network Computing', Hot Chips 31 (2019), and "
         "Huawei's Ascend 910 specification: 256 TFLOPS FP16 on the cube units, 32 DaVinci cores, HBM2 1.2 TB/s, "
         "PCIe 4.0 x16",
         "the cube unit takes FP16 (and INT8) operands: float32 matrix products run on the vector unit here",
         "vector unit 4 TFLOP/s: an estimate (32 cores x 64 float32 lanes of a 2048-bit vector x 2 for a fused "
         "multiply-add x about 1 GHz), not a published figure",
         "peer link 30 GB/s (one HCCS link), launch and host costs: estimates, not datasheet figures"),
    ),
    Chip(
        "edge",
        "a small edge module (NVIDIA Jetson Orin Nano 8GB): slow host, narrow memory, launch-bound",
        CostModel(peak_gflops=1_280.0, matrix_gflops=1_280.0, matrix16_gflops=10_000.0, bandwidth_gbs=68.0,
                  launch_us=5.0, host_launch_us=25.0, link_gbs=34.0, link_latency_us=6.0, host_memcpy_gbs=8.0,
                  peer_gbs=34.0, peer_latency_us=6.0, event_us=1.0),
        ("NVIDIA Jetson Orin Nano Series datasheet: 1024 CUDA cores at 625 MHz (1.28 TFLOP/s FP32), 32 tensor "
         "cores, 40 TOPS sparse INT8 (so about 10 TFLOP/s dense FP16), 128-bit LPDDR5 at 68 GB/s, 6-core "
         "Arm Cortex-A78AE CPU",
         "host and device share one DRAM: the 'link' is a memcpy within it (half its bandwidth, read + write)",
         "25 us of host dispatch per operator on the Arm cores, and the launch latencies: estimates, not "
         "datasheet figures"),
    ),
)

PRESETS: dict[str, Chip] = {c.name: c for c in _PRESETS}


def chips() -> dict[str, Chip]:
    """The named chips, by name: ``for c in npu_lab.chips().values(): print(c.describe())``."""
    return dict(PRESETS)


def current_chip() -> str:
    """The name of the preset the devices use now, or ``"custom"`` if a figure was changed."""
    now = cost_model.snapshot()
    for chip in _PRESETS:
        if all(abs(getattr(now, f.name) - getattr(chip.figures, f.name)) < 1e-9 for f in fields(CostModel)):
            return chip.name
    return "custom"


class use_chip:  # noqa: N801 - used like a function, and as a context manager
    """Make every simulated device use the preset ``name`` (see :func:`chips`).

    Called alone it switches for the rest of the session; as ``with npu_lab.use_chip("gpu-like"):``
    it switches back to the previous figures when the block ends. Clocks are not reset: time goes on
    from where it stands, at the new chip's speed.
    """

    def __init__(self, name: str) -> None:
        if name not in PRESETS:
            raise ValueError(f"no chip named {name!r}; the chips are {', '.join(PRESETS)}")
        self.chip = PRESETS[name]
        self._previous = cost_model.snapshot()
        cost_model.load(self.chip.figures)

    def __enter__(self) -> Chip:
        return self.chip

    def __exit__(self, *exc: object) -> None:
        cost_model.load(self._previous)

    def __repr__(self) -> str:
        return f"<npu_lab.use_chip {self.chip.name!r}>"


def apply_environment() -> None:
    """Use the chip ``NPU_LAB_CHIP`` names, if it names one (called at ``import npu_lab``)."""
    name = os.environ.get("NPU_LAB_CHIP", "").strip()
    if name:
        use_chip(name)
