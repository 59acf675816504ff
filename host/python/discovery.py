"""Finding the CPython interpreter in a process: the ELF file that defines `_PyRuntime` (libpython,
or a statically linked executable), its version, and the layout to read it with."""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field

from deepctx.host import file_cache
from deepctx.host.elf.image import ElfImage, load_bias
from deepctx.host.elf.reader import Segment
from deepctx.host.file_cache import FileCache
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


@dataclass(eq=False)
class InterpreterFile:
    """What an interpreter file says, the same in every process that maps it: cached per file identity."""

    version: tuple[int, int, int]
    layout: PyLayout | None  # None: 3.13+ whose _Py_DebugOffsets the file does not hold (read from the process)
    runtime_vaddr: int
    code_type_vaddr: int
    segments: tuple[Segment, ...]

    @property
    def nbytes(self) -> int:
        return (sys.getsizeof(self) + sys.getsizeof(self.version) + sys.getsizeof(self.layout)
                + sys.getsizeof(self.segments) + sum(sys.getsizeof(s) for s in self.segments))


KIND = "python"  # entries of the per-file cache: an InterpreterFile, a refusal (str) or None (no _PyRuntime)
FileFacts = InterpreterFile | str | None


def find_interpreter(pid: int, space: AddressSpace, mem: ProcessMemory, files: FileCache | None = None) -> Interpreter:
    """Raises ValueError with a user-facing reason when there is none we can read. What each file says is
    kept in the per-file cache (the daemon's shared one unless `files` is given), per file identity and the
    name it is mapped by: ten processes of one Python read its interpreter file once."""
    cache = files if files is not None else file_cache.shared()
    named: tuple[int, int, str] | None = None
    for path, maps in _candidates(pid, space).items():
        named = named or _name_version(_basename(maps[0]))
        try:
            real = open_mapped_file(pid, maps[0])
            ident = cache.identify(real)
            # what a file says is read under the name the process maps it by (the name tells a free-threaded
            # build, and 3.10's version): the name is in the key, so a file mapped under a name of the
            # process's choosing cannot hand its facts (or refusal) to other processes of that file
            facts: FileFacts = cache.get(f"{ident}\0{_basename(maps[0])}", KIND,
                                         lambda r=real, p=path: _read_file(r, p),  # type: ignore[misc]
                                         _facts_nbytes)
        except OSError:
            continue
        if facts is None:
            continue
        if isinstance(facts, str):
            raise ValueError(facts)
        cache.note_use(KIND, ident, maps[0].path)  # an interpreter's: for the next daemon's prewarm
        return _describe(pid, path, maps, facts, mem)
    if named:  # a Python without _PyRuntime: 2.x or 3.6 and older
        raise _unsupported(named[:2])
    raise ValueError(f"process {pid} is not a Python process (no libpython or python executable defining _PyRuntime is mapped)")


def build_ahead(cache: FileCache, real: str, ident: str, path: str) -> bool:
    """Reads the interpreter facts of the file at real (a descriptor the prewarm opened and checked to be of
    identity ident), mapped at path, into the per-file cache as find_interpreter would, under its basename.
    Whether they were read (False: already held)."""
    key = f"{ident}\0{os.path.basename(path)}"
    if cache.holds(key, KIND):
        return False
    cache.get(key, KIND, lambda: _read_file(real, path), _facts_nbytes)
    return True


def _facts_nbytes(facts: FileFacts) -> int:
    return facts.nbytes if isinstance(facts, InterpreterFile) else sys.getsizeof(facts)


def _read_file(real: str, path: str) -> FileFacts:
    """The interpreter facts of the file at real (named path in the process); None when it defines no
    _PyRuntime; the reason as text when it is an interpreter deepctx cannot read. OSError propagates
    (nothing is cached)."""
    try:
        elf = ElfImage(real)
    except ValueError:  # not ELF (ElfError), or over a cap
        return None
    with elf:
        runtime = elf.symbol("_PyRuntime")
        if runtime is None:
            return None
        try:
            return _file_facts(path, elf, runtime[0])
        except ValueError as e:
            return str(e)


def _file_facts(path: str, elf: ElfImage, runtime_vaddr: int) -> InterpreterFile:
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
    code_type = elf.symbol("PyCode_Type")
    if code_type is None:
        raise ValueError(f"cannot locate the interpreter's data in {name}")
    layout: PyLayout | None
    if version[:2] >= (3, 13):
        # _Py_DebugOffsets is constant data at the start of _PyRuntime: the file has it (else the process
        # does, read per process)
        blob = elf.read_vaddr(runtime_vaddr, MAX_SIZE)
        layout = _debug_layout(name, version, blob) if blob else None
    else:
        layout = table_layout(version[:2])
        layout.check()
    return InterpreterFile(version, layout, runtime_vaddr, code_type[0], tuple(elf.segments))


def _debug_layout(name: str, version: tuple[int, int, int], blob: bytes) -> PyLayout:
    try:
        offsets = parse_debug_offsets(blob)
    except ValueError as e:
        raise ValueError(f"Python {version[0]}.{version[1]} in {name}: {e}") from e
    check_build(name, free_threaded=offsets.free_threaded, debug=False)
    if (offsets.version >> 16) != (version[0] << 8 | version[1]):
        raise ValueError(f"{name}: _Py_DebugOffsets describe another Python version")
    layout = layout_from_debug_offsets(offsets)
    layout.check()
    return layout


def _describe(pid: int, path: str, maps: list[Mapping], facts: InterpreterFile, mem: ProcessMemory) -> Interpreter:
    """The interpreter of one process: the file's facts placed where the process mapped the file."""
    name = os.path.basename(path.removesuffix(" (deleted)"))
    bias = load_bias(facts.segments, maps)
    if bias is None:
        raise ValueError(f"cannot locate the interpreter's data in {name}")
    runtime = bias + facts.runtime_vaddr
    layout = facts.layout or _debug_layout(name, facts.version, mem.read_up_to(runtime, MAX_SIZE))
    modules = {os.path.basename(m.path.removesuffix(" (deleted)")) for m in maps}
    try:
        exe = os.path.basename(os.readlink(f"/proc/{pid}/exe").removesuffix(" (deleted)"))
        if _name_version(exe):
            modules.add(exe)
    except OSError:
        pass
    return Interpreter(pid, path, facts.version, layout, runtime, bias + facts.code_type_vaddr, modules)
