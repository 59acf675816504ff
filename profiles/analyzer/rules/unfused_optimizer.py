"""Rule: an optimizer step that launches thousands of small kernels, one parameter (or chunk) at a time, where
torch.optim's fused implementation does the update in a few kernels (issue 33.4)."""

from __future__ import annotations

from collections import defaultdict

from deepctx.profiles.analyzer.finding import Finding
from deepctx.profiles.analyzer.index import GpuRecord, Site
from deepctx.profiles.analyzer.names import FUSED_OPTIMIZERS, optimizer_impl
from deepctx.profiles.analyzer.registry import Context, NotEvaluated, Rule, register
from deepctx.profiles.analyzer.rules.common import (
    ASSUMED_TINY_KERNEL_NS,
    launch_cost,
    launch_evidence,
    launches,
    site_text,
)


def update_path(r: GpuRecord) -> tuple[str, str] | None:
    """(optimizer, path) of the innermost torch.optim update frame above a launch, if any."""
    for site in reversed(r.ctx.python):
        impl = optimizer_impl(site.file, site.function)
        if impl:
            return impl
    return None


def optimizer_class(r: GpuRecord) -> str | None:
    """The optimizer's class, from its step frame (AdamW.step: AdamW's update runs in adam.py)."""
    for site in r.ctx.python:
        if site.function.endswith(".step") and site.file and "/torch/optim/" in site.file:
            return site.function.rsplit(".", 1)[0]
    return None


def has_a_better_path(impl: tuple[str, str] | None) -> bool:
    """torch.optim has a faster implementation of this update: fused, or foreach for a per-parameter loop."""
    if impl is None or impl[1] == "fused":
        return False
    return impl[0] in FUSED_OPTIMIZERS or impl[1] == "single_tensor"


def optimizer_launch(r: GpuRecord) -> bool:
    """A launch this rule speaks for (launch-bound-loop leaves it: its advice is the generic one)."""
    return has_a_better_path(update_path(r))


@register
class UnfusedOptimizer(Rule):
    id = "unfused-optimizer"
    number = 17
    title = "optimizer steps launched one parameter at a time"
    needs = "api"

    def evaluate(self, ctx: Context) -> list[Finding] | NotEvaluated:
        idx, basis, lim = ctx.index, ctx.basis, ctx.limits
        idle = basis.gpu_idle_ns
        groups: dict[tuple[Site | None, str, str], list[GpuRecord]] = defaultdict(list)
        for r in launches(idx):
            impl = update_path(r)
            if impl is not None and has_a_better_path(impl):
                groups[(r.ctx.site, *impl)].append(r)
        out = []
        for (site, optimizer, path), recs in groups.items():
            cost = launch_cost(idx, site, recs)
            n, per_launch, measured = cost.launches, cost.per_launch_ns, cost.measured
            if n < lim.launch_bound_launches:
                continue
            kernel_ns = cost.gpu_ns / n if measured else ASSUMED_TINY_KERNEL_NS
            if kernel_ns >= per_launch:
                continue  # the update kernels outlast their launches: the GPU, not the host, sets the pace
            # fused, the launches become a few per parameter group: their host cost goes, the GPU's work stays
            removable = cost.removable_ns(n, kernel_ns, idle)
            fusable = optimizer in FUSED_OPTIMIZERS
            how = "fused=True" if fusable else "foreach=True"
            evidence = {"optimizer": optimizer, "implementation": f"_{path}_{optimizer}",
                        **launch_evidence(cost, recs, kernel_ns)}
            paths = {"single_tensor": "a loop over the parameters, several kernels each (foreach=False)",
                     "multi_tensor": "the foreach implementation, a few kernels per chunk of tensors"}
            out.append(Finding(
                rule=self.id, title=f"{n} kernel launches from the optimizer's step ({optimizer}, _{path}_{optimizer})",
                site=site, evidence=evidence,
                suggestion=(f"{site_text(site)} runs torch.optim's {optimizer} update as {paths[path]}: {n} "
                            f"small kernels, and the GPU waits for the host. Construct the optimizer with {how} "
                            f"(torch.optim.{optimizer_class(recs[0]) or _class(optimizer)}(params, ..., {how})): "
                            + ("one kernel per parameter group and dtype instead." if fusable else
                               "a few kernels per chunk of parameters instead of several per parameter.")),
                estimated_speedup=basis.speedup(removable), confidence=0.8 if measured else 0.5,
                model=("optimizer: R = min(launches x (host time per launch - GPU time per launch), GPU idle time); "
                       "speedup = T/(T-R)" + ("" if measured else "; GPU time not measured: 2 µs per kernel assumed")),
                removable_ns=int(removable)))
        return out


def _class(optimizer: str) -> str:
    return {"adam": "Adam", "adamw": "AdamW", "sgd": "SGD", "adagrad": "Adagrad", "rmsprop": "RMSprop",
            "adamax": "Adamax", "nadam": "NAdam", "radam": "RAdam", "asgd": "ASGD", "adadelta": "Adadelta",
            "rprop": "Rprop"}.get(optimizer, optimizer)
