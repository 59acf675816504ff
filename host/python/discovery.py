"""Finding the CPython interpreter in a process: the ELF file that defines `_PyRuntime` (libpython,
or a statically linked executable), its version, and the layout to read it with."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from deepctx.host.elf.image import ElfImage
from deepctx.host.procfs import AddressSpace, Mapping, ProcessMemory, open_mapped_file
from deepctx.host.python.debug_offsets import MAX_SIZE, parse_debug_offsets
from deepctx.host.python.layouts import PyLayout, layout_from_debug_offsets, supported_text, table_layout

_NAME = re.compile(r"^(?:lib)?python(\d+)\.(\d+)([a-z]*)(?:\.so.*)?$")


@dataclass
class Interpreter:
    pid: int
    path: str  # the mapped ELF file that defines _PyRuntime, as the target sees it
    version: tuple[int, int, int]
    layout: PyLayout
    runtime: int  # address of _PyRuntime in the target
    code_type: int  # address of PyCode_Type in the target
    modules: set[str] = field(default_factory=set)  # basenames of the interpreter's ELF files

    @property
    def version_text(self) -> str:
        return ".".join(str(v) for v in self.version)


def _basename(m: Mapping) -> str:
    return os.path.basename(m.path.removesuffix(" (deleted)"))


def _candidates(pid: int, space: AddressSpace) -> dict[str, list[Mapping]]:
    """Mapped files that may hold the interpreter: python-named ones and the executable."""
    try:
        exe = os.readlink(f"/proc/{pid}/exe").removesuffix(" (deleted)")
    except OSError:
        exe = ""
    files: dict[str, list[Mapping]] = {}
    for m in space.mappings:
        if m.file_backed and (_NAME.match(_basename(m)) or m.path.removesuffix(" (deleted)") == exe):
            files.setdefault(m.path, []).append(m)
    # libpython first: a python executable linked against it defines no _PyRuntime itself
    return dict(sorted(files.items(), key=lambda kv: not _basename(kv[1][0]).startswith("libpython")))


def _name_version(name: str) -> tuple[int, int, str] | None:
    m = _NAME.match(name)
    return (int(m.group(1)), int(m.group(2)), m.group(3)) if m else None


def check_build(name: str, free_threaded: bool, debug: bool) -> None:
    """Refuses builds whose object layouts differ from the default build's."""
    if free_threaded:
        raise ValueError(f"free-threaded CPython builds ({name}) are not supported")
    if debug:
        raise ValueError(f"debug builds of CPython ({name}, --with-pydebug) are not supported")


def _micro_version(elf: ElfImage, major: int, minor: int) -> int:
    """3.10 has no Py_Version: its PY_VERSION string ("3.10.13") sits in .rodata, possibly as the
    tail of a longer string that the linker merged it into."""
    data = elf.section_data(".rodata") or b""
    m = re.search(rb"(?<![\d.])%d\.%d\.(\d+)\x00" % (major, minor), data)
    return int(m.group(1)) if m else 0


def _unsupported(version: tuple[int, int]) -> ValueError:
    return ValueError(f"Python {version[0]}.{version[1]} is not supported (supported: {supported_text()})")


def find_interpreter(pid: int, space: AddressSpace, mem: ProcessMemory) -> Interpreter:
    """Raises ValueError with a user-facing reason when there is none we can read."""
    named: tuple[int, int, str] | None = None
    for path, maps in _candidates(pid, space).items():
        named = named or _name_version(_basename(maps[0]))
        try:
            elf = ElfImage(open_mapped_file(pid, maps[0]))
        except (OSError, ValueError):
            continue
        with elf:
            runtime = elf.symbol("_PyRuntime")
            if runtime is None:
                continue
            return _describe(pid, path, maps, elf, runtime[0], mem)
    if named:  # a Python without _PyRuntime: 2.x or 3.6 and older
        raise _unsupported(named[:2])
    raise ValueError(f"process {pid} is not a Python process (no libpython or python executable defining _PyRuntime is mapped)")


def _describe(pid: int, path: str, maps: list[Mapping], elf: ElfImage, runtime_vaddr: int, mem: ProcessMemory) -> Interpreter:
    name = os.path.basename(path.removesuffix(" (deleted)"))
    named = _name_version(name)
    check_build(name, free_threaded=bool(named and "t" in named[2]),
                debug=elf.symbol("_Py_NegativeRefcount") is not None)
    hexversion = None
    sym = elf.symbol("Py_Version")  # 3.11+
    if sym is not None:
        raw = elf.read_vaddr(sym[0], 4)
        hexversion = int.from_bytes(raw, "little") if raw else None
    if hexversion is not None:
        version = ((hexversion >> 24) & 0xFF, (hexversion >> 16) & 0xFF, (hexversion >> 8) & 0xFF)
    elif named:
        version = (named[0], named[1], _micro_version(elf, named[0], named[1]))
    else:
        raise ValueError(f"cannot tell the Python version of {name}")
    if version[:2] < (3, 10) or version[0] != 3:
        raise _unsupported(version[:2])

    bias = elf.load_bias(maps)
    code_type = elf.symbol("PyCode_Type")
    if bias is None or code_type is None:
        raise ValueError(f"cannot locate the interpreter's data in {name}")
    runtime = bias + runtime_vaddr
    if version[:2] >= (3, 13):
        # _Py_DebugOffsets is constant data at the start of _PyRuntime: the file has it, and so
        # does the process (which still works when the file was replaced on disk)
        blob = elf.read_vaddr(runtime_vaddr, MAX_SIZE) or mem.read_up_to(runtime, MAX_SIZE)
        try:
            offsets = parse_debug_offsets(blob)
        except ValueError as e:
            raise ValueError(f"Python {version[0]}.{version[1]} in {name}: {e}") from e
        check_build(name, free_threaded=offsets.free_threaded, debug=False)
        if (offsets.version >> 16) != (version[0] << 8 | version[1]):
            raise ValueError(f"{name}: _Py_DebugOffsets describe another Python version")
        layout = layout_from_debug_offsets(offsets)
    else:
        layout = table_layout(version[:2])
    layout.check()
    modules = {os.path.basename(m.path.removesuffix(" (deleted)")) for m in maps}
    try:
        exe = os.path.basename(os.readlink(f"/proc/{pid}/exe").removesuffix(" (deleted)"))
        if _name_version(exe):
            modules.add(exe)
    except OSError:
        pass
    return Interpreter(pid, path, version, layout, runtime, bias + code_type[0], modules)
