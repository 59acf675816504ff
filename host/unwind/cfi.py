"""Records of .eh_frame and .debug_frame: CIEs and FDEs, with their pointer encodings.

Facts (DWARF 5 section 6.4, LSB "Exception Frames"): a record is a length (0xffffffff: a 64-bit length
follows) and an id. In .eh_frame an id of 0 marks a CIE and any other id is the distance back to the
FDE's CIE; in .debug_frame CIEs have id 0xffffffff (or all ones in 64-bit DWARF) and FDEs hold the CIE's
section offset. FDE addresses in .eh_frame use the CIE's 'R' encoding (usually pc-relative sdata4);
.debug_frame uses plain target addresses.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple

# DW_EH_PE_* pointer encodings: low nibble = format, high nibble = how the value is applied.
PE_ABSPTR = 0x00
PE_OMIT = 0xFF
_PE_PCREL_SDATA4 = 0x1B  # what GCC and LLVM emit on x86-64 and arm64
_PE_PCREL = 0x10
_PE_INDIRECT = 0x80
_FORMATS = {
    0x02: ("<H", 2),
    0x03: ("<I", 4),
    0x04: ("<Q", 8),
    0x0A: ("<h", 2),
    0x0B: ("<i", 4),
    0x0C: ("<q", 8),
}


class CfiError(ValueError):
    """Malformed or unsupported CFI."""


def read_uleb(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7


def read_sleb(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            if b & 0x40:
                result -= 1 << shift
            return result, pos


def read_encoded(data: bytes, pos: int, enc: int, field_addr: int, ptr_size: int = 8) -> tuple[int, int]:
    """A DW_EH_PE-encoded pointer at pos; field_addr is the runtime address of data[pos] (for pcrel)."""
    fmt = enc & 0x0F
    if fmt == PE_ABSPTR:
        if pos + ptr_size > len(data):
            raise CfiError("pointer runs past the section")
        value = int.from_bytes(data[pos : pos + ptr_size], "little")
        end = pos + ptr_size
    elif fmt == 0x01:
        value, end = read_uleb(data, pos)
    elif fmt == 0x09:
        value, end = read_sleb(data, pos)
    elif fmt in _FORMATS:
        code, size = _FORMATS[fmt]
        value = struct.unpack_from(code, data, pos)[0]
        end = pos + size
    else:
        raise CfiError(f"pointer format {enc:#x}")
    app = enc & 0x70
    if app == _PE_PCREL:
        value += field_addr
    elif app != 0:
        raise CfiError(f"pointer application {enc:#x}")  # textrel/datarel/funcrel: unused on x86-64/arm64
    if enc & _PE_INDIRECT:
        raise CfiError("indirect FDE pointer")
    return value & 0xFFFFFFFFFFFFFFFF, end


@dataclass(frozen=True)
class Cie:
    offset: int
    code_align: int
    data_align: int
    ra_reg: int
    fde_enc: int  # encoding of the FDE's pc_begin / pc_range
    has_aug_data: bool  # 'z': FDEs carry an augmentation data block (LSDA pointer) to skip
    signal_frame: bool  # 'S': frames of this CIE are signal trampolines
    initial: bytes  # initial instructions


class Fde(NamedTuple):  # a tuple: hundreds of thousands are made per large library
    pc_begin: int
    pc_end: int
    cie: Cie
    instructions: bytes


def _parse_cie(data: bytes, offset: int, pos: int, end: int, is_eh: bool) -> Cie:
    version = data[pos]
    pos += 1
    nul = data.index(b"\0", pos)
    aug = data[pos:nul].decode(errors="replace")
    pos = nul + 1
    if not is_eh and version >= 4:
        pos += 2  # address_size, segment_selector_size
    if aug.startswith("eh"):
        raise CfiError("'eh' augmentation (pre-GCC 3)")
    code_align, pos = read_uleb(data, pos)
    data_align, pos = read_sleb(data, pos)
    if version == 1:
        ra_reg = data[pos]
        pos += 1
    else:
        ra_reg, pos = read_uleb(data, pos)
    fde_enc = PE_ABSPTR
    signal = False
    has_z = aug.startswith("z")
    if has_z:
        aug_len, pos = read_uleb(data, pos)
        aug_end = pos + aug_len
        for ch in aug[1:]:
            if ch == "R":
                fde_enc = data[pos]
                pos += 1
            elif ch == "L":
                pos += 1
            elif ch == "P":
                penc = data[pos]
                _, pos = read_encoded(data, pos + 1, penc & 0x7F, 0)  # personality: value unused
            elif ch == "S":
                signal = True
            elif ch in "BG":  # arm64 BTI / MTE tagged frames: no data
                pass
            else:
                break  # unknown letter: the length lets us skip the rest
        pos = aug_end
    elif aug:
        raise CfiError(f"augmentation {aug!r} without 'z'")
    return Cie(offset, code_align, data_align, ra_reg, fde_enc, has_z, signal, bytes(data[pos:end]))


def iter_fdes(data: bytes, section_addr: int, is_eh: bool, errors: list[str] | None = None) -> Iterator[Fde]:
    """FDEs of an .eh_frame (is_eh) or .debug_frame section whose contents are data, loaded at
    section_addr. Malformed records are skipped and described in errors."""
    cies: dict[int, Cie | None] = {}
    pos, size = 0, len(data)
    unpack_u32 = struct.Struct("<I").unpack_from
    unpack_pc = struct.Struct("<iI").unpack_from
    while pos + 4 <= size:
        start = pos
        length = unpack_u32(data, pos)[0]
        pos += 4
        if length == 0:
            if is_eh:
                break  # terminator
            continue
        wide = length == 0xFFFFFFFF
        if wide:
            if pos + 8 > size:
                if errors is not None:
                    errors.append(f"record at {start:#x} runs past the section")
                break
            length = struct.unpack_from("<Q", data, pos)[0]
            pos += 8
        end = pos + length
        if end > size:
            if errors is not None:
                errors.append(f"record at {start:#x} runs past the section")
            break
        id_pos = pos
        if wide:
            cie_id = struct.unpack_from("<Q", data, pos)[0]
            pos += 8
            is_cie = cie_id == 0 if is_eh else cie_id == 0xFFFFFFFFFFFFFFFF
        else:
            cie_id = unpack_u32(data, pos)[0]
            pos += 4
            is_cie = cie_id == 0 if is_eh else cie_id == 0xFFFFFFFF
        try:
            if is_cie:
                if start not in cies:
                    cies[start] = _parse_cie(data, start, pos, end, is_eh)
            else:
                cie_off = id_pos - cie_id if is_eh else cie_id
                cie = cies.get(cie_off)
                if cie is None and cie_off not in cies:
                    cie = _cie_at(data, cie_off, is_eh)
                    cies[cie_off] = cie
                if cie is None:
                    raise CfiError(f"no CIE at {cie_off:#x}")
                enc = cie.fde_enc
                if enc == _PE_PCREL_SDATA4:
                    rel, pc_range = unpack_pc(data, pos)
                    pc_begin = (section_addr + pos + rel) & 0xFFFFFFFFFFFFFFFF
                    pos += 8
                else:
                    pc_begin, pos = read_encoded(data, pos, enc, section_addr + pos)
                    pc_range, pos = read_encoded(data, pos, enc & 0x0F, 0)
                if cie.has_aug_data:
                    aug_len = data[pos]
                    pos += 1
                    if aug_len & 0x80:
                        aug_len, pos = read_uleb(data, pos - 1)
                    pos += aug_len
                if pc_begin + pc_range > 0xFFFFFFFFFFFFFFFF:
                    raise CfiError("address range past 2**64")
                if pc_range:
                    yield Fde(pc_begin, pc_begin + pc_range, cie, data[pos:end])
        except (CfiError, IndexError, struct.error, ValueError) as e:
            if errors is not None:
                errors.append(f"record at {start:#x}: {e}")
        pos = end


def _cie_at(data: bytes, offset: int, is_eh: bool) -> Cie | None:
    """Parses the CIE at offset (FDEs may point forward, or into a region not yet walked)."""
    if offset < 0:  # an .eh_frame FDE's id larger than its own offset: struct would read from the end
        return None
    try:
        length = struct.unpack_from("<I", data, offset)[0]
        pos = offset + 4
        id_size = 4
        if length == 0xFFFFFFFF:
            length = struct.unpack_from("<Q", data, pos)[0]
            pos += 8
            id_size = 8
        end = pos + length
        return _parse_cie(data, offset, pos + id_size, end, is_eh)
    except (CfiError, IndexError, struct.error, ValueError):
        return None
