"""The structs shared by BPF programs and Python: the C header is the truth, the ctypes mirror must match."""

from __future__ import annotations

import ctypes as ct
from pathlib import Path

from c_layout import c_values, struct_layout

from deepctx.probes import cpu_sampler


def test_sample_key_matches_header(tmp_path: Path) -> None:
    pairs = struct_layout("sample_key", cpu_sampler.SampleKey)
    assert c_values(tmp_path, ['"cpu_sampler.h"'], list(pairs)) == list(pairs.values())


def test_sampler_target_matches_header(tmp_path: Path) -> None:
    """The per-target settings the one loaded program reads (kernel stacks), not a -D per capture."""
    pairs = struct_layout("sampler_target", cpu_sampler.SamplerTarget)
    assert c_values(tmp_path, ['"cpu_sampler.h"'], list(pairs)) == list(pairs.values())


def test_sampler_constants_match_header(tmp_path: Path) -> None:
    names = ["SAMPLER_T_KERNEL_STACKS", "SAMPLE_F_USER_STACK_LOST", "SAMPLE_F_KERNEL_MODE", "SAMPLE_F_PY_SHIFT", "SAMPLE_F_NATIVE_SHIFT",
             "CPU_STAT_SAMPLES", "CPU_STAT_USER_STACK_LOST", "CPU_STAT_KERNEL_STACK_LOST", "CPU_STAT_COUNTS_FULL",
             "CPU_STAT__COUNT"]
    assert c_values(tmp_path, ['"cpu_sampler.h"'], names) == [getattr(cpu_sampler, n) for n in names]
    assert set(cpu_sampler.STAT_NAMES) == set(range(cpu_sampler.CPU_STAT__COUNT))


def test_gpu_api_structs_match_header(tmp_path: Path) -> None:
    from deepctx.probes import gpu_api

    pairs: dict[str, int] = {}
    for c_name, mirror in (("gpu_api_spec", gpu_api.GpuApiSpec), ("gpu_addr_key", gpu_api.GpuAddrKey),
                           ("gpu_key", gpu_api.GpuKey), ("gpu_val", gpu_api.GpuVal),
                           ("gpu_inflight", gpu_api.GpuInflight), ("gpu_fn_key", gpu_api.GpuFnKey),
                           ("gpu_config", gpu_api.GpuConfig), ("gpu_obj_info", gpu_api.GpuObjInfo),
                           ("gpu_ranges", gpu_api.GpuRanges), ("gpu_origin", gpu_api.GpuOrigin),
                           ("gpu_node_key", gpu_api.GpuNodeKey), ("gpu_node_origin", gpu_api.GpuNodeOrigin),
                           ("gpu_node_run", gpu_api.GpuNodeRun), ("gpu_type_name", gpu_api.GpuTypeName),
                           ("gpu_comm", gpu_api.GpuComm), ("gpu_orphan", gpu_api.GpuOrphan),
                           ("gpu_corr_key", gpu_api.GpuCorrKey), ("gpu_fp_stack", gpu_api.GpuFpStack)):
        pairs |= struct_layout(c_name, mirror)
    assert c_values(tmp_path, ['"gpu_api.h"'], list(pairs)) == list(pairs.values())


def test_gpu_api_constants_match_header(tmp_path: Path) -> None:
    from deepctx.host import gpu_apis
    from deepctx.probes import gpu_api

    pairs = {
        "GPU_KEY_F_SAMPLED": gpu_api.GPU_KEY_F_SAMPLED, "GPU_KEY_F_STACK_LOST": gpu_api.GPU_KEY_F_STACK_LOST,
        "GPU_NAME_LEN": gpu_api.GPU_NAME_LEN, "GPU_FP_DEPTH": gpu_api.GPU_FP_DEPTH,
        "GPU_FP_F_TRUNCATED": gpu_api.GPU_FP_F_TRUNCATED, "GPU_NO_SLOT": gpu_api.GPU_NO_SLOT,
        "GPU_STAT__COUNT": gpu_api.GPU_STAT__COUNT, "GPU_STAT_CALLS": gpu_api.GPU_STAT_CALLS,
        "GPU_STAT_NAMES_LEARNED": gpu_api.GPU_STAT_NAMES_LEARNED, "GPU_STAT_OBJECTS": gpu_api.GPU_STAT_OBJECTS,
        "GPU_OBJ_WORDS": gpu_api.GPU_OBJ_WORDS, "GPU_OBJ_STR": gpu_api.GPU_OBJ_STR,
        "GPU_SPEC_F_ENTRY_ONLY": gpu_api.GPU_SPEC_F_ENTRY_ONLY, "GPU_SPEC_F_DRIVER": gpu_api.GPU_SPEC_F_DRIVER,
        "GPU_MAX_RANGES": gpu_api.GPU_MAX_RANGES, "GPU_PROCS_MAX": gpu_api.GPU_PROCS_MAX,
        "sizeof(struct gpu_last_call)": ct.sizeof(gpu_api.GpuKey) + 8,
        "GPU_CLASS_LAUNCH": gpu_apis.LAUNCH, "GPU_CLASS_GRAPH": gpu_apis.GRAPH, "GPU_CLASS_MEMCPY": gpu_apis.MEMCPY,
        "GPU_CLASS_MEMSET": gpu_apis.MEMSET, "GPU_CLASS_ALLOC": gpu_apis.ALLOC, "GPU_CLASS_FREE": gpu_apis.FREE,
        "GPU_CLASS_SYNC": gpu_apis.SYNC, "GPU_CLASS_COLLECTIVE": gpu_apis.COLLECTIVE,
        "GPU_CLASS_GETFUNC": gpu_apis.GETFUNC, "GPU_CLASS_OTHER": gpu_apis.OTHER,
        "GPU_CLASS_FUNC_ALIAS": gpu_apis.FUNC_ALIAS, "GPU_CLASS_HANDOFF": gpu_apis.HANDOFF,
        "GPU_STAT_HANDOFFS": gpu_api.GPU_STAT_HANDOFFS, "GPU_STAT_HANDED_OFF": gpu_api.GPU_STAT_HANDED_OFF,
        "GPU_CLASS_NODE_CREATED": gpu_apis.NODE_CREATED, "GPU_CLASS_NODE_RUN": gpu_apis.NODE_RUN,
        "GPU_STAT_NODES_CREATED": gpu_api.GPU_STAT_NODES_CREATED, "GPU_STAT_NODES_RUN": gpu_api.GPU_STAT_NODES_RUN,
        "GPU_STAT_NODES_UNKNOWN": gpu_api.GPU_STAT_NODES_UNKNOWN, "GPU_STAT_NODE_CALLS": gpu_api.GPU_STAT_NODE_CALLS,
        "GPU_TYPE_NAME_LEN": gpu_api.GPU_TYPE_NAME_LEN, "GPU_STAT_ADOPTED": gpu_api.GPU_STAT_ADOPTED,
        "GPU_LAYOUT_LAUNCH_DIM3": gpu_apis.L_DIM3, "GPU_LAYOUT_LAUNCH_SCALARS": gpu_apis.L_SCALARS,
        "GPU_LAYOUT_LAUNCH_CU_EX": gpu_apis.L_CU_EX, "GPU_LAYOUT_LAUNCH_RT_EX": gpu_apis.L_RT_EX,
        "GPU_COPY_H2D": gpu_apis.H2D, "GPU_COPY_D2H": gpu_apis.D2H, "GPU_COPY_D2D": gpu_apis.D2D,
        "GPU_COPY_DEFAULT": gpu_apis.DEFAULT, "GPU_COPY_PEER": gpu_apis.PEER, "GPU_COPY_UNKNOWN": gpu_apis.UNKNOWN_KIND,
    }
    assert c_values(tmp_path, ['"gpu_api.h"'], list(pairs)) == list(pairs.values())
    assert len(gpu_api.STAT_NAMES) == gpu_api.GPU_STAT__COUNT
