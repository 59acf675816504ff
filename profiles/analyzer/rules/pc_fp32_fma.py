"""Rule: a kernel whose time goes to an FP32 multiply-accumulate loop over tiles in shared memory (FFMA fed by
LDS), where tensor cores (TF32, BF16) would do the same multiply-accumulates several times faster.

The loop's time is that of its FFMA instructions and of the shared-memory loads that feed them (the LDS on the
FFMAs' source lines): a naive tiled SGEMM on the H200 spends more of its samples in those loads (MIO queue,
short scoreboard) than in the FFMAs; tensor cores replace both (an mma takes its operands in a few fragment
loads). Samples that wait on global memory (long scoreboard, LG throttle) or at a barrier are the tile's
loading, which stays, and do not count. FFMAs on lines without shared-memory loads (a recurrence on registers,
x = x * a + b) are not a product of tiles and do not count."""

from __future__ import annotations

from collections import defaultdict

from deepctx.profiles.analyzer.pcs import PcInstruction
from deepctx.profiles.analyzer.registry import register
from deepctx.profiles.analyzer.rules.pc_common import PcStallRule

FMA = ("FFMA",)
SHARED_LOADS = ("LDS", "LDSM")


@register
class Fp32Fma(PcStallRule):
    id = "fp32-fma"
    number = 15
    title = "FP32 FMA loops where tensor cores apply"
    title_verb = "are an FP32 multiply-accumulate loop (FFMA and its shared-memory loads)"
    # the loop's own work: issuing, waiting on its pipes (FMA, MIO) and on its shared loads' results
    reasons = ("selected", "not_selected", "math_pipe_throttle", "dispatch_stall", "wait", "mio_throttle",
               "short_scoreboard")
    opcodes = FMA + SHARED_LOADS
    min_share = 0.4
    hide = 0.75
    model_note = "TF32 tensor cores run such multiply-accumulates about 4x faster, as the fp32-gemm rule assumes"

    def hits(self, instructions: list[PcInstruction]) -> list[tuple[PcInstruction, int]]:
        """FFMA and LDS on the source lines that have both (without line info: the function's)."""
        kinds: dict[str, set[str]] = defaultdict(set)
        for i in instructions:
            if i.opcode.startswith(FMA):
                kinds[i.where()].add("fma")
            elif i.opcode.startswith(SHARED_LOADS):
                kinds[i.where()].add("lds")
        return [(i, self.counts(i) if kinds[i.where()] == {"fma", "lds"} else 0) for i in instructions]

    fix = ("most of {kernel}'s samples are its FP32 multiply-accumulate loop at {line} ({instruction}): FFMA on "
           "operands read from shared memory, on the CUDA cores. If it is a matrix product or convolution, use "
           "tensor cores: cuBLAS/cuDNN with TF32 (torch.set_float32_matmul_precision('high')), BF16 inputs, or "
           "WMMA/mma.sync (tl.dot in Triton).")
