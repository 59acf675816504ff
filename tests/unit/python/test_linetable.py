"""Line-table decoders against CPython's own line numbers (co_positions on 3.11+, co_lines on 3.10)
for every code object of a few stdlib modules, on each installed interpreter: the raw tables are
extracted by that interpreter in a subprocess and decoded here."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from targets.python.pythons import INTERPRETERS, Interpreter

from deepctx.host.python.linetable import addr_to_line, line_ranges, location_ranges, pep626_ranges

DUMP = Path(__file__).with_name("linetable_dump.py")
MODULES = ["json.decoder", "asyncio.base_events", "dataclasses", "argparse", "typing"]


def dump(interp: Interpreter) -> list[dict]:
    if interp.path is None:
        pytest.skip(f"{interp.id} is not installed")
    out = subprocess.run([str(interp.path), str(DUMP), *MODULES], capture_output=True, text=True, check=True)
    return [json.loads(line) for line in out.stdout.splitlines()]


@pytest.mark.parametrize("interp", INTERPRETERS, ids=lambda i: i.id)
def test_every_instruction_gets_cpythons_line(interp: Interpreter) -> None:
    codes = dump(interp)
    assert len(codes) > 500
    fmt = "pep626" if interp.version < (3, 11) else "locations"
    checked = 0
    for c in codes:
        ranges = line_ranges(fmt, bytes.fromhex(c["table"]), c["firstlineno"])
        got = [addr_to_line(ranges, c["firstlineno"], 2 * i) for i in range(len(c["lines"]))]
        assert got == c["lines"], (c["module"], c["qualname"])
        checked += len(got)
    assert checked > 20_000


def test_before_first_instruction_is_first_line() -> None:
    ranges = line_ranges("locations", bytes([0x80 | (13 << 3), 0x02]), 40)  # one unit, line +1
    assert addr_to_line(ranges, 40, -2) == 40
    assert addr_to_line(ranges, 40, 0) == 41
    assert addr_to_line(ranges, 40, 2) is None  # past the table


def test_location_forms() -> None:
    table = bytes([
        0x80 | (0 << 3) | 1, 0x05,  # short form, 2 units, same line
        0x80 | (11 << 3), 3, 9,  # one-line form, +1, columns
        0x80 | (14 << 3) | 2, 0x05, 0x00, 0x01, 0x02,  # long form: line -2 (svarint 5), 3 units
        0x80 | (15 << 3),  # no location, 1 unit
        0x80 | (13 << 3), 0x40 | 0x08, 0x01,  # no columns: svarint 8 + (1 << 6) = 72 -> +36
    ])
    assert list(location_ranges(table, 100)) == [
        (0, 4, 100), (4, 6, 101), (6, 12, 99), (12, 14, None), (14, 16, 135),
    ]


def test_pep626_no_line_marker() -> None:
    table = bytes([6, 1, 4, 0x80, 2, 0xFE])  # +1 for 6 bytes, no line for 4, -2 for 2
    assert list(pep626_ranges(table, 10)) == [(0, 6, 11), (6, 10, None), (10, 12, 9)]

def test_a_table_cut_inside_its_last_entry_keeps_the_entries_before_it() -> None:
    """A capture of a torch.compile'd program died on such a table (IndexError, H100, 2026-12-05)."""
    whole = bytes([
        0x80 | (13 << 3), 0x02,  # no columns: +1, one unit
        0x80 | (14 << 3) | 1, 0x04, 0x00, 0x41, 0x03, 0x05,  # long form: +2, two units, a two-byte column
    ])
    assert list(location_ranges(whole, 10)) == [(0, 2, 11), (2, 6, 13)]
    for cut in range(3, len(whole)):  # every cut inside the long form's payload
        assert list(location_ranges(whole[:cut], 10)) == [(0, 2, 11)], cut
    assert list(location_ranges(bytes([0x80 | (11 << 3), 3]), 10)) == []  # one-line form missing a column


def test_a_table_that_stops_making_sense_ends_there() -> None:
    """A line of -4.5e26 reached the profile's int32 from such a table (torch.compile, H100, 2026-12-05)."""
    good = bytes([0x80 | (13 << 3), 0x02])  # +1
    long_varint = bytes([0x80 | (13 << 3), 0x41, 0x41, 0x41, 0x41, 0x41, 0x41, 0x01])  # 7 varint bytes: 42 bits
    assert list(location_ranges(good + long_varint + good, 10)) == [(0, 2, 11)]
    far = bytes([0x80 | (13 << 3), 0x7F, 0x7F, 0x7F, 0x7F, 0x07])  # svarint of a delta near -2^30 ...
    assert list(location_ranges(good + far + far + far, 10)) == [(0, 2, 11)]  # ... a line below 0 ends it
    assert list(pep626_ranges(bytes([2, 1, 2, 0x80 + 1, 2, 1]), 0)) == [(0, 2, 1)]  # 1 - 127 < 0
