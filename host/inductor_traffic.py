"""The least memory traffic of each Triton launch in an Inductor wrapper module (the output code), parsed as text:
every tensor the kernel takes read once, every one it writes written once (`in_out_ptr` both), each at its
whole size. No launch can move fewer bytes, so its time at the memory's peak bandwidth is a floor under the
kernel's time (the analyzer's compiled-hot-kernel rule).

What the text gives:
- each kernel's parameters and their element types, in its `@triton.jit` definition's `triton_meta`
  signature (`'in_ptr0': '*fp32'`);
- each launch's arguments, in `call` (`triton_poi_..._0.run(arg0_1, buf0, 67108864, stream=stream0)`);
- each argument's shape: a graph input's in its `assert_size_stride(arg0_1, (67108864, ), (1, ))`, a buffer's
  where it is made (`buf0 = empty_strided_cuda((64, 256), (256, 1), torch.float32)`), followed through reuse
  (`buf2 = buf0; del buf0  # reuse`); an argument that is a view (`reinterpret_tensor(buf0, (64, 256), ...)`)
  counts at the view's shape.

A launch with an argument whose shape is symbolic (dynamic shapes) or not found has no figure.
"""

from __future__ import annotations

import ast
import math
import re

# Element sizes of Triton's pointer types (triton_meta's signature)
DTYPE_BYTES = {"fp64": 8, "i64": 8, "u64": 8, "fp32": 4, "i32": 4, "u32": 4, "fp16": 2, "bf16": 2, "i16": 2,
               "u16": 2, "i8": 1, "u8": 1, "i1": 1, "fp8e4nv": 1, "fp8e5": 1, "fp8e4b15": 1, "fp8e4b8": 1,
               "fp8e5b16": 1}

_KERNEL = re.compile(r"^(\w+) = async_compile\.triton\('(\w+)'")
_SIGNATURE = re.compile(r"'signature': (\{[^{}]*\})")
_SHAPE_OF = re.compile(r"^\s*assert_size_stride\((\w+), \(([^()]*)\)")
_MADE = re.compile(r"^\s*(\w+) = empty_strided_\w+\(\(([^()]*)\)")
_ALIAS = re.compile(r"^\s*(\w+) = (\w+); del \2\b")
_RUN = re.compile(r"^\s*(\w+)\.run\((.*)\)\s*(?:#.*)?$")
_VIEW = re.compile(r"^reinterpret_tensor\((\w+), \(([^()]*)\)")


def _numel(dims: str) -> int | None:
    """Elements of a shape written `64, 256` (a trailing comma for one dimension); None if one is symbolic."""
    parts = [p.strip() for p in dims.split(",") if p.strip()]
    if not all(p.isdigit() for p in parts):
        return None
    return math.prod(int(p) for p in parts)


def _split_args(text: str) -> list[str]:
    """A call's arguments at the top level of its parentheses."""
    out, depth, cur = [], 0, []
    for ch in text:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        out.append("".join(cur).strip())
    return out


def kernel_pointers(text: str) -> dict[str, list[tuple[str, int]]]:
    """Kernel -> its parameters in order, each (name, element bytes; 0 for a scalar or a constexpr)."""
    out: dict[str, list[tuple[str, int]]] = {}
    current: str | None = None
    for line in text.splitlines():
        m = _KERNEL.match(line)
        if m:
            current = m.group(2)
            continue
        if current is None:
            continue
        s = _SIGNATURE.search(line)
        if s:
            try:
                sig = ast.literal_eval(s.group(1))
            except (ValueError, SyntaxError):
                current = None
                continue
            if isinstance(sig, dict):
                out[current] = [(str(k), DTYPE_BYTES.get(str(v)[1:], -1) if str(v).startswith("*") else 0)
                                for k, v in sig.items()]
            current = None
    return out


def launch_traffic(text: str) -> dict[int, int]:
    """Line number (1-based) of each Triton launch in the module's `call` -> the bytes it moves at least."""
    pointers = kernel_pointers(text)
    numel: dict[str, int | None] = {}
    out: dict[int, int] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if m := _SHAPE_OF.match(line) or _MADE.match(line):
            numel[m.group(1)] = _numel(m.group(2))
        elif m := _ALIAS.match(line):
            numel[m.group(1)] = numel.pop(m.group(2), None)
        elif (m := _RUN.match(line)) and m.group(1) in pointers:
            total = _launch_bytes(pointers[m.group(1)], _split_args(m.group(2)), numel)
            if total is not None:
                out[number] = total
    return out


def _launch_bytes(params: list[tuple[str, int]], args: list[str], numel: dict[str, int | None]) -> int | None:
    positional = [a for a in args if not re.match(r"^\w+=", a)]
    total = 0
    for (name, size), arg in zip(params, positional, strict=False):
        if size == 0:
            continue
        if size < 0:
            return None  # a pointer type this table does not know
        view = _VIEW.match(arg)
        n = _numel(view.group(2)) if view else numel.get(arg)
        if n is None:
            return None
        total += n * size * (2 if name.startswith("in_out_ptr") else 1)
    return total
