"""Where CPython keeps what the profiler reads, per minor version (x86-64, default GIL build).

3.10-3.12 have no self-description: their tables below were checked against each version's
internal headers (tests/unit/python/test_layouts.py compiles offsetof() against the installed
headers) and by walking live interpreters. 3.13+ take most offsets from `_Py_DebugOffsets`; the
few it lacks are listed per version.
"""

from __future__ import annotations

from dataclasses import dataclass

from deepctx.host.python.debug_offsets import DebugOffsets

FRAME_READ_MAX = 128  # the BPF walker reads at most this many bytes of a frame / code object
TSTATE_READ_MAX = 255  # ... and its thread state's id and frame fields in one read of fewer bytes than 256


@dataclass(frozen=True)
class PyLayout:
    version: tuple[int, int]
    # _PyRuntime -> interpreters -> thread states
    runtime_interpreters_head: int
    interp_next: int
    interp_threads_head: int
    tstate_next: int
    tstate_ident: int  # native_thread_id (3.11+) or thread_id, a pthread_t (3.10)
    ident_is_pthread: bool
    tstate_frame: int  # frame (3.10), cframe (3.11, 3.12), current_frame (3.13+)
    cframe_current: int | None  # _PyCFrame.current_frame (3.11, 3.12)
    # frames: PyFrameObject (3.10) or _PyInterpreterFrame (3.11+)
    frame_code: int
    frame_previous: int
    frame_instr: int  # f_lasti (int, 3.10) or prev_instr / instr_ptr (pointer)
    instr_is_pointer: bool
    frame_owner: int | None
    frame_is_entry: int | None  # 3.11 only
    owner_shim: int | None  # owner values >= this are C-stack shim frames (3.12+)
    owner_generator: int | None
    # code objects
    code_filename: int
    code_name: int
    code_qualname: int | None  # 3.11+
    code_firstlineno: int
    code_linetable: int
    code_adaptive: int | None  # co_code_adaptive: instructions (3.11+)
    code_firsttraceable: int | None  # _co_firsttraceable: frames before it are incomplete
    code_bytecode: int | None  # co_code, a bytes object (3.10)
    linetable_format: str  # "pep626" (3.10) or "locations" (3.11+)
    # objects
    unicode_ascii_size: int  # sizeof(PyASCIIObject): compact ASCII data follows it
    unicode_compact_size: int  # sizeof(PyCompactUnicodeObject): other compact data follows it
    object_type: int = 8
    unicode_length: int = 16
    unicode_state: int = 32
    bytes_size: int = 16
    bytes_data: int = 32

    @property
    def hexversion(self) -> int:
        return (self.version[0] << 8) | self.version[1]

    @property
    def frame_size(self) -> int:
        """Bytes of a frame that cover every field the walker reads."""
        # the walker reads 8 bytes at frame_instr whatever its type
        ends = [self.frame_code + 8, self.frame_previous + 8, self.frame_instr + 8]
        ends += [o + 1 for o in (self.frame_owner, self.frame_is_entry) if o is not None]
        return (max(ends) + 7) & ~7

    @property
    def code_tag_span(self) -> tuple[int, int]:
        """[start, end) of the code object bytes that hold co_firstlineno and co_name."""
        lo = min(self.code_firstlineno, self.code_name)
        return lo, max(self.code_firstlineno + 4, self.code_name + 8)

    @property
    def tstate_span(self) -> int:
        """Bytes from the first to the end of the last of the thread state's id and frame fields."""
        return abs(self.tstate_ident - self.tstate_frame) + 8

    def check(self) -> None:
        """The BPF walker masks offsets and sizes: refuse a layout it cannot read."""
        lo, hi = self.code_tag_span
        if self.frame_size > FRAME_READ_MAX or hi - lo > FRAME_READ_MAX:
            raise ValueError(f"Python {self.version[0]}.{self.version[1]}: frame or code layout too large to read")
        if self.tstate_span > TSTATE_READ_MAX:
            raise ValueError(f"Python {self.version[0]}.{self.version[1]}: the thread state's id and frame fields "
                             f"lie {self.tstate_span} bytes apart, more than the walker reads at once "
                             f"({TSTATE_READ_MAX})")


_BASE_311 = dict(
    runtime_interpreters_head=40,
    interp_next=0,
    tstate_next=8,
    ident_is_pthread=False,
    tstate_frame=56,
    instr_is_pointer=True,
    owner_generator=1,
    code_filename=112,
    code_name=120,
    code_qualname=128,
    code_linetable=136,
    code_bytecode=None,
    linetable_format="locations",
)

LAYOUTS: dict[tuple[int, int], PyLayout] = {
    (3, 10): PyLayout(
        version=(3, 10),
        runtime_interpreters_head=32,
        interp_next=0,
        interp_threads_head=8,
        tstate_next=8,
        tstate_ident=176,
        ident_is_pthread=True,
        tstate_frame=24,
        cframe_current=None,
        frame_code=32,
        frame_previous=24,
        frame_instr=96,
        instr_is_pointer=False,
        frame_owner=None,
        frame_is_entry=None,
        owner_shim=None,
        owner_generator=None,
        code_filename=104,
        code_name=112,
        code_qualname=None,
        code_firstlineno=40,
        code_linetable=120,
        code_adaptive=None,
        code_firsttraceable=None,
        code_bytecode=48,
        linetable_format="pep626",
        unicode_ascii_size=48,
        unicode_compact_size=72,
    ),
    (3, 11): PyLayout(
        version=(3, 11),
        interp_threads_head=16,
        tstate_ident=160,
        cframe_current=8,
        frame_code=32,
        frame_previous=48,
        frame_instr=56,
        frame_owner=69,
        frame_is_entry=68,
        owner_shim=None,
        code_firstlineno=72,
        code_adaptive=184,
        code_firsttraceable=168,
        unicode_ascii_size=48,
        unicode_compact_size=72,
        **_BASE_311,  # type: ignore[arg-type]
    ),
    (3, 12): PyLayout(
        version=(3, 12),
        interp_threads_head=72,
        tstate_ident=144,
        cframe_current=0,
        frame_code=0,
        frame_previous=8,
        frame_instr=56,
        frame_owner=70,
        frame_is_entry=None,
        owner_shim=3,  # FRAME_OWNED_BY_CSTACK
        code_firstlineno=68,
        code_adaptive=192,
        code_firsttraceable=176,
        unicode_ascii_size=40,
        unicode_compact_size=56,
        **_BASE_311,  # type: ignore[arg-type]
    ),
}

# What _Py_DebugOffsets does not say, per version. 3.14: FRAME_OWNED_BY_INTERPRETER (3) replaced
# FRAME_OWNED_BY_CSTACK (3) for shim frames; _co_firsttraceable's offset is not known there, so
# incomplete frames are not filtered (they show their first line).
_DEBUG_EXTRAS: dict[tuple[int, int], dict[str, int | None]] = {
    (3, 13): {"code_firsttraceable": 184},
    (3, 14): {"code_firsttraceable": None},
}

SUPPORTED = sorted([*LAYOUTS, *_DEBUG_EXTRAS])


def supported_text() -> str:
    return ", ".join(f"{a}.{b}" for a, b in SUPPORTED)


def layout_from_debug_offsets(d: DebugOffsets) -> PyLayout:
    version = ((d.version >> 24) & 0xFF, (d.version >> 16) & 0xFF)
    extras = _DEBUG_EXTRAS.get(version)
    if extras is None:
        raise ValueError(f"Python {version[0]}.{version[1]} is not supported (supported: {supported_text()})")
    return PyLayout(
        version=version,
        runtime_interpreters_head=d.runtime_interpreters_head,
        interp_next=d.interp_next,
        interp_threads_head=d.interp_threads_head,
        tstate_next=d.tstate_next,
        tstate_ident=d.tstate_native_thread_id,
        ident_is_pthread=False,
        tstate_frame=d.tstate_current_frame,
        cframe_current=None,
        frame_code=d.frame_executable,
        frame_previous=d.frame_previous,
        frame_instr=d.frame_instr_ptr,
        instr_is_pointer=True,
        frame_owner=d.frame_owner,
        frame_is_entry=None,
        owner_shim=3,
        owner_generator=1,
        code_filename=d.code_filename,
        code_name=d.code_name,
        code_qualname=d.code_qualname,
        code_firstlineno=d.code_firstlineno,
        code_linetable=d.code_linetable,
        code_adaptive=d.code_adaptive,
        code_firsttraceable=extras["code_firsttraceable"],
        code_bytecode=None,
        linetable_format="locations",
        object_type=d.object_type,
        unicode_length=d.unicode_length,
        unicode_state=d.unicode_state,
        unicode_ascii_size=d.unicode_ascii_size,
        # PyCompactUnicodeObject adds utf8_length and utf8 (3.12+)
        unicode_compact_size=d.unicode_ascii_size + 16,
        bytes_size=d.bytes_size,
        bytes_data=d.bytes_data,
    )


def table_layout(version: tuple[int, int]) -> PyLayout:
    layout = LAYOUTS.get(version)
    if layout is None:
        raise ValueError(f"Python {version[0]}.{version[1]} is not supported (supported: {supported_text()})")
    return layout
