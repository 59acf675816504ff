"""Where deepctx's in-process agents are (the CUPTI agent, the rocprofiler-sdk agent), and the environment
that makes a command's GPU runtimes load them (`deepctx run`)."""

from __future__ import annotations

import os
from pathlib import Path

from deepctx.host.gpu_runtimes import CUDA_INJECTION_VAR, ROCM_INJECTION_VAR

AGENT_NAME = "libdeepctx_cupti.so"
ROCPROF_AGENT_NAME = "libdeepctx_rocprof.so"
_SOURCE_TREE = Path(__file__).resolve().parents[1]


def _find_built(name: str, env_var: str) -> tuple[str | None, Path]:
    """$env_var if it names a file, else native/build/<name> in the source tree; (path or None, last tried)."""
    env = os.environ.get(env_var)
    candidates = [Path(env)] if env else []
    candidates.append(_SOURCE_TREE / "native" / "build" / name)
    for c in candidates:
        if c.is_file():
            return str(c), c
    return None, candidates[-1]


def find_agent() -> str:
    """The CUPTI agent this daemon ships: $DEEPCTX_AGENT, else native/build in the source tree."""
    path, tried = _find_built(AGENT_NAME, "DEEPCTX_AGENT")
    if path is None:
        raise ValueError(f"the CUPTI agent is not built ({tried}): build native/ with CUPTI's headers "
                         f"(pip install nvidia-cuda-cupti), or set DEEPCTX_AGENT")
    return path


def find_rocprof_agent() -> str:
    """The rocprofiler-sdk agent (AMD; what ROCP_TOOL_LIBRARIES names under `deepctx run`):
    $DEEPCTX_ROCPROF_AGENT, else native/build in the source tree (built everywhere, no SDK needed)."""
    path, tried = _find_built(ROCPROF_AGENT_NAME, "DEEPCTX_ROCPROF_AGENT")
    if path is None:
        raise ValueError(f"the rocprofiler-sdk agent is not built ({tried}): run make in native/, or set "
                         f"DEEPCTX_ROCPROF_AGENT")
    return path


def injection_env(cupti_agent: str | None = None) -> dict[str, str]:
    """What `deepctx run` adds to the command's environment so each GPU runtime loads its agent: the CUDA
    driver reads CUDA_INJECTION64_PATH at cuInit, rocprofiler-sdk ROCP_TOOL_LIBRARIES at HIP's start.
    Every agent that is built is named (a process uses one runtime or the other, or both); none: ValueError."""
    env: dict[str, str] = {}
    errors = []
    for var, find in ((CUDA_INJECTION_VAR, find_agent), (ROCM_INJECTION_VAR, find_rocprof_agent)):
        if var == CUDA_INJECTION_VAR and cupti_agent:
            env[var] = cupti_agent
            continue
        try:
            env[var] = find()
        except ValueError as e:
            errors.append(str(e))
    if not env:
        raise ValueError("; ".join(errors))
    return env
