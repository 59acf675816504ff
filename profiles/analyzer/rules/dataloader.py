"""Rule: the main thread loads data (torch.utils.data code: Dataset.__getitem__, collate) instead of
launching GPU work.

With worker processes the main thread only unpickles their batches and otherwise blocks on a queue, which
CPU samples do not see: that is not counted (a starved GPU shows up as host-bound or idle time instead)."""

from __future__ import annotations

from deepctx.profiles.analyzer.finding import Finding
from deepctx.profiles.analyzer.registry import Context, NotEvaluated, Rule, register
from deepctx.profiles.analyzer.rules.common import cpu_ns, site_text


@register
class DataLoaderOnMainThread(Rule):
    id = "dataloader-main-thread"
    number = 7
    title = "data loading on the step's critical path"
    needs = "api"

    def evaluate(self, ctx: Context) -> list[Finding] | NotEvaluated:
        idx, basis, lim = ctx.index, ctx.basis, ctx.limits
        main = basis.main_tid
        waits = idx.threads[main].sync_wait_ns if main in idx.threads else 0
        gpu_idle = basis.gpu_idle_ns
        out = []
        for (tid, site), all_samples in idx.loader_sites.items():
            samples = all_samples - idx.loader_multi.get((tid, site), 0)
            if tid != main or samples <= 0:
                continue
            if idx.loader_multi.get((tid, site)) and not idx.loader_single.get((tid, site)):
                continue  # a loader with workers: what is left (__next__'s own bookkeeping) is receiving batches
            load_ns = cpu_ns(idx, samples)
            if load_ns < lim.min_share * basis.time_ns:
                continue
            # moving loading off the main thread can only save time the GPU was not already busy
            bound = gpu_idle if gpu_idle is not None else max(0, basis.time_ns - waits)
            removable = min(load_ns, bound)
            user_code = sorted(((s, c) for (t, s), c in idx.loader_user_code.items() if t == tid),
                               key=lambda sc: -sc[1])[:3]
            evidence: dict[str, object] = {
                "loading_ns": load_ns, "share_of_time": basis.share(load_ns), "samples": samples,
                "loader": ("main thread (num_workers=0)" if idx.loader_single.get((tid, site))
                           else "main thread (an iterable without workers)"),
                "dataset_code": [{"at": s.label(), "cpu_ns": cpu_ns(idx, c)} for s, c in user_code],
            }
            if gpu_idle is not None:
                evidence["gpu_idle_ns"] = gpu_idle
                model = "loading: R = min(loading time on the main thread, GPU idle time); speedup = T/(T-R)"
            else:
                evidence["main_thread_gpu_wait_ns"] = waits
                model = ("loading: R = min(loading time on the main thread, T - time the main thread waited for "
                         "the GPU); speedup = T/(T-R); GPU idle time not measured")
            fix = ("The batches are built in the training process. Use DataLoader(..., num_workers=4 or more, "
                   "pin_memory=True, persistent_workers=True, prefetch_factor=2 or more) and copy batches with "
                   ".to(device, non_blocking=True).")
            out.append(Finding(
                rule=self.id, title="data loading on the main thread, on the step's critical path", site=site,
                evidence=evidence, suggestion=f"{site_text(site)} spends {load_ns / 1e6:.0f} ms loading data. {fix}",
                estimated_speedup=basis.speedup(removable), confidence=0.7 if gpu_idle is not None else 0.5,
                model=model, removable_ns=int(removable)))
        return out
