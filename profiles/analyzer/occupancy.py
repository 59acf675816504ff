"""How many warps of a kernel fit on a multiprocessor, from its launch (threads per block, shared memory per
block), its registers per thread (from the cubin, when the profile has them) and the GPU's limits per
compute capability (NVIDIA's occupancy calculator's tables). Without registers the result is what the other
limits allow, an upper bound."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SmLimits:
    max_warps: int
    shared_bytes: int  # shared memory per multiprocessor a kernel may use
    max_blocks: int
    reserved_per_block: int  # shared memory the system keeps per block


# compute capability -> limits per multiprocessor
LIMITS = {
    "7.0": SmLimits(64, 96 << 10, 32, 0), "7.5": SmLimits(32, 64 << 10, 16, 0),
    "8.0": SmLimits(64, 164 << 10, 32, 1 << 10), "8.6": SmLimits(48, 100 << 10, 16, 1 << 10),
    "8.7": SmLimits(48, 164 << 10, 16, 1 << 10), "8.9": SmLimits(48, 100 << 10, 24, 1 << 10),
    "9.0": SmLimits(64, 228 << 10, 32, 1 << 10), "10.0": SmLimits(64, 228 << 10, 32, 1 << 10),
}
DEFAULT_CC = "9.0"  # the H200's
REGISTERS_PER_SM = 65536  # every listed capability
REGISTER_GRANULE = 256  # registers are allocated per warp in units of this


@dataclass(frozen=True)
class Occupancy:
    blocks: int  # resident blocks per multiprocessor
    warps: int  # resident warps per multiprocessor
    share: float  # of the multiprocessor's warps
    limit: str  # what limits it: "registers", "shared memory", "warps", "blocks"


def occupancy(threads_per_block: int, shared_per_block: int, cc: str | None,
              registers: int | None = None) -> Occupancy | None:
    lim = LIMITS.get(cc or DEFAULT_CC)
    if lim is None or threads_per_block <= 0:
        return None
    warps = -(-threads_per_block // 32)
    by = {"warps": lim.max_warps // warps, "blocks": lim.max_blocks}
    if shared_per_block:
        by["shared memory"] = lim.shared_bytes // (shared_per_block + lim.reserved_per_block)
    if registers:
        per_warp = -(-registers * 32 // REGISTER_GRANULE) * REGISTER_GRANULE
        by["registers"] = (REGISTERS_PER_SM // per_warp) // warps
    # ties: the kernel's own choices (shared memory, registers) are the ones to fix
    limit = min(by, key=lambda k: (by[k], k not in ("shared memory", "registers")))
    blocks = by[limit]
    return Occupancy(blocks, blocks * warps, round(blocks * warps / lim.max_warps, 3), limit)
