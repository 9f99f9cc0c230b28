"""The static tier's target GPU: one table of what a device of the target reports.

The static tier compiles for `sm_90a` on any machine, and traces the candidate's host code
with the device queries it makes answered from this table (`gate.hostview`), so that host
code sizing a persistent grid or a shared-memory budget sees an H100 SXM, not the machine the
gate runs on. The same table goes into the facts (`Facts.to_json()["target_properties"]`) and
bounds them (a compile asking for more shared memory than `shared_memory_per_block_optin`
would not launch). Pure data: nothing here imports torch, triton or CUDA.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class TargetProperties:
    """A GPU as its driver describes it (CUDA device attributes, in their units)."""

    name: str                           # the compile target, e.g. "sm_90a"
    device_name: str
    major: int
    minor: int
    sm_count: int                       # streaming multiprocessors
    warp_size: int
    max_threads_per_block: int
    max_threads_per_sm: int
    registers_per_block: int            # 32-bit registers
    registers_per_sm: int
    shared_memory_per_block: int        # bytes a launch gets without opting in
    shared_memory_per_block_optin: int  # bytes a kernel may opt in to (static + dynamic)
    shared_memory_per_sm: int
    total_memory: int                   # bytes of device memory
    l2_cache_bytes: int
    sm_clock_khz: int
    memory_clock_khz: int
    memory_bus_width_bits: int

    @property
    def arch(self) -> int:
        """The compute capability as Triton's `GPUTarget` spells it (90 for 9.0)."""
        return self.major * 10 + self.minor

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


# H100 SXM5 80 GB (the H200 has the same SM count and per-SM limits, with more memory).
SM_90A = TargetProperties(
    name="sm_90a", device_name="NVIDIA H100 80GB HBM3 (static target)", major=9, minor=0,
    sm_count=132, warp_size=32, max_threads_per_block=1024, max_threads_per_sm=2048,
    registers_per_block=65536, registers_per_sm=65536,
    shared_memory_per_block=48 * 1024, shared_memory_per_block_optin=227 * 1024,
    shared_memory_per_sm=228 * 1024, total_memory=80 * 2**30, l2_cache_bytes=50 * 2**20,
    sm_clock_khz=1_980_000, memory_clock_khz=2_619_000, memory_bus_width_bits=5120,
)

TARGETS: dict[str, TargetProperties] = {SM_90A.name: SM_90A}
STATIC_TARGET = SM_90A
