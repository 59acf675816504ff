"""pprof's profile.proto (gzipped), as `go tool pprof` and other pprof readers take it.

One sample type per metric; one sample per call path with a value; Python and native frames (and the
GPU API, kernel, copy, set and sync nodes below them) as locations with one line each; threads and GPU
streams as labels: pid, thread, tid, stream, device, kind.
"""

from __future__ import annotations

import gzip
from typing import Any, ClassVar

from deepctx.profiles.exporter import ExportOptions
from deepctx.profiles.tree import Frame, ViewNode, from_doc, iter_paths, pick_metric
from deepctx.proto.pprof import profile_pb2 as pb

# pprof names and units by convention: ("samples"/"cpu", "count"/"nanoseconds"/"bytes").
SAMPLE_TYPES = {
    "cpu_samples": ("cpu_samples", "count"),
    "calls": ("calls", "count"),
    "api_time_ns": ("api_time", "nanoseconds"),
    "gpu_time_ns": ("gpu_time", "nanoseconds"),
    "bytes": ("bytes", "bytes"),
    "sync_wait_ns": ("sync_wait", "nanoseconds"),
}


class _Strings:
    def __init__(self) -> None:
        self.table: list[str] = [""]
        self.index: dict[str, int] = {"": 0}

    def __call__(self, s: str | None) -> int:
        if not s:
            return 0
        i = self.index.get(s)
        if i is None:
            i = self.index[s] = len(self.table)
            self.table.append(s)
        return i


class _Builder:
    def __init__(self, prof: pb.Profile) -> None:
        self.prof = prof
        self.s = _Strings()
        self.functions: dict[tuple[str, str, str], int] = {}
        self.locations: dict[Frame, int] = {}
        self.mappings: dict[str, int] = {}

    def mapping(self, module: str) -> int:
        mid = self.mappings.get(module)
        if mid is None:
            mid = self.mappings[module] = len(self.mappings) + 1
            self.prof.mapping.add(id=mid, filename=self.s(module), has_functions=True,
                                  has_filenames=False, has_line_numbers=False)
        return mid

    def location(self, frame: Frame) -> int:
        lid = self.locations.get(frame)
        if lid is not None:
            return lid
        filename = frame.file or frame.module or ""
        fkey = (frame.kind, frame.name, filename)
        fid = self.functions.get(fkey)
        if fid is None:
            fid = self.functions[fkey] = len(self.functions) + 1
            self.prof.function.add(id=fid, name=self.s(frame.name), system_name=self.s(frame.name),
                                   filename=self.s(filename))
        lid = self.locations[frame] = len(self.locations) + 1
        mid = self.mapping(frame.module) if frame.module and frame.kind == "native" else 0
        loc = self.prof.location.add(id=lid, mapping_id=mid)
        loc.line.add(function_id=fid, line=frame.line or 0)
        return lid


class Pprof:
    name: ClassVar[str] = "pprof"
    suffix: ClassVar[str] = ".pb.gz"
    binary: ClassVar[bool] = True

    def export(self, doc: dict[str, Any], options: ExportOptions) -> bytes:
        return gzip.compress(self.message(doc, options).SerializeToString(), mtime=0)

    def message(self, doc: dict[str, Any], options: ExportOptions) -> pb.Profile:
        root = from_doc(doc, options.fold)
        metrics = list(doc["metrics"])
        prof = pb.Profile()
        b = _Builder(prof)
        s = b.s
        for m in metrics:
            typ, unit = SAMPLE_TYPES.get(m, (m, "count"))
            prof.sample_type.add(type=s(typ), unit=s(unit))
        prof.default_sample_type = s(SAMPLE_TYPES.get(pick_metric(root, options.metric), ("", ""))[0])
        hz = int(doc.get("sample_hz") or 0)
        if hz:
            prof.period_type.type, prof.period_type.unit = s("cpu"), s("nanoseconds")
            prof.period = 1_000_000_000 // hz
        prof.time_nanos = int(float(doc.get("started_unix") or 0) * 1e9)
        prof.duration_nanos = int(float(doc.get("duration_s") or 0) * 1e9)
        for text in (doc.get("command"), f"host {doc.get('hostname')}" if doc.get("hostname") else None,
                     *doc.get("warnings", [])):
            if text:
                prof.comment.append(s(text))
        pid = int(doc.get("pid") or 0)
        for path, node in iter_paths(root):
            if not any(node.self.get(m, 0) for m in metrics):
                continue
            sample = prof.sample.add()
            sample.value.extend(node.self.get(m, 0) for m in metrics)
            sample.location_id.extend(b.location(n.frame) for n in reversed(path) if n.frame.kind != "thread")
            self._labels(sample, s, pid, path, node)
        prof.string_table.extend(s.table)
        return prof

    def _labels(self, sample: pb.Sample, s: _Strings, pid: int, path: list[ViewNode], node: ViewNode) -> None:
        sample.label.add(key=s("pid"), num=pid)
        thread = next((n for n in path if n.frame.kind == "thread"), None)
        if thread is not None:
            sample.label.add(key=s("thread"), str=s(thread.frame.name))
            if thread.tid is not None:
                sample.label.add(key=s("tid"), num=thread.tid)
        sample.label.add(key=s("kind"), str=s(node.frame.kind))
        for key in ("stream", "device"):
            if node.extra.get(key) is not None:
                sample.label.add(key=s(key), num=int(node.extra[key]))
