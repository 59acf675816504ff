"""SASS and line info of a cubin from nvdisasm (host/sass.py), on the recorded cubin of
tests/fixtures/cubin/pcs_kernels.cu (nvcc -cubin -lineinfo -arch=sm_90)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from deepctx.host import sass

CUBIN = Path(__file__).resolve().parents[1] / "fixtures" / "cubin" / "pcs_kernels.sm_90.cubin"
needs_nvdisasm = pytest.mark.skipif(sass.find_nvdisasm() is None,
                                    reason="nvdisasm not found (pip install nvidia-cuda-nvdisasm)")


@needs_nvdisasm
def test_instructions_and_lines_of_the_recorded_cubin() -> None:
    d = sass.disassemble(CUBIN.read_bytes())
    assert set(d.functions) == {"saxpy", "strided_copy"}
    saxpy = d.functions["saxpy"]
    assert [i.offset for i in saxpy] == list(range(0, 0x200, 0x10))  # 16-byte instructions from 0
    load, fma = d.at("saxpy", 0xD0), d.at("saxpy", 0x100)
    assert load is not None and fma is not None
    assert (load.text, load.line) == ("LDG.E R2, desc[UR4][R2.64]", 12)
    assert (fma.text, fma.line) == ("FFMA R7, R2, UR6, R7", 12)
    assert load.file is not None and os.path.basename(load.file) == "pcs_kernels.cu"
    assert d.at("saxpy", 0x70) == sass.Instruction(0x70, "@P0 EXIT", load.file, 11)  # the predicate stays
    strided = d.at("strided_copy", 0x230)
    assert strided is not None and (strided.text, strided.line) == ("LDG.E R3, desc[UR4][R2.64]", 6)
    assert d.at("strided_copy", 0x1000) is None


def test_parse_keeps_the_innermost_location_of_inlined_code() -> None:
    text = """//--------------------- .text._Z1kPf        --------------------------
	//## File "/src/k.cu", line 3
        /*0000*/                   LDC R1, c[0x0][0x28] ;
	//## File "/src/helper.cuh", line 9 inlined at "/src/k.cu", line 4
        /*0010*/                   FADD R2, R2, R3 ;
"""
    assert sass.parse(text) == {"_Z1kPf": [sass.Instruction(0, "LDC R1, c[0x0][0x28]", "/src/k.cu", 3),
                                           sass.Instruction(0x10, "FADD R2, R2, R3", "/src/helper.cuh", 9)]}


def test_without_nvdisasm_it_says_where_it_looked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sass, "nvdisasm_candidates", lambda: ["/nonexistent/nvdisasm"])
    with pytest.raises(FileNotFoundError, match="nvdisasm not found .*/nonexistent/nvdisasm"):
        sass.disassemble(CUBIN.read_bytes())
