"""A cubin's SASS and line info, from the CUDA toolkit's nvdisasm: per function, each instruction's offset
(the PC offset CUPTI's PC samples carry), its text, and the source line its line info names (cubins built
with -lineinfo or -G; Triton and Inductor kernels carry their Python lines). Without nvdisasm nothing is
guessed: find_nvdisasm() says where it looked."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

NVDISASM_TIMEOUT_S = 60.0  # a large cubin (PyTorch's) takes seconds; a hung tool must not hold a build
_FUNCTION = re.compile(r"^//-+ \.text\.(\S+)\s+-+$")
_LINE = re.compile(r'^\s*//## File "([^"]*)", line (\d+)')
_INSTRUCTION = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;?\s*$")
_LABEL = re.compile(r"^\s*([.$][\w.$]*):\s*$")  # ".L_x_5:", "$__internal_0_$__cuda_sm20_sqrt_rn_f32_slowpath:"


@dataclass(frozen=True)
class Instruction:
    offset: int  # from the function's start
    text: str  # "LDG.E R2, desc[UR4][R2.64]", with its predicate ("@P0 EXIT")
    file: str | None  # the innermost source location (an inlined callee's, when inlined)
    line: int | None


@dataclass(frozen=True)
class Disassembly:
    functions: dict[str, list[Instruction]]  # by the function's symbol (mangled) name, in offset order
    tool: str
    labels: dict[str, dict[str, int]] = field(default_factory=dict)  # per function: branch label -> offset
    _by_offset: dict[str, dict[int, Instruction]] = field(default_factory=dict, compare=False, repr=False)

    def at(self, function: str, offset: int) -> Instruction | None:
        """The instruction at a PC offset of function (None: not in this cubin). Indexed per function at
        its first look-up: a large kernel has thousands of instructions, and as many sampled PCs."""
        index = self._by_offset.get(function)
        if index is None:
            index = self._by_offset[function] = {i.offset: i for i in self.functions.get(function, ())}
        return index.get(offset)


def nvdisasm_candidates() -> list[str]:
    """Where nvdisasm is looked for, in order: $DEEPCTX_NVDISASM, PATH, $CUDA_HOME/bin, /usr/local/cuda/bin,
    and the nvidia-cuda-nvdisasm wheel next to this Python."""
    out = [os.environ.get("DEEPCTX_NVDISASM", "")]
    out.append(shutil.which("nvdisasm") or "")
    if os.environ.get("CUDA_HOME"):
        out.append(os.path.join(os.environ["CUDA_HOME"], "bin", "nvdisasm"))
    out.append("/usr/local/cuda/bin/nvdisasm")
    for site in sys.path:
        if site.endswith("site-packages"):
            out += sorted(str(p) for p in Path(site).glob("nvidia/cu*/bin/nvdisasm"))
    return [p for p in out if p]


def find_nvdisasm() -> str | None:
    return next((p for p in nvdisasm_candidates() if os.path.isfile(p) and os.access(p, os.X_OK)), None)


def parse(text: str) -> dict[str, list[Instruction]]:
    """nvdisasm -g / -gi output -> instructions per function."""
    functions: dict[str, list[Instruction]] = {}
    current: list[Instruction] | None = None
    file: str | None = None
    line: int | None = None
    for raw in text.splitlines():
        m = _FUNCTION.match(raw)
        if m:
            current = functions.setdefault(m.group(1), [])
            file, line = None, None
            continue
        m = _LINE.match(raw)
        if m:
            file, line = m.group(1), int(m.group(2))
            continue
        if current is None:
            continue
        m = _INSTRUCTION.match(raw)
        if m:
            current.append(Instruction(int(m.group(1), 16), " ".join(m.group(2).split()), file, line))
    return functions


def parse_labels(text: str) -> dict[str, dict[str, int]]:
    """nvdisasm output -> per function, each label's offset (the instruction after it): what BRA `(.L_x_5)
    and BSSY B0, `(.L_x_4) point at (host/sass_uniformity.py)."""
    out: dict[str, dict[str, int]] = {}
    current: dict[str, int] | None = None
    pending: list[str] = []
    for raw in text.splitlines():
        m = _FUNCTION.match(raw)
        if m:
            current, pending = out.setdefault(m.group(1), {}), []
            continue
        if current is None:
            continue
        m = _LABEL.match(raw)
        if m:
            pending.append(m.group(1))
            continue
        m = _INSTRUCTION.match(raw)
        if m:
            for label in pending:
                current[label] = int(m.group(1), 16)
            pending = []
    return out


def disassemble(cubin: bytes, tool: str | None = None) -> Disassembly:
    """The cubin's functions (OSError when nvdisasm is missing or fails; its message says why)."""
    tool = tool or find_nvdisasm()
    if tool is None:
        raise FileNotFoundError("nvdisasm not found (looked in: " + ", ".join(nvdisasm_candidates()) + ")")
    with tempfile.NamedTemporaryFile(prefix="deepctx-", suffix=".cubin") as f:  # nvdisasm reads a file
        f.write(cubin)
        f.flush()
        try:
            r = subprocess.run([tool, "-gi", "-c", f.name], capture_output=True, text=True,
                               timeout=NVDISASM_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired as e:
            raise OSError(f"nvdisasm took more than {NVDISASM_TIMEOUT_S:g} s") from e
    if r.returncode != 0:
        raise OSError(f"nvdisasm failed: {r.stderr.strip()[:300]}")
    return Disassembly(parse(r.stdout), tool, parse_labels(r.stdout))
