"""Rule: matrix products computed in FP32 on the CUDA cores, not on tensor cores (TF32, BF16, FP16)."""

from __future__ import annotations

from deepctx.profiles.analyzer.finding import Finding
from deepctx.profiles.analyzer.names import gemm_precision
from deepctx.profiles.analyzer.registry import Context, NotEvaluated, Rule, register
from deepctx.profiles.analyzer.rules.common import by_site, launches, site_text, top_kernels

TF32_SPEEDUP = 4.0  # GEMM time FP32 (CUDA cores) / TF32 (tensor cores): peak ratios are 7-8x on A100/H100


@register
class Fp32Gemm(Rule):
    id = "fp32-gemm"
    number = 8
    title = "matrix products not using tensor cores"
    needs = "api"

    def evaluate(self, ctx: Context) -> list[Finding] | NotEvaluated:
        idx, basis, lim = ctx.index, ctx.basis, ctx.limits
        # a kernel with PC samples is judged by its instructions (fp32-fma), not by its name: a kernel of the
        # program's own named like cuBLAS's (sgemm_*) is not fixed by the framework's TF32 switch
        gemms = [r for r in launches(idx) if gemm_precision(r.name) == "fp32" and r.pcs is None]
        out = []
        for site, recs in by_site(gemms).items():
            n = sum(r.calls for r in recs)
            if n < lim.loop_calls:
                continue
            gpu_ns = sum(r.gpu_time_ns for r in recs)
            evidence: dict[str, object] = {"launches": n, "kernels": top_kernels(recs), "precision": "fp32 on CUDA cores"}
            if gpu_ns:
                removable = gpu_ns * (1 - 1 / TF32_SPEEDUP)
                evidence["gpu_time_ns"] = gpu_ns
                evidence["share_of_time"] = basis.share(gpu_ns)
                speedup, confidence = basis.speedup(removable), 0.7
                model = f"tensor cores: R = FP32 GEMM GPU time x (1 - 1/{TF32_SPEEDUP:g}); speedup = T/(T-R)"
            else:
                removable, speedup, confidence = 0, None, 0.4
                model = f"not estimated: GPU time not measured (TF32 runs such GEMMs about {TF32_SPEEDUP:g}x faster)"
            out.append(Finding(
                rule=self.id, title=f"{n} FP32 matrix products on CUDA cores, not tensor cores", site=site,
                evidence=evidence,
                suggestion=(f"{site_text(site)} multiplies matrices in full FP32. Allow TF32 tensor cores with "
                            "torch.backends.cuda.matmul.allow_tf32 = True (or torch.set_float32_matmul_precision("
                            "'high')) and torch.backends.cudnn.allow_tf32 = True, or run the step under "
                            "torch.autocast('cuda', dtype=torch.bfloat16); in JAX, "
                            "jax.default_matmul_precision('tensorfloat32')."),
                estimated_speedup=speedup, confidence=confidence, model=model, removable_ns=int(removable)))
        return out
