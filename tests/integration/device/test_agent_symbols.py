"""Both agents look their SDK's functions up by name (agent_bind in native/agent_common.c): pointed at a
library that lacks them, attaching fails with DEV_AGENT_E_NO_CUPTI and names the first function missing,
and the process goes on."""

from __future__ import annotations

import ctypes.util
import subprocess
import sys
from pathlib import Path

import pytest

from deepctx.probes.device_activity import DEV_AGENT_E_NO_CUPTI

# Loads the agent into a fresh interpreter (after the driver argv[2], initialized, where given) and attaches
# as deepctxd would (without ptrace); prints "<rc>|<error>", then "alive" from the code after it.
ATTACH = """
import ctypes, sys
if len(sys.argv) > 2:
    ctypes.CDLL(sys.argv[2], mode=ctypes.RTLD_GLOBAL).cuInit(0)
agent = ctypes.CDLL(sys.argv[1])
rc = agent.deepctx_agent_attach()
error = ctypes.c_char.in_dll(agent, "deepctx_agent_error")
print(f"{rc}|{ctypes.string_at(ctypes.addressof(error)).decode()}")
print("alive")
"""


def attach_with(agent: Path, env_name: str, library: str, driver: Path | None = None) -> list[str]:
    argv = [sys.executable, "-c", ATTACH, str(agent)] + ([str(driver)] if driver else [])
    out = subprocess.run(argv, env={env_name: library},
                         capture_output=True, text=True, timeout=60, check=True)
    return out.stdout.splitlines()


@pytest.fixture(scope="module")
def libm() -> str:
    path = ctypes.util.find_library("m")
    assert path, "libm not found"
    return path


def test_cupti_agent_names_the_missing_function(built: tuple[Path, Path], libm: str) -> None:
    agent, mocks = built  # the mock driver, initialized: the process has a CUDA context
    assert attach_with(agent, "DEEPCTX_CUPTI_LIB", libm, mocks / "libcuda.so.1") == [
        f"{DEV_AGENT_E_NO_CUPTI}|libcupti lacks cuptiSubscribe", "alive"]


def test_rocprof_agent_names_the_missing_function(built_rocprof: tuple[Path, Path], libm: str) -> None:
    agent, _ = built_rocprof
    assert attach_with(agent, "DEEPCTX_ROCPROFILER_LIB", libm) == [
        f"{DEV_AGENT_E_NO_CUPTI}|rocprofiler-sdk lacks rocprofiler_start_context", "alive"]
