"""Reads `readelf --debug-dump=frames-interp` (and `=frames` for expressions): the reference the
table builder is checked against."""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field

_HEADER = re.compile(
    r"^([0-9a-f]{8,16}) [0-9a-f]+ ([0-9a-f]+) (CIE|FDE)(?: cie=([0-9a-f]+) pc=([0-9a-f]+)\.\.([0-9a-f]+))?"
)
_SECTION = re.compile(r"^Contents of the (\.\S+) section")


@dataclass
class Fde:
    section: str
    begin: int
    end: int
    cie: int
    # (loc, {column: value}) as readelf prints them; columns absent from the dict have no rule
    rows: list[tuple[int, dict[str, str]]] = field(default_factory=list)
    cfa_exprs: set[str] = field(default_factory=set)  # texts of DW_CFA_def_cfa_expression in this FDE
    rbp_exprs: set[str] = field(default_factory=set)  # texts of DW_CFA_expression: r6 (rbp)
    rbp_undefined: bool = False  # DW_CFA_undefined: r6 (readelf prints "u" for it and for "no rule")


def _blocks(text: str) -> list[tuple[str, str, list[str]]]:
    """(section, header line, body lines) per CIE/FDE."""
    out: list[tuple[str, str, list[str]]] = []
    section = ""
    for line in text.splitlines():
        s = _SECTION.match(line)
        if s:
            section = s.group(1)
            continue
        if _HEADER.match(line):
            out.append((section, line, []))
        elif out and line.strip():
            out[-1][2].append(line)
    return out


def read_frames(path: str) -> list[Fde]:
    # no-follow-links: with debug packages installed readelf would also dump the separate debug file
    interp = subprocess.run(
        ["readelf", "--debug-dump=frames-interp,no-follow-links", path],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    raw = subprocess.run(
        ["readelf", "--debug-dump=frames,no-follow-links", path], capture_output=True, text=True, check=True
    ).stdout
    cie_rows: dict[tuple[str, int], list[tuple[int, dict[str, str]]]] = {}
    fdes: dict[tuple[str, int], Fde] = {}
    for section, header, body in _blocks(interp):
        m = _HEADER.match(header)
        assert m
        offset = int(m.group(1), 16)
        rows: list[tuple[int, dict[str, str]]] = []
        columns: list[str] = []
        for line in body:
            parts: list[str] = []
            for tok in line.split():  # a register rule prints as "r10 (r10)": one value, two tokens
                if tok.startswith("(") and parts:
                    parts[-1] += " " + tok
                else:
                    parts.append(tok)
            if parts[0] == "LOC":
                columns = parts[1:]
            elif columns and re.fullmatch(r"[0-9a-f]+", parts[0]):
                rows.append((int(parts[0], 16), dict(zip(columns, parts[1:], strict=False))))
        if m.group(3) == "CIE":
            cie_rows[(section, offset)] = rows
        else:
            begin, end = int(m.group(5), 16), int(m.group(6), 16)
            cie = int(m.group(4), 16)
            if not rows:  # readelf prints no table for an FDE without instructions: the CIE's rules hold
                rows = [(begin, dict(cie_rows[(section, cie)][-1][1]))] if (section, cie) in cie_rows else []
            fdes[(section, offset)] = Fde(section, begin, end, cie, rows)
    for section, header, body in _blocks(raw):
        m = _HEADER.match(header)
        assert m
        fde = fdes.get((section, int(m.group(1), 16)))
        if fde is None:
            continue
        for line in body:
            line = line.strip()
            if line.startswith("DW_CFA_def_cfa_expression"):
                fde.cfa_exprs.add(line[line.index("(") + 1 : line.rindex(")")])
            elif line.startswith("DW_CFA_expression: r6 (rbp)"):
                fde.rbp_exprs.add(line[len("DW_CFA_expression: r6 (rbp) (") : -1])
            elif line.startswith("DW_CFA_undefined: r6 (rbp)"):
                fde.rbp_undefined = True
    return [f for f in fdes.values() if f.end > f.begin]
