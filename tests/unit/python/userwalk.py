"""The BPF walker's logic in Python, reading /proc/<pid>/mem: a test oracle for layouts and
symbolization that needs no BPF (only permission to read the target's memory)."""

from deepctx.host.python.code import code_tag
from deepctx.host.python.discovery import Interpreter
from deepctx.host.python.stacks import (
    PYFRAME_F_ENTRY,
    PYFRAME_F_GENERATOR,
    PYSTACK_F_READ_ERROR,
    PYSTACK_F_TRUNCATED,
    RawFrame,
    RawStack,
)

MAX_DEPTH = 128


def walk(mem, interp: Interpreter, tstate: int, max_depth: int = MAX_DEPTH) -> RawStack:
    lay = interp.layout
    frame = mem.read_u64(tstate + lay.tstate_frame)
    if frame and lay.cframe_current is not None:
        frame = mem.read_u64(frame + lay.cframe_current)
    frames: list[RawFrame] = []
    flags = 0
    for _ in range(max_depth + max_depth // 2):
        if not frame:
            break
        try:
            code = mem.read_u64(frame + lay.frame_code) & ~7
            prev = mem.read_u64(frame + lay.frame_previous)
            owner = mem.read(frame + lay.frame_owner, 1)[0] if lay.frame_owner is not None else 0
            if lay.owner_shim is not None and owner >= lay.owner_shim:
                if frames:
                    f = frames[-1]
                    frames[-1] = f._replace(flags=f.flags | PYFRAME_F_ENTRY)
                frame = prev
                continue
            if len(frames) >= max_depth:
                flags |= PYSTACK_F_TRUNCATED
                break
            if lay.instr_is_pointer:
                ip = mem.read_u64(frame + lay.frame_instr)
                lasti = (ip - code - lay.code_adaptive) >> 1
            else:
                lasti = int.from_bytes(mem.read(frame + lay.frame_instr, 4), "little", signed=True)
            ff = 0
            if lay.frame_owner is None:
                ff |= PYFRAME_F_ENTRY
            elif lay.frame_is_entry is not None and mem.read(frame + lay.frame_is_entry, 1)[0]:
                ff |= PYFRAME_F_ENTRY
            if owner == lay.owner_generator:
                ff |= PYFRAME_F_GENERATOR
            first = int.from_bytes(mem.read(code + lay.code_firstlineno, 4), "little")
            tag = code_tag(first, mem.read_u64(code + lay.code_name))
        except MemoryError:
            flags |= PYSTACK_F_READ_ERROR
            break
        frames.append(RawFrame(code, tag, lasti, ff))
        frame = prev
    else:
        if frame:
            flags |= PYSTACK_F_TRUNCATED
    return RawStack(flags, frames)
