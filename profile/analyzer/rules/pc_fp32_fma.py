"""Rule: a kernel whose time goes to FP32 FMA instructions, where tensor cores (TF32, BF16) would do the
same multiply-accumulates several times faster."""

from __future__ import annotations

from deepctx.profile.analyzer.registry import register
from deepctx.profile.analyzer.rules.pc_common import PcStallRule


@register
class Fp32Fma(PcStallRule):
    id = "fp32-fma"
    number = 15
    title = "FP32 FMA loops where tensor cores apply"
    title_verb = "are FP32 FMAs (issuing, or waiting on the FMA pipe)"
    # issuing or waiting on the FMA pipe: FMA time (an FFMA waiting on its operands' loads is memory time)
    reasons = ("selected", "math_pipe_throttle", "not_selected", "dispatch_stall", "wait")
    opcodes = ("FFMA",)
    min_share = 0.4
    hide = 0.75
    model_note = "TF32 tensor cores run such multiply-accumulates about 4x faster, as the fp32-gemm rule assumes"

    fix = ("most of {kernel}'s samples are FFMA at {line} ({instruction}): a multiply-accumulate loop on the "
           "CUDA cores. If it is a matrix product or convolution, use tensor cores: cuBLAS/cuDNN with TF32 "
           "(torch.set_float32_matmul_precision('high')), BF16 inputs, or WMMA/mma.sync (tl.dot in Triton).")
