"""Reading USDT probes from .note.stapsdt: argument forms, sites, semaphores as file offsets (no root)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from deepctx.probes import usdt
from deepctx.probes.usdt import ARG_CONST, ARG_MEM, ARG_REG, REGISTERS, UsdtArg, UsdtError, parse_arg

SOURCE = r"""
#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>
__extension__ unsigned short demo_hit_semaphore __attribute__((unused, section(".probes")));
__extension__ unsigned short demo_other_semaphore __attribute__((unused, section(".probes")));
struct big { long a, b; };
__attribute__((noinline)) void hit(int x, long y, struct big *p) {
    if (demo_hit_semaphore)
        STAP_PROBE3(demo, hit, x, y, p->b);
}
__attribute__((noinline)) void other(void) {
    if (demo_other_semaphore)
        STAP_PROBE(demo, other);
}
"""


@pytest.mark.parametrize("text, want", [
    ("8@%rdi", UsdtArg(ARG_REG, 8, False, reg=REGISTERS["di"])),
    ("-4@%esi", UsdtArg(ARG_REG, 4, True, reg=REGISTERS["si"])),
    ("4@%r14d", UsdtArg(ARG_REG, 4, False, reg=REGISTERS["r14"])),
    ("1@%al", UsdtArg(ARG_REG, 1, False, reg=REGISTERS["ax"])),
    ("8@8(%r12)", UsdtArg(ARG_MEM, 8, False, reg=REGISTERS["r12"], offset=8)),
    ("-8@-24(%rbp)", UsdtArg(ARG_MEM, 8, True, reg=REGISTERS["bp"], offset=-24)),
    ("4@(%rax)", UsdtArg(ARG_MEM, 4, False, reg=REGISTERS["ax"])),
    ("-4@$-5", UsdtArg(ARG_CONST, 4, True, value=-5)),
    ("8@$0x10", UsdtArg(ARG_CONST, 8, False, value=16)),
])
def test_argument_forms(text: str, want: UsdtArg) -> None:
    assert parse_arg(text) == want


@pytest.mark.parametrize("text", ["8@sym(%rip)", "3@%rdi", "8@%xmm0", "nonsense"])
def test_arguments_it_cannot_decode_are_refused(text: str) -> None:
    with pytest.raises(UsdtError):
        parse_arg(text)


def test_probes_sites_and_semaphores(tmp_path: Path) -> None:
    src = tmp_path / "demo.c"
    src.write_text(SOURCE)
    lib = tmp_path / "libdemo.so"
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    probes = {p.name: p for p in usdt.read_probes(str(lib), "demo")}
    assert set(probes) == {"hit", "other"}
    assert len(probes["hit"].args) == 3 and probes["other"].args == ()
    assert [a.size for a in probes["hit"].args] == [4, 8, 8]
    with open(lib, "rb") as f:
        elf = ELFFile(f)
        symtab = elf.get_section_by_name(".symtab")
        segs = [(s["p_offset"], s["p_vaddr"], s["p_filesz"]) for s in elf.iter_segments() if s["p_type"] == "PT_LOAD"]
        for name in ("hit", "other"):
            sem = symtab.get_symbol_by_name(f"demo_{name}_semaphore")[0]["st_value"]
            assert probes[name].semaphore == sem
            off = next(sem - va + o for o, va, size in segs if va <= sem < va + size)
            assert probes[name].semaphore_offset == off
            fn = symtab.get_symbol_by_name(name)[0]
            assert fn["st_value"] <= probes[name].pc < fn["st_value"] + fn["st_size"]  # the site is in its function
    assert usdt.read_probes(str(lib), "elsewhere") == []


def test_the_agents_probes(built: tuple[Path, Path]) -> None:
    agent, _ = built
    names = sorted({p.name for p in usdt.read_probes(str(agent), "deepctx")})
    assert names == ["api_exit", "batch", "correlation", "flush_request", "flushed", "graph_node", "pcs", "sampling", "status",
                     "stop_request"]
    assert all(p.semaphore_offset for p in usdt.read_probes(str(agent), "deepctx"))



NOP5 = bytes.fromhex("0f1f440000")


def producers(lib: Path) -> list[str]:
    """The compiler command line of each compilation unit (DW_AT_producer, the agents are built with -g)."""
    with open(lib, "rb") as f:
        dwarf = ELFFile(f).get_dwarf_info()
        return [cu.get_top_DIE().attributes["DW_AT_producer"].value.decode() for cu in dwarf.iter_CUs()]


@pytest.mark.parametrize("which", ["built", "built_rocprof"])
def test_the_agents_probe_sites_are_nop5_built_without_a_red_zone(request: pytest.FixtureRequest, which: str) -> None:
    """A kernel that optimizes uprobes on 5-byte nops (6.17+) enters its trampoline with a CALL, which writes
    the 8 bytes below the stack pointer: each site must be a nop5 and no agent code may keep data there."""
    agent = request.getfixturevalue(which)[0]
    data = agent.read_bytes()
    sites = usdt.read_probes(str(agent), "deepctx")
    assert len(sites) >= 7
    assert [data[p.pc_offset:p.pc_offset + 5] for p in sites] == [NOP5] * len(sites)
    units = producers(agent)
    # the CUPTI agent: deepctx_cupti.c, pc_sampling.c, cubin_scan.c, agent_common.c; the ROCm agent: its own and
    # the common one
    assert len(units) == {"built": 4, "built_rocprof": 2}[which] and all(" -mno-red-zone" in u for u in units), units
