"""PC samples into the calling context tree: under each kernel node, the kernel's function, its source
lines and its SASS instructions (gpu_function -> gpu_line -> gpu_instruction), each instruction carrying
`pc_samples` and one `stall_<reason>` metric per stall reason CUPTI named (docs/formats.md). A sample has one
stall reason; CUPTI's `<reason>_not_issued` reasons are subsets of `<reason>` (the samples taken when the warp's
scheduler issued nothing), so they have their metrics but do not add to `pc_samples`.

Samples are collected continuously (kernels are not serialized), so they carry no launch: a function's
samples go to the kernel nodes of that name, in proportion to their GPU time (else their launches). A kernel
launched from two lines therefore shares its samples between them by time, which is exact only when both
launches run the same code path. Line info and SASS come from the cubin the agent sent, through nvdisasm
(host/sass.py); without it the instruction nodes are bare PC offsets, and a warning says why."""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from deepctx.daemon.gpu_tree import apportion
from deepctx.daemon.tree import CallTree
from deepctx.host import cubin_resources, sass, sass_uniformity
from deepctx.host.demangle import demangle
from deepctx.host.frames import Frame
from deepctx.probes.pc_sampling import PCS_E_NO_API, PCS_E_UNSUPPORTED, PCS_ON, PcsData, PcsOptions
from deepctx.profiles.gpu_branches import from_analysis

PC_SAMPLES = "pc_samples"
_STALL_PREFIXES = ("smsp__pcsamp_warps_issue_stalled_", "smsp__pcsamp_warps_issue_", "smsp__pcsamp_")
NOT_LAUNCHED = Frame("thread", "[PC samples of kernels whose launch was not seen]", tid=0)
NO_LINE = "[no line info]"


def stall_metric(reason: str) -> str:
    """CUPTI's stall reason name as a metric: smsp__pcsamp_warps_issue_stalled_long_scoreboard ->
    stall_long_scoreboard."""
    for prefix in _STALL_PREFIXES:
        if reason.startswith(prefix):
            return "stall_" + reason[len(prefix):]
    return "stall_" + reason


def _base(name: str) -> str:
    """A demangled name without its argument list ('void k<int>(float*, int)' -> 'void k<int>')."""
    return name.split("(", 1)[0].strip()


def is_pc_metric(name: str) -> bool:
    return name == PC_SAMPLES or name.startswith("stall_")


@dataclass
class PcAttribution:
    stats: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def _weights(tree: CallTree, nodes: list[int]) -> list[int]:
    for metric in ("gpu_time_ns", "calls"):
        w = [tree.nodes[i].metrics.get(metric, 0) for i in nodes]
        if sum(w):
            return w
    return [1] * len(nodes)


def _disassemblies(data: PcsData, crcs: set[int], disassemble: Callable[[bytes], sass.Disassembly],
                   out: PcAttribution, resources: dict[int, dict[str, cubin_resources.KernelResources]],
                   ) -> dict[int, sass.Disassembly]:
    result: dict[int, sass.Disassembly] = {}
    for crc in sorted(crcs):
        cubin = data.cubins.get(crc)
        if cubin is None:  # the agent sends every cubin it has with its first sample
            out.warnings.append(f"PC samples of cubin {crc:#x}: no cubin came for it, so its lines and "
                                "instructions are unknown (its module was loaded before the agent, at attach, and "
                                "the process holds no uncompressed copy of it, as with a compressed fatbin; "
                                "`deepctx run --pc-sampling` sees every module as it is loaded)")
            continue
        if not cubin.complete:
            out.warnings.append(f"PC samples of cubin {crc:#x}: the cubin did not arrive whole (its lines and "
                                "instructions are unknown)")
            continue
        resources[crc] = cubin_resources.resources(bytes(cubin.data))  # needs no toolkit
        try:
            result[crc] = disassemble(bytes(cubin.data))
        except FileNotFoundError as e:
            out.warnings.append(f"PC samples have no source lines or SASS: {e}; install the CUDA toolkit's "
                                "nvdisasm (or pip install nvidia-cuda-nvdisasm) where deepctxd runs")
            break  # the same for every cubin
        except OSError as e:
            out.warnings.append(f"PC samples of cubin {crc:#x} have no source lines or SASS: {e}")
    return result


def _location(dis: sass.Disassembly | None, function: str, pc: int) -> tuple[Frame, Frame]:
    """The (line, instruction) frames of a PC."""
    ins = dis.at(function, pc) if dis is not None else None
    if ins is None:
        return Frame("gpu_line", NO_LINE), Frame("gpu_instruction", f"{pc:#06x}")
    if ins.file is None or ins.line is None:
        line = Frame("gpu_line", NO_LINE)
    else:
        line = Frame("gpu_line", f"{os.path.basename(ins.file)}:{ins.line}", file=ins.file, line=ins.line)
    return line, Frame("gpu_instruction", f"{pc:#06x}  {ins.text}", line=ins.line)


def _block_x(tree: CallTree, kernel: int) -> int | None:
    launch = tree.nodes[kernel].frame.launch
    return launch[3] if launch is not None else None


class _Branches:
    """Each sampled function's lane-varying branches (host/sass_uniformity.py), per launch's blockDim.x (which
    decides whether tid.x >> 5 is one value per warp); analysed once per function and block width."""

    def __init__(self, dis: dict[int, sass.Disassembly]) -> None:
        self.dis = dis
        self.done: dict[tuple[int, str, int | None], list[dict]] = {}

    def of(self, crc: int, function: str, block_x: int | None) -> list[dict]:
        key = (crc, function, block_x)
        if key not in self.done:
            d = self.dis.get(crc)
            ins = d.functions.get(function, []) if d is not None else []
            labels = d.labels.get(function, {}) if d is not None else {}
            self.done[key] = from_analysis(sass_uniformity.analyze(ins, labels, block_x), block_x) if ins else []
        return self.done[key]


def add_pc_samples(tree: CallTree, data: PcsData, options: PcsOptions,
                   disassemble: Callable[[bytes], sass.Disassembly] = sass.disassemble) -> PcAttribution:
    out = PcAttribution()
    failure = data.failure()
    if failure is not None:
        reason = {PCS_E_UNSUPPORTED: "the GPU or driver does not support PC sampling",
                  PCS_E_NO_API: "the process's CUPTI has no PC sampling API"}.get(failure.code, "a CUPTI call failed")
        out.warnings.append(f"no PC samples: {reason} ({failure.text})")
    kernels: dict[str, list[int]] = defaultdict(list)
    by_base: dict[str, list[int]] = defaultdict(list)  # without argument lists: names told apart less exactly
    for idx, node in enumerate(tree.nodes):
        if node.frame.kind == "kernel":
            kernels[node.frame.name].append(idx)
            by_base[_base(node.frame.name)].append(idx)
    by_function: dict[int, list[tuple[int, int, int, int]]] = defaultdict(list)  # name id -> (crc, pc, stall, n)
    for (name_id, crc, pc, stall), n in data.samples.items():
        by_function[name_id].append((crc, pc, stall, n))
    chosen = {nid: recs for nid, recs in by_function.items()
              if options.matches(demangle(data.names.get(nid, "")), data.names.get(nid, ""))}
    res: dict[int, dict[str, cubin_resources.KernelResources]] = {}
    dis = _disassemblies(data, {crc for recs in chosen.values() for crc, *_ in recs}, disassemble, out, res)
    placed = unlaunched = 0
    branches = _Branches(dis)
    for nid, recs in chosen.items():
        raw = data.names.get(nid, "[unknown function]")
        pretty = demangle(raw)
        # the launch's name (its host stub's or CUPTI's) and the sampled function's can differ in their
        # argument lists' spelling: matched without them when the exact name has no node
        targets = kernels.get(pretty) or kernels.get(raw) or by_base.get(_base(pretty))
        if not targets:
            targets = [tree.node_for([NOT_LAUNCHED, Frame("kernel", pretty)])]
            unlaunched += sum(r[3] for r in recs if not data.is_not_issued(r[2]))
        weights = _weights(tree, targets)
        for crc, pc, stall, n in recs:
            line, ins = _location(dis.get(crc), raw, pc)
            metric = stall_metric(data.stalls.get(stall, f"reason_{stall}"))
            counted = not data.is_not_issued(stall)  # a subset of another reason's samples: not more samples
            for node, part in zip(targets, apportion(n, weights), strict=True):
                if not part:
                    continue
                r = res.get(crc, {}).get(raw)
                fn = Frame("gpu_function", pretty, module=f"cubin:{crc:016x}",
                           resources=(r.registers, r.static_shared) if r and r.registers is not None else None)
                fn_node = tree.node_for([fn], start=node)
                if "branches" not in tree.facts.get(fn_node, {}):
                    found = branches.of(crc, raw, _block_x(tree, node))
                    if found:  # a fact of the node, not its identity (docs/formats.md, "Inside a kernel")
                        tree.facts.setdefault(fn_node, {})["branches"] = found
                leaf = tree.node_for([line, ins], start=fn_node)
                if counted:
                    tree.add_at(leaf, PC_SAMPLES, part)
                    placed += part
                tree.add_at(leaf, metric, part)
    total = data.sample_count()
    out.stats = {"pc_samples_in_profile": placed, "pc_samples_filtered": total - sum(
        r[3] for recs in chosen.values() for r in recs if not data.is_not_issued(r[2])),
        "pc_samples_without_launch": unlaunched,
        "pc_sampled_kernels": len(by_function), "pc_kernels_matched": len(chosen)}
    if options.kernel is not None and not chosen:
        names = sorted({demangle(data.names.get(n, "")) for n in by_function} | set(kernels))
        shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        out.warnings.append(f"--kernel {options.kernel!r} matched none of the {len(names)} kernels that ran"
                            + (f" ({shown})" if names else ""))
    started = any(s.code == PCS_ON for s in data.statuses)
    if not started and failure is None:
        out.warnings.append("no PC samples: PC sampling never started (no CUDA context was active or created while "
                            "the agent watched: no GPU, or only contexts made with cuCtxCreate before the capture)")
    elif data.messages and not total and failure is None:
        out.warnings.append("PC sampling ran but CUPTI took no sample (kernels too short for the period, or none "
                            "ran while it sampled)")
    return out
