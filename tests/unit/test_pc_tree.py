"""PC samples into the calling context tree (daemon/pc_tree.py): constructed samples at known PC offsets of
the recorded cubin (tests/fixtures/cubin) land on kernel -> function -> line -> instruction with exact
counts per stall reason."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from deepctx.daemon.capture import CaptureResult
from deepctx.daemon.pc_tree import NOT_LAUNCHED, add_pc_samples, stall_metric
from deepctx.daemon.profile_wire import to_message
from deepctx.daemon.tree import CallTree
from deepctx.host import sass
from deepctx.host.frames import Frame
from deepctx.probes.pc_sampling import PCS_E_UNSUPPORTED, PCS_ON, Cubin, PcsData, PcsOptions, PcsStatusMessage
from deepctx.profiles.document import to_doc

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "cubin"
SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "docs" / "profile.schema.json").read_text())
CUBIN = (FIXTURES / "pcs_kernels.sm_90.cubin").read_bytes()
CRC = 0xC0FFEE
needs_nvdisasm = pytest.mark.skipif(sass.find_nvdisasm() is None,
                                    reason="nvdisasm not found (pip install nvidia-cuda-nvdisasm)")


def data() -> PcsData:
    d = PcsData()
    d.cubins[CRC] = Cubin(CRC, 1, len(CUBIN), bytearray(CUBIN), len(CUBIN))
    ids: dict[str, int] = {}
    for s in json.loads((FIXTURES / "pcs_samples.json").read_text())["samples"]:
        fn = ids.setdefault(s["function"], len(ids) + 1)
        stall = next((i for i, n in d.stalls.items() if n == s["stall"]), 100 + len(d.stalls))
        d.names[fn], d.stalls[stall] = s["function"], s["stall"]
        d.samples[(fn, CRC, int(s["pc"], 16), stall)] += s["samples"]
    d.messages = 1
    d.statuses.append(PcsStatusMessage(PCS_ON, 0, 0, 0, 0, ""))  # the agent's word that sampling started
    return d


def tree(saxpy_sites: dict[int, int]) -> tuple[CallTree, dict[int, int]]:
    """A thread with Python lines launching kernels: saxpy from each line of saxpy_sites (line -> GPU time),
    strided_copy from line 30."""
    t = CallTree("python train.py")
    nodes = {}
    for line, ns in [*saxpy_sites.items(), (30, 500)]:
        name = "strided_copy" if line == 30 else "saxpy"
        idx = t.node_for([Frame("thread", "python", tid=1), Frame("python", "step", "train.py", line),
                          Frame("api", "cudaLaunchKernel", module="libcudart.so.13"), Frame("kernel", name)])
        t.add_at(idx, "gpu_time_ns", ns)
        t.add_at(idx, "calls", 1)
        nodes[line] = idx
    return t, nodes


def below(t: CallTree, node: int) -> dict[tuple[str, str, str], dict[str, int]]:
    """(function, line, instruction) -> metrics of every instruction node under a kernel node."""
    out = {}
    for fn in t.nodes[node].children.values():
        for line in t.nodes[fn].children.values():
            for ins in t.nodes[line].children.values():
                out[(t.nodes[fn].frame.name, t.nodes[line].frame.name, t.nodes[ins].frame.name)] = t.nodes[ins].metrics
    return out


@needs_nvdisasm
def test_samples_land_on_line_and_instruction_with_their_stall_reasons() -> None:
    t, nodes = tree({10: 100})
    out = add_pc_samples(t, data(), PcsOptions())
    assert out.warnings == []
    assert below(t, nodes[10]) == {
        ("saxpy", "pcs_kernels.cu:12", "0x00d0  LDG.E R2, desc[UR4][R2.64]"): {"pc_samples": 6, "stall_selected": 6},
        ("saxpy", "pcs_kernels.cu:12", "0x0100  FFMA R7, R2, UR6, R7"):
            {"pc_samples": 44, "stall_long_scoreboard": 40, "stall_selected": 4},
    }
    assert below(t, nodes[30]) == {
        ("strided_copy", "pcs_kernels.cu:6", "0x0230  LDG.E R3, desc[UR4][R2.64]"): {"pc_samples": 7, "stall_lg_throttle": 7},
        ("strided_copy", "pcs_kernels.cu:6", "0x0250  STG.E desc[UR4][R4.64], R3"):
            {"pc_samples": 30, "stall_long_scoreboard": 30},
        ("strided_copy", "pcs_kernels.cu:6", "0x00e0  MUFU.RCP R4, R4"): {"pc_samples": 2, "stall_mio_throttle": 2},
    }
    line = t.nodes[next(iter(t.nodes[next(iter(t.nodes[nodes[10]].children.values()))].children.values()))].frame
    assert line.kind == "gpu_line" and line.line == 12 and (line.file or "").endswith("pcs_kernels.cu")
    assert out.stats == {"pc_samples_in_profile": 89, "pc_samples_filtered": 0, "pc_samples_without_launch": 0,
                         "pc_sampled_kernels": 2, "pc_kernels_matched": 2}


@needs_nvdisasm
def test_a_kernel_launched_from_two_lines_shares_its_samples_by_gpu_time() -> None:
    t, nodes = tree({10: 300, 20: 100})
    add_pc_samples(t, data(), PcsOptions())
    fma = ("saxpy", "pcs_kernels.cu:12", "0x0100  FFMA R7, R2, UR6, R7")
    assert below(t, nodes[10])[fma] == {"pc_samples": 33, "stall_long_scoreboard": 30, "stall_selected": 3}
    assert below(t, nodes[20])[fma] == {"pc_samples": 11, "stall_long_scoreboard": 10, "stall_selected": 1}
    assert t.total("pc_samples") == 89  # nothing lost to rounding


def test_the_kernel_regex_chooses_and_says_when_it_matches_nothing() -> None:
    t, nodes = tree({10: 100})
    out = add_pc_samples(t, data(), PcsOptions(kernel="^strided"), disassemble=lambda b: sass.Disassembly({}, "x"))
    assert below(t, nodes[10]) == {} and t.total("pc_samples") == 39
    assert out.stats["pc_samples_filtered"] == 50 and out.stats["pc_kernels_matched"] == 1
    t, _ = tree({10: 100})
    out = add_pc_samples(t, data(), PcsOptions(kernel="gemm"), disassemble=lambda b: sass.Disassembly({}, "x"))
    assert t.total("pc_samples") == 0
    assert out.warnings == ["--kernel 'gemm' matched none of the 2 kernels that ran (saxpy, strided_copy)"]


def test_without_nvdisasm_instructions_are_pc_offsets_and_a_warning_says_why() -> None:
    t, nodes = tree({10: 100})

    def missing(cubin: bytes) -> sass.Disassembly:
        raise FileNotFoundError("nvdisasm not found (looked in: /usr/local/cuda/bin/nvdisasm)")

    out = add_pc_samples(t, data(), PcsOptions(), disassemble=missing)
    assert set(below(t, nodes[10])) == {("saxpy", "[no line info]", "0x00d0"), ("saxpy", "[no line info]", "0x0100")}
    assert len(out.warnings) == 1 and out.warnings[0].startswith(
        "PC samples have no source lines or SASS: nvdisasm not found (looked in: /usr/local/cuda/bin/nvdisasm)")


def test_a_cubin_that_never_came_is_named_with_why() -> None:
    """Attach: a module loaded before the agent, whose cubin the process holds only compressed."""
    t, nodes = tree({10: 100})
    d = data()
    del d.cubins[CRC]
    out = add_pc_samples(t, d, PcsOptions())
    assert set(below(t, nodes[10])) == {("saxpy", "[no line info]", "0x00d0"), ("saxpy", "[no line info]", "0x0100")}
    assert out.warnings == [f"PC samples of cubin {CRC:#x}: no cubin came for it, so its lines and instructions are "
                            "unknown (its module was loaded before the agent, at attach, and the process holds no "
                            "uncompressed copy of it, as with a compressed fatbin; `deepctx run --pc-sampling` sees "
                            "every module as it is loaded)"]


def test_samples_of_a_kernel_whose_launch_was_not_seen_are_kept_apart() -> None:
    t = CallTree("p")
    out = add_pc_samples(t, data(), PcsOptions(), disassemble=lambda b: sass.Disassembly({}, "x"))
    holder = t.node_for([NOT_LAUNCHED, Frame("kernel", "saxpy")])
    assert sum(m.get("pc_samples", 0) for m in below(t, holder).values()) == 50
    assert out.stats["pc_samples_without_launch"] == 89


def test_a_kernel_named_with_another_argument_spelling_still_gets_its_samples() -> None:
    t = CallTree("p")
    # the launch named by another tool's spelling of the arguments
    node = t.node_for([Frame("thread", "python", tid=1), Frame("kernel", "saxpy(float, const float *, float *, int)")])
    t.add_at(node, "gpu_time_ns", 10)
    d = data()
    d.names[1] = "_Z5saxpyfPKfPfi"  # demangled: 'saxpy(float, float const*, float*, int)'
    d.names[2] = "strided_copy(float*, float const*, int, int)"
    out = add_pc_samples(t, d, PcsOptions(), disassemble=lambda b: sass.Disassembly({}, "x"))
    assert sum(m.get("pc_samples", 0) for m in below(t, node).values()) == 50
    assert out.stats["pc_samples_without_launch"] == 39  # no strided_copy launch at all


def test_an_unsupported_gpu_is_a_warning() -> None:
    d = PcsData(statuses=[PcsStatusMessage(PCS_E_UNSUPPORTED, 0, 0, 0, 0, "cuptiPCSamplingEnable: not supported")])
    out = add_pc_samples(CallTree("p"), d, PcsOptions())
    assert out.warnings == ["no PC samples: the GPU or driver does not support PC sampling "
                            "(cuptiPCSamplingEnable: not supported)"]


def test_sampling_that_never_started_is_a_warning() -> None:
    out = add_pc_samples(CallTree("p"), PcsData(), PcsOptions())
    assert out.warnings == ["no PC samples: PC sampling never started (no CUDA context was active or created while "
                            "the agent watched: no GPU, or only contexts made with cuCtxCreate before the capture)"]


def test_stall_metric_names() -> None:
    assert stall_metric("smsp__pcsamp_warps_issue_stalled_long_scoreboard") == "stall_long_scoreboard"
    assert stall_metric("smsp__pcsamp_warps_issue_stalled_not_selected") == "stall_not_selected"
    assert stall_metric("odd") == "stall_odd"


def test_the_document_carries_the_new_metrics_and_kinds() -> None:
    t, _ = tree({10: 100})
    add_pc_samples(t, data(), PcsOptions(), disassemble=lambda b: sass.Disassembly({}, "x"))
    result = CaptureResult(pid=1, command="p", duration_s=1.0, started_unix=0.0, ended="duration", sample_hz=99,
                           tree=t, stats={"device_sm_count": 132, "device_compute_capability": 90})
    doc = to_doc(to_message(result))
    assert doc["metrics"] == ["cpu_samples", "calls", "api_time_ns", "gpu_time_ns", "bytes", "sync_wait_ns",
                              "pc_samples", "stall_lg_throttle", "stall_long_scoreboard", "stall_mio_throttle",
                              "stall_selected"]
    assert doc["device"] == {"name": None, "sm_count": 132, "compute_capability": "9.0"}
    kinds = set()
    stack = [doc["root"]]
    while stack:
        n = stack.pop()
        kinds.add(n["kind"])
        stack += n["children"]
    assert {"gpu_function", "gpu_line", "gpu_instruction"} <= kinds
    fns = {}
    stack = [doc["root"]]
    while stack:
        n = stack.pop()
        stack += n["children"]
        if n["kind"] == "gpu_function":
            fns[n["name"]] = (n.get("registers"), n.get("static_shared"))
    assert fns == {"saxpy": (10, 0), "strided_copy": (12, 0)}  # the cubin's .nv.info, as ptxas reports them
    jsonschema.validate(doc, SCHEMA)


def test_not_issued_reasons_are_metrics_but_not_more_samples() -> None:
    """CUPTI's <reason>_not_issued counts the samples of <reason> taken when the scheduler issued nothing (a
    subset: on the H200, never more than <reason>'s in 15391 (instruction, reason) pairs): the instruction keeps
    it as a metric, pc_samples and the stats count each sample once."""
    d = data()
    ni = 900
    d.stalls[ni] = "smsp__pcsamp_warps_issue_stalled_long_scoreboard_not_issued"
    fn = next(i for i, n in d.names.items() if n == "saxpy")
    d.samples[(fn, CRC, 0x100, ni)] += 25
    assert d.sample_count() == 89 and sum(d.samples.values()) == 114
    t, nodes = tree({10: 100})
    out = add_pc_samples(t, d, PcsOptions(), disassemble=lambda b: sass.Disassembly({}, "x"))
    fma = below(t, nodes[10])[("saxpy", "[no line info]", "0x0100")]
    assert fma == {"pc_samples": 44, "stall_long_scoreboard": 40, "stall_selected": 4,
                   "stall_long_scoreboard_not_issued": 25}
    assert out.stats["pc_samples_in_profile"] == 89 and t.total("pc_samples") == 89
