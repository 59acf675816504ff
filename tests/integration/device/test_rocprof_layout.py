"""native/rocprofiler_abi.h (the agent's own declarations of rocprofiler-sdk's C ABI) against the SDK's real
headers: one C file per header group, holding both, with _Static_assert on every size, offset and value the
agent and the mocks rely on. Runs when DEEPCTX_ROCPROFILER_INCLUDE names the directories (os.pathsep
separated) that hold the SDK's headers and what they include; DEEPCTX_ROCPROFILER_CFLAGS adds flags (for
example -D__HIP_PLATFORM_AMD__). A group whose SDK header does not compile there (HIP or HSA headers too old)
is skipped with the compiler's reason; one that compiles must match. No root needed."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest

from deepctx.probes.family import PROBES_DIR

NATIVE = PROBES_DIR.parent / "native"
MOCKS = PROBES_DIR.parent / "tests" / "mocks"
INCLUDE = os.environ.get("DEEPCTX_ROCPROFILER_INCLUDE", "")


def same_size(ours: str, theirs: str) -> str:
    return f'_Static_assert(sizeof({ours}) == sizeof({theirs}), "sizeof {ours}");'


def same_offsets(ours: str, theirs: str, fields: str) -> list[str]:
    out = [same_size(ours, theirs)]
    for f in fields.split():
        ours_f, _, theirs_f = f.partition("=")
        out.append(f'_Static_assert(offsetof({ours}, {ours_f}) == offsetof({theirs}, {theirs_f or ours_f}), '
                   f'"offsetof {ours}.{ours_f}");')
    return out


def same_values(pairs: dict[str, str]) -> list[str]:
    return [f'_Static_assert((long long)({a}) == (long long)({b}), "{a}");' for a, b in pairs.items()]


def handle(ours: str, theirs: str) -> list[str]:
    return same_offsets(ours, theirs, "handle")


GROUPS: dict[str, tuple[str, list[str]]] = {
    "fwd": ("fwd.h", [
        *same_values({
            "RP_STATUS_SUCCESS": "ROCPROFILER_STATUS_SUCCESS", "RP_STATUS_ERROR": "ROCPROFILER_STATUS_ERROR",
            "RP_STATUS_ERROR_CONTEXT_NOT_FOUND": "ROCPROFILER_STATUS_ERROR_CONTEXT_NOT_FOUND",
            "RP_STATUS_ERROR_BUFFER_NOT_FOUND": "ROCPROFILER_STATUS_ERROR_BUFFER_NOT_FOUND",
            "RP_STATUS_ERROR_KIND_NOT_FOUND": "ROCPROFILER_STATUS_ERROR_KIND_NOT_FOUND",
            "RP_STATUS_ERROR_OPERATION_NOT_FOUND": "ROCPROFILER_STATUS_ERROR_OPERATION_NOT_FOUND",
            "RP_STATUS_ERROR_BUFFER_BUSY": "ROCPROFILER_STATUS_ERROR_BUFFER_BUSY",
            "RP_STATUS_ERROR_CONFIGURATION_LOCKED": "ROCPROFILER_STATUS_ERROR_CONFIGURATION_LOCKED",
            "RP_STATUS_ERROR_NOT_IMPLEMENTED": "ROCPROFILER_STATUS_ERROR_NOT_IMPLEMENTED",
            "RP_STATUS_ERROR_INCOMPATIBLE_ABI": "ROCPROFILER_STATUS_ERROR_INCOMPATIBLE_ABI",
            "RP_STATUS_ERROR_INVALID_ARGUMENT": "ROCPROFILER_STATUS_ERROR_INVALID_ARGUMENT",
            "RP_BUFFER_CATEGORY_TRACING": "ROCPROFILER_BUFFER_CATEGORY_TRACING",
            "RP_AGENT_TYPE_CPU": "ROCPROFILER_AGENT_TYPE_CPU", "RP_AGENT_TYPE_GPU": "ROCPROFILER_AGENT_TYPE_GPU",
            "RP_CALLBACK_PHASE_ENTER": "ROCPROFILER_CALLBACK_PHASE_ENTER",
            "RP_CALLBACK_PHASE_EXIT": "ROCPROFILER_CALLBACK_PHASE_EXIT",
            "RP_CALLBACK_TRACING_HIP_RUNTIME_API": "ROCPROFILER_CALLBACK_TRACING_HIP_RUNTIME_API",
            "RP_CALLBACK_TRACING_CODE_OBJECT": "ROCPROFILER_CALLBACK_TRACING_CODE_OBJECT",
            "RP_BUFFER_TRACING_MEMORY_COPY": "ROCPROFILER_BUFFER_TRACING_MEMORY_COPY",
            "RP_BUFFER_TRACING_KERNEL_DISPATCH": "ROCPROFILER_BUFFER_TRACING_KERNEL_DISPATCH",
            "RP_CODE_OBJECT_LOAD": "ROCPROFILER_CODE_OBJECT_LOAD",
            "RP_CODE_OBJECT_DEVICE_KERNEL_SYMBOL_REGISTER": "ROCPROFILER_CODE_OBJECT_DEVICE_KERNEL_SYMBOL_REGISTER",
            "RP_MEMORY_COPY_NONE": "ROCPROFILER_MEMORY_COPY_NONE",
            "RP_MEMORY_COPY_HOST_TO_HOST": "ROCPROFILER_MEMORY_COPY_HOST_TO_HOST",
            "RP_MEMORY_COPY_HOST_TO_DEVICE": "ROCPROFILER_MEMORY_COPY_HOST_TO_DEVICE",
            "RP_MEMORY_COPY_DEVICE_TO_HOST": "ROCPROFILER_MEMORY_COPY_DEVICE_TO_HOST",
            "RP_MEMORY_COPY_DEVICE_TO_DEVICE": "ROCPROFILER_MEMORY_COPY_DEVICE_TO_DEVICE",
            "RP_BUFFER_POLICY_DISCARD": "ROCPROFILER_BUFFER_POLICY_DISCARD",
            "RP_BUFFER_POLICY_LOSSLESS": "ROCPROFILER_BUFFER_POLICY_LOSSLESS",
            "sizeof(rp_status_t)": "sizeof(rocprofiler_status_t)",
            "sizeof(int32_t)": "sizeof(rocprofiler_callback_tracing_kind_t)",
        }),
        same_size("rp_timestamp_t", "rocprofiler_timestamp_t"),
        same_size("rp_thread_id_t", "rocprofiler_thread_id_t"),
        same_size("rp_tracing_operation_t", "rocprofiler_tracing_operation_t"),
        same_size("rp_kernel_id_t", "rocprofiler_kernel_id_t"),
        *same_offsets("rp_user_data_t", "rocprofiler_user_data_t", "value ptr"),
        *handle("rp_context_id_t", "rocprofiler_context_id_t"),
        *handle("rp_queue_id_t", "rocprofiler_queue_id_t"),
        *handle("rp_buffer_id_t", "rocprofiler_buffer_id_t"),
        *handle("rp_agent_id_t", "rocprofiler_agent_id_t"),
        *same_offsets("rp_correlation_id_t", "rocprofiler_correlation_id_t", "internal external"),
        *same_offsets("rp_dim3_t", "rocprofiler_dim3_t", "x y z"),
        *same_offsets("rp_callback_tracing_record_t", "rocprofiler_callback_tracing_record_t",
                      "context_id thread_id correlation_id kind operation phase payload"),
        *same_offsets("rp_record_header_t", "rocprofiler_record_header_t", "category kind hash payload"),
        *same_offsets("rp_kernel_dispatch_info_t", "rocprofiler_kernel_dispatch_info_t",
                      "size agent_id queue_id kernel_id dispatch_id private_segment_size group_segment_size "
                      "workgroup_size grid_size reserved_padding"),
    ]),
    "buffer_tracing": ("buffer_tracing.h", [
        *same_offsets("rp_kernel_dispatch_record_t", "rocprofiler_buffer_tracing_kernel_dispatch_record_t",
                      "size kind operation correlation_id thread_id start_timestamp end_timestamp dispatch_info"),
        *same_offsets("rp_memory_copy_record_t", "rocprofiler_buffer_tracing_memory_copy_record_t",
                      "size kind operation correlation_id thread_id start_timestamp end_timestamp dst_agent_id "
                      "src_agent_id bytes"),
        "static rocprofiler_status_t (*const configure_buffer_tracing)(rocprofiler_context_id_t, "
        "rocprofiler_buffer_tracing_kind_t, const rocprofiler_tracing_operation_t *, size_t, "
        "rocprofiler_buffer_id_t) __attribute__((unused)) = rocprofiler_configure_buffer_tracing_service;",
    ]),
    "buffer": ("buffer.h", [
        "static rocprofiler_status_t (*const create_buffer)(rocprofiler_context_id_t, size_t, size_t, "
        "rocprofiler_buffer_policy_t, rocprofiler_buffer_tracing_cb_t, void *, rocprofiler_buffer_id_t *) "
        "__attribute__((unused)) = rocprofiler_create_buffer;",
        "static rocprofiler_status_t (*const flush_buffer)(rocprofiler_buffer_id_t) __attribute__((unused)) = "
        "rocprofiler_flush_buffer;",
    ]),
    "context": ("context.h", [
        "static rocprofiler_status_t (*const create_context)(rocprofiler_context_id_t *) __attribute__((unused)) = "
        "rocprofiler_create_context;",
        "static rocprofiler_status_t (*const start_context)(rocprofiler_context_id_t) __attribute__((unused)) = "
        "rocprofiler_start_context;",
        "static rocprofiler_status_t (*const stop_context)(rocprofiler_context_id_t) __attribute__((unused)) = "
        "rocprofiler_stop_context;",
    ]),
    "agent": ("agent.h", [
        *same_values({"RP_AGENT_INFO_VERSION_0": "ROCPROFILER_AGENT_INFO_VERSION_0"}),
        *[f'_Static_assert(offsetof(rp_agent_head_t, {f}) == offsetof(rocprofiler_agent_v0_t, {f}), "{f}");'
          for f in ("size", "id", "type")],
        '_Static_assert(sizeof(rp_agent_head_t) <= sizeof(rocprofiler_agent_v0_t), "agent head");',
    ]),
    "registration": ("registration.h", [
        *same_offsets("rp_client_id_t", "rocprofiler_client_id_t", "name handle"),
        *same_offsets("rp_tool_configure_result_t", "rocprofiler_tool_configure_result_t",
                      "size initialize finalize tool_data"),
        "static rocprofiler_status_t (*const force_configure)(rocprofiler_configure_func_t) "
        "__attribute__((unused)) = rocprofiler_force_configure;",
    ]),
    "callback_tracing": ("callback_tracing.h", [
        *same_offsets("rp_kernel_symbol_data_t",
                      "rocprofiler_callback_tracing_code_object_kernel_symbol_register_data_t",
                      "size kernel_id code_object_id kernel_name kernel_object kernarg_segment_size "
                      "kernarg_segment_alignment group_segment_size private_segment_size sgpr_count "
                      "arch_vgpr_count accum_vgpr_count"),
        "static rocprofiler_status_t (*const configure_callback_tracing)(rocprofiler_context_id_t, "
        "rocprofiler_callback_tracing_kind_t, const rocprofiler_tracing_operation_t *, size_t, "
        "rocprofiler_callback_tracing_cb_t, void *) __attribute__((unused)) = "
        "rocprofiler_configure_callback_tracing_service;",
    ]),
    "hip_runtime_api_id": ("hip/runtime_api_id.h", same_values({
        f"MOCK_HIP_OP_{name}": f"ROCPROFILER_HIP_RUNTIME_API_ID_{name}"
        for name in ("hipDeviceSynchronize", "hipFree", "hipLaunchKernel", "hipMalloc", "hipMemcpy", "hipMemset",
                     "hipModuleLaunchKernel", "hipStreamSynchronize")})),
}


def compile_c(tmp: Path, source: str) -> subprocess.CompletedProcess:
    src = tmp / "check.c"
    src.write_text(source)
    flags = [f"-I{d}" for d in INCLUDE.split(os.pathsep) if d]
    flags += shlex.split(os.environ.get("DEEPCTX_ROCPROFILER_CFLAGS", ""))
    return subprocess.run(["gcc", "-fsyntax-only", "-std=gnu11", "-Wall", "-Werror", f"-I{NATIVE}", f"-I{MOCKS}",
                           *flags, str(src)], capture_output=True, text=True)


@pytest.mark.skipif(not INCLUDE, reason="DEEPCTX_ROCPROFILER_INCLUDE does not name rocprofiler-sdk's headers "
                                         "(rocprofiler-sdk is not installed here)")
@pytest.mark.parametrize("group", list(GROUPS))
def test_abi_matches_the_sdk(tmp_path: Path, group: str) -> None:
    header, checks = GROUPS[group]
    alone = compile_c(tmp_path, f"#include <rocprofiler-sdk/{header}>\n")
    if alone.returncode != 0:
        first = next((line for line in alone.stderr.splitlines() if "error" in line), alone.stderr.strip())
        pytest.skip(f"rocprofiler-sdk/{header} does not compile with these include directories: {first}")
    source = "\n".join(["#include <stddef.h>", f"#include <rocprofiler-sdk/{header}>", '#include "rocprofiler_abi.h"',
                        '#include "mock_rocp.h"', *checks, ""])
    r = compile_c(tmp_path, source)
    assert r.returncode == 0, r.stderr
