"""device_activity.h is the truth for the structs the agent, BPF and Python share: the ctypes mirrors
and constants must match what gcc makes of it (no root needed)."""

from __future__ import annotations

import ctypes as ct
import subprocess
from pathlib import Path

from deepctx.probes import device_activity as da
from deepctx.probes import usdt
from deepctx.probes.family import PROBES_DIR


def c_values(tmp: Path, exprs: list[str]) -> list[int]:
    prints = "\n".join(f'    printf("%lld\\n", (long long)({e}));' for e in exprs)
    src = tmp / "layout.c"
    src.write_text('#include <stdio.h>\n#include <stddef.h>\n#include "device_activity.h"\n'
                   f"int main(void) {{\n{prints}\n    return 0;\n}}\n")
    exe = tmp / "layout"
    subprocess.run(["gcc", f"-I{PROBES_DIR}", "-o", str(exe), str(src)], check=True)
    return [int(x) for x in subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split()]


def struct_exprs(c_name: str, mirror: type[ct.Structure]) -> tuple[list[str], list[int]]:
    exprs, want = [f"sizeof(struct {c_name})"], [ct.sizeof(mirror)]
    for field, *_ in mirror._fields_:
        exprs.append(f"offsetof(struct {c_name}, {field})")
        want.append(getattr(mirror, field).offset)
    return exprs, want


def test_structs_match_the_header(tmp_path: Path) -> None:
    exprs: list[str] = []
    want: list[int] = []
    for c_name, mirror in (("dev_record", da.DevRecord), ("dev_corr", da.DevCorr),
                           ("dev_key", da.DevKey), ("dev_val", da.DevVal), ("dev_name_key", da.DevNameKey),
                           ("dev_event", da.DevEvent), ("dev_flush", da.DevFlush), ("dev_config", da.DevConfig),
                           ("usdt_site", usdt.UsdtSite), ("usdt_site_key", usdt.UsdtSiteKey)):
        e, w = struct_exprs(c_name, mirror)
        exprs += e
        want += w
    assert c_values(tmp_path, exprs) == want


def test_constants_match_the_header(tmp_path: Path) -> None:
    pairs = {
        "DEV_KIND_KERNEL": da.DEV_KIND_KERNEL, "DEV_KIND_MEMCPY": da.DEV_KIND_MEMCPY,
        "DEV_KIND_MEMSET": da.DEV_KIND_MEMSET, "DEV_KIND_SYNC": da.DEV_KIND_SYNC, "DEV_BATCH": da.DEV_BATCH,
        "DEV_REC_F_GRAPH": da.DEV_REC_F_GRAPH, "DEV_API_DOMAIN_SHIFT": da.DEV_API_DOMAIN_SHIFT,
        "DEV_KEY_F_UNKNOWN": da.DEV_KEY_F_UNKNOWN, "DEV_KEY_F_UNPROBED": da.DEV_KEY_F_UNPROBED,
        "DEV_KEY_F_GRAPH": da.DEV_KEY_F_GRAPH, "DEV_NAME_LEN": da.DEV_NAME_LEN, "DEV_EV_API": da.DEV_EV_API,
        "DEV_EV_RECORD": da.DEV_EV_RECORD, "DEV_API_UNPROBED": da.DEV_API_UNPROBED,
        "DEV_AGENT_OK": da.DEV_AGENT_OK, "DEV_AGENT_ACTIVE": da.DEV_AGENT_ACTIVE, "DEV_AGENT_IDLE": da.DEV_AGENT_IDLE,
        "DEV_AGENT_E_NO_CUDA": da.DEV_AGENT_E_NO_CUDA, "DEV_AGENT_E_NO_CUPTI": da.DEV_AGENT_E_NO_CUPTI,
        "DEV_AGENT_E_BUSY": da.DEV_AGENT_E_BUSY, "DEV_AGENT_E_CUPTI": da.DEV_AGENT_E_CUPTI,
        "DEV_AGENT_E_PENDING": da.DEV_AGENT_E_PENDING, "DEV_STAT__COUNT": da.DEV_STAT__COUNT,
        "DEV_STAT_UNKNOWN": da.DEV_STAT_UNKNOWN, "DEV_STAT_TIME_NS": da.DEV_STAT_TIME_NS,
        "USDT_MAX_ARGS": usdt.USDT_MAX_ARGS, "USDT_ARG_NONE": usdt.ARG_NONE, "USDT_ARG_REG": usdt.ARG_REG,
        "USDT_ARG_MEM": usdt.ARG_MEM, "USDT_ARG_CONST": usdt.ARG_CONST,
    }
    assert c_values(tmp_path, list(pairs)) == list(pairs.values())
    assert set(da.STAT_NAMES) == set(range(da.DEV_STAT__COUNT))


def test_the_injector_knows_the_agents_codes() -> None:
    from deepctx.daemon.inject import agent

    assert agent.DEV_AGENT_E_PENDING == da.DEV_AGENT_E_PENDING
    assert set(agent._MESSAGES) == {da.DEV_AGENT_E_NO_CUDA, da.DEV_AGENT_E_NO_CUPTI, da.DEV_AGENT_E_BUSY,
                                    da.DEV_AGENT_E_CUPTI}
