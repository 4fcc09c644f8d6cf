"""Hardware constants of the simulated NeuronCores, one place, each with its source.

Facts come from the AWS Neuron documentation, "Trainium/Inferentia2
Architecture Guide for NKI" and the Trn1/Trn2 architecture pages (NeuronCore-v2
and NeuronCore-v3). Numbers the documentation does not give (fixed
instruction and DMA overheads, launch overhead) are marked MODEL: they are
this simulator's assumptions, chosen to be of the right order, and are the
first thing to calibrate against a real device.

Select a profile with NEURON_PLATFORM_TARGET_OVERRIDE=trn1|trn2 (default trn1).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB


@dataclass(frozen=True)
class Platform:
    name: str
    core: str
    # Engine clocks (Hz). Source: NKI architecture guide, "NeuronCore-v2/v3 engines".
    tensor_hz: float
    vector_hz: float
    scalar_hz: float
    gpsimd_hz: float
    # TensorE: a 128x128 systolic array; one moving column per cycle at BF16.
    pe_rows: int
    pe_cols: int
    bf16_tflops: float
    fp32_tflops: float
    fp32_slowdown: int  # FP32 matmul runs at a quarter of the BF16 rate (NKI guide)
    # On-chip memories. Source: NKI guide, "SBUF" and "PSUM".
    partitions: int
    sbuf_bytes_per_partition: int
    psum_bytes_per_partition: int
    psum_banks: int
    # Device memory. Source: Trn1 / Trn2 instance architecture pages.
    hbm_bytes_per_chip: int
    hbm_bytes_per_second_per_chip: float
    cores_per_chip: int
    dma_engines: int
    # Sustained rate of one DMA engine with large payloads (>= 4 KiB per partition), from the NKI
    # "Guideline to Avoid Under-Utilizing DMA Bandwidth" table: TRN1 17 B/ns, TRN2 23 B/ns per engine,
    # 16 engines per NeuronCore (272 / 368 GB/s). The "Introduction to DMA" page's 27.2 GB/s per engine
    # is the engines' theoretical rate; this simulator used it (as 27 GiB/s) until its matmul timeline was
    # checked against the guide.
    dma_bytes_per_second_per_engine: float
    # MODEL assumptions (not published as such).
    instruction_overhead_cycles: int = 64  # fixed issue cost of any compute instruction
    scalar_overhead_cycles: int = 224  # ACT table lookup / pipeline fill of ScalarE
    dma_issue_ns: float = 10.0  # queue issue cost; hidden behind other queues' transfers, so it adds latency
    dma_latency_ns: float = 64.0  # completion latency after the last byte; pipelined, not occupying a queue
    # Overhead per contiguous run: penalises fine-grained strided access. The DMA bandwidth guide also says
    # transfers under 2 KiB per partition run below the sustained rate (under 256 B, a small fraction of it)
    # but gives no formula; this per-run cost is all that models it, so small transfers are optimistic here.
    dma_descriptor_bytes: int = 16
    launch_overhead_ns: float = 1000.0  # runtime cost of launching one kernel (eager mode)
    # Copies the runtime performs (tensor.to / .cpu(), same-layout device copies): a DMA set-up latency
    # plus bytes over the link. Host <-> device crosses PCIe (Gen4 x16 is ~32 GB/s raw per direction,
    # shared by the chip's cores: half of it, effective, per core).
    copy_latency_ns: float = 2000.0
    host_bytes_per_second: float = 16e9
    # A pageable (not pinned) host buffer cannot be read by the DMA engines: the runtime first copies it
    # into a pinned bounce buffer, then DMAs that (NVIDIA, "How to Optimize Data Transfers in CUDA C/C++":
    # the driver stages pageable transfers through a page-locked buffer, which is why pinned copies are
    # faster). MODEL: the host's staging memcpy runs at the PCIe rate and does not overlap the DMA, so a
    # pageable copy takes about twice a pinned one's time.
    pageable_staging_bytes_per_second: float = 16e9
    gpsimd_elements_per_cycle: int = 64  # 8 cores x 8 lanes of 32-bit SIMD
    # TensorE double-buffers weights: loading the next stationary tile (one row per cycle)
    # overlaps the previous matmul's moving stream, so only the part not hidden costs time.

    @property
    def moving_free_max(self) -> int:
        """Largest moving-tile free size: one PSUM bank of fp32 (2 KiB / 4 B)."""
        return self.psum_bytes_per_partition // self.psum_banks // 4

    @property
    def dma_bytes_per_second(self) -> float:
        """Aggregate DMA bandwidth of one core, capped by its share of HBM bandwidth."""
        return min(self.dma_engines * self.dma_bytes_per_second_per_engine,
                   self.hbm_bytes_per_second_per_chip / self.cores_per_chip)

    def copy_model(self) -> tuple[float, float, float, float]:
        """(latency ns, host bytes/ns, device bytes/ns, pageable staging bytes/ns) for the C++ core's
        modeled copy time (csrc/device.cpp: copy_time_ns)."""
        return (self.copy_latency_ns, self.host_bytes_per_second / 1e9, self.dma_bytes_per_second / 1e9,
                self.pageable_staging_bytes_per_second / 1e9)

    @property
    def tensor_flops_per_second(self) -> float:
        """BF16 peak implied by the array: 128 x 128 MACs, 2 flops each, per cycle."""
        return 2 * self.pe_rows * self.pe_cols * self.tensor_hz


TRN1 = Platform(
    name="trn1", core="NeuronCore-v2",
    tensor_hz=2.8e9, vector_hz=1.12e9, scalar_hz=1.4e9, gpsimd_hz=1.4e9,
    pe_rows=128, pe_cols=128, bf16_tflops=92.0, fp32_tflops=23.0, fp32_slowdown=4,
    partitions=128, sbuf_bytes_per_partition=192 * KiB, psum_bytes_per_partition=16 * KiB, psum_banks=8,
    hbm_bytes_per_chip=32 * GiB, hbm_bytes_per_second_per_chip=820e9, cores_per_chip=2,
    dma_engines=16, dma_bytes_per_second_per_engine=17e9,
)

TRN2 = Platform(
    name="trn2", core="NeuronCore-v3",
    tensor_hz=2.4e9, vector_hz=0.96e9, scalar_hz=1.2e9, gpsimd_hz=1.2e9,
    pe_rows=128, pe_cols=128, bf16_tflops=79.0, fp32_tflops=20.0, fp32_slowdown=4,
    partitions=128, sbuf_bytes_per_partition=224 * KiB, psum_bytes_per_partition=16 * KiB, psum_banks=8,
    hbm_bytes_per_chip=96 * GiB, hbm_bytes_per_second_per_chip=2.9e12, cores_per_chip=8,
    dma_engines=16, dma_bytes_per_second_per_engine=23e9,
)

PLATFORMS = {p.name: p for p in (TRN1, TRN2)}


def platform_from_environment() -> Platform:
    name = os.environ.get("NEURON_PLATFORM_TARGET_OVERRIDE", "trn1").strip().lower() or "trn1"
    if name not in PLATFORMS:
        raise ValueError(f"NEURON_PLATFORM_TARGET_OVERRIDE={name!r}: expected one of {sorted(PLATFORMS)}.")
    return PLATFORMS[name]


PLATFORM = platform_from_environment()
