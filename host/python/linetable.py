"""Instruction offset -> line number, from a code object's line table.

3.10 (PEP 626, Objects/lnotab_notes.txt): byte pairs (address delta, signed line delta), -128 = no
line. 3.11+ (Objects/locations.md): entries of 1-8 code units, a first byte 1cccclll (code,
length - 1) then a code-dependent payload of varints or bytes. Both start at co_firstlineno, and
an offset before the first instruction maps to co_firstlineno, as PyCode_Addr2Line does."""

from __future__ import annotations

from collections.abc import Iterator

Range = tuple[int, int, int | None]
MAX_LINE = 1 << 31  # [start, end) in bytes of bytecode, line or None


def pep626_ranges(table: bytes, firstlineno: int) -> Iterator[Range]:
    line, addr = firstlineno, 0
    for i in range(0, len(table) - 1, 2):
        end = addr + table[i]
        ldelta = table[i + 1] - 256 if table[i + 1] >= 128 else table[i + 1]
        if ldelta == -128:
            yield addr, end, None
        else:
            line += ldelta
            if not 0 <= line < MAX_LINE:
                return
            yield addr, end, line
        addr = end


def _varint(table: bytes, i: int) -> tuple[int, int]:
    b = table[i]
    val, shift = b & 63, 0
    while b & 64:
        i += 1
        b = table[i]
        shift += 6
        if shift > 30:  # CPython writes no varint past 32 bits: this is not a line table (below)
            raise IndexError("varint too long")
        val |= (b & 63) << shift
    return val, i + 1


def _svarint(table: bytes, i: int) -> tuple[int, int]:
    u, i = _varint(table, i)
    return (-(u >> 1) if u & 1 else u >> 1), i


def location_ranges(table: bytes, firstlineno: int) -> Iterator[Range]:
    """A table that ends inside an entry ends there, and so does one that stops making sense (a varint past 32
    bits, a line outside 0..2^31): the entries before hold. Both were met in captures of programs under
    torch.compile (H100, 2026-12-05: an IndexError, then a line of -4.5e26 that the profile's int32 refused),
    whose code objects come and go by the thousand: a table read as its code object is freed and its memory
    reused is garbage from some point on."""
    try:
        yield from _location_entries(table, firstlineno)
    except IndexError:
        return


def _location_entries(table: bytes, firstlineno: int) -> Iterator[Range]:
    line, addr, i = firstlineno, 0, 0
    n = len(table)
    while i < n:
        first = table[i]
        i += 1
        code, end = (first >> 3) & 15, addr + ((first & 7) + 1) * 2
        ln: int | None
        if code == 15:  # no location
            ln = None
        elif code == 14:  # long form: line delta, end line delta, column, end column
            delta, i = _svarint(table, i)
            for _ in range(3):
                _, i = _varint(table, i)
            line += delta
            ln = line
        elif code == 13:  # no columns: line delta
            delta, i = _svarint(table, i)
            line += delta
            ln = line
        elif code >= 10:  # one-line forms: line delta code - 10, column, end column
            line += code - 10
            ln = line
            i += 2
        else:  # short form: same line, one byte of columns
            ln = line
            i += 1
        if i > n or not 0 <= line < MAX_LINE:
            return  # its payload runs past the table's end, or the line is none a source file has
        yield addr, end, ln
        addr = end


def line_ranges(fmt: str, table: bytes, firstlineno: int) -> list[Range]:
    gen = pep626_ranges if fmt == "pep626" else location_ranges
    return [r for r in gen(table, firstlineno) if r[0] < r[1]]


def addr_to_line(ranges: list[Range], firstlineno: int, addr: int) -> int | None:
    """The line of the instruction at byte offset `addr`, None when it has none."""
    if addr < 0:
        return firstlineno
    lo, hi = 0, len(ranges)
    while lo < hi:  # ranges are sorted and contiguous
        mid = (lo + hi) // 2
        if ranges[mid][1] <= addr:
            lo = mid + 1
        else:
            hi = mid
    if lo < len(ranges) and ranges[lo][0] <= addr:
        return ranges[lo][2]
    return None
