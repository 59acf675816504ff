"""Rule: a graph break inside a compiled function (issue 33.4): Dynamo stopped tracing at a line it could not
compile, so the function runs as two graphs and the code between them in Python, every call."""

from __future__ import annotations

from collections import defaultdict

from deepctx.profiles.analyzer import apis
from deepctx.profiles.analyzer.finding import Finding
from deepctx.profiles.analyzer.index import GpuRecord, Site
from deepctx.profiles.analyzer.registry import Context, NotEvaluated, Rule, register
from deepctx.profiles.analyzer.rules.common import cpu_ns, launch_api_ns, steady
from deepctx.profiles.analyzer.rules.compiles import NO_COMPILES, call_site, compiles_in


def eager(r: GpuRecord) -> bool:
    """Launched outside compiled code: no Inductor wrapper frame on its path."""
    return not r.ctx.in_wrapper


def is_resume(site: Site) -> bool:
    """A line of a resume function (the graph Dynamo compiled after a break)."""
    return site.function.rsplit(".", 1)[-1].startswith("torch_dynamo_resume_in_")


def in_function(site: Site | None, file: str, function: str, first_line: int) -> bool:
    """A line of the compiled function (or of the resume function Dynamo made at the break, same file)."""
    if site is None or site.file != file or site.line is None or site.line < first_line:
        return False
    name = site.function.rsplit(".", 1)[-1]
    return name == function or name.startswith("torch_dynamo_resume_in_" + function)


@register
class GraphBreaks(Rule):
    id = "graph-break"
    number = 19
    title = "graph breaks inside a compiled function"
    needs = "api"

    def evaluate(self, ctx: Context) -> list[Finding] | NotEvaluated:
        idx = ctx.index
        compiles = compiles_in(idx.doc)
        if not compiles:
            return NO_COMPILES
        breaks: dict[tuple[str, int], list[tuple[dict, dict]]] = defaultdict(list)
        for c in compiles:
            for b in c["graph_breaks"]:
                breaks[(b["file"], b["line"])].append((c, b))
        out = []
        for (file, line), found in breaks.items():
            c, b = found[0]
            # what one graph would not pay (a model measured against examples/inefficiencies/graph_break.py on the
            # H200): the Python run between the graphs at the function's lines (outside API calls and graphs), the
            # host time of kernels launched there one by one, the copies and syncs at the break's own line (the
            # host waiting for a value the GPU computes: `.item()`), and the fixed cost of calling the resumed
            # graphs (their runtime wrappers, not the generated code that launches their kernels)
            sites = {s for s in idx.site_samples if in_function(s, file, c["function"], c["line"])}
            groups = [idx.site_samples[s] for s in sites]
            between = cpu_ns(idx, sum(g.samples - g.api_samples - g.compile_samples - g.graph_samples for g in groups))
            # the graphs called after the break: from a resume function's lines, or from the break's own line (the
            # compiled function's code calls the resumed graph there; Python 3.12's frames name it either way)
            resumed = cpu_ns(idx, sum(idx.site_samples[s].graph_call_samples for s in sites
                                      if is_resume(s) or (s.file, s.line) == (file, line)))
            eager_recs = [r for r in steady(idx.gpu) if eager(r) and in_function(r.ctx.site, file, c["function"],
                                                                                   c["line"])]
            api = launch_api_ns(eager_recs)
            waits = sum(r.api_time_ns for r in steady(idx.gpu) if r.kind in ("sync", "memcpy") and r.ctx.site is not None
                        and (r.ctx.site.file, r.ctx.site.line) == (file, line) and eager(r))
            removable = between + api + waits + resumed
            here = Site(file, line, c["function"])
            out.append(Finding(
                rule=self.id, title=f"graph break in {c['function']} at line {line}", site=here,
                evidence={"reason": b["reason"], "compiled_function": f"{c['function']} ({c['file']}:{c['line']})",
                          "eager_cpu_ns": between, "eager_launches": sum(r.calls for r in eager_recs
                                                                if r.api_class in (apis.LAUNCH, apis.GRAPH)),
                          "eager_launch_api_ns": api, "wait_at_break_ns": waits, "resumed_graph_calls_ns": resumed,
                          "called_at": call_site(c).label()},
                suggestion=(f"Dynamo cannot compile line {line} of {c['function']} ({b['reason']}), so "
                            f"{c['function']} runs as separate graphs with Python between them at every call. Move "
                            "that line out of the compiled function, or replace it with something Dynamo traces "
                            "(torch._dynamo.explain lists every break; fullgraph=True makes a break an error)."),
                estimated_speedup=ctx.basis.speedup(removable), confidence=0.5,
                model=("graph break: R = CPU time at the broken function's lines outside its graphs + the host "
                       "time of the kernels launched there eagerly + the copies and syncs at the break's line + the "
                       "runtime wrappers of the resumed graphs' calls; speedup = T/(T-R). The fusion lost across the "
                       "break is not counted"),
                removable_ns=int(removable)))
        return out
