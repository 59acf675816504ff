"""daemon/capture.py drives probe families through their lifecycle only (#30.3): it names none of them, and a
capture of a real process with made-up families runs every step in order and gives its program back."""

from __future__ import annotations

import ast
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from deepctx.daemon import capture as capture_mod
from deepctx.daemon.capture import Capture, CaptureOptions
from deepctx.daemon.probe_set import ProbeSet
from deepctx.daemon.symbolize.native import SymbolCache
from deepctx.probes.family import FamilyDefaults, Target
from deepctx.probes.programs import ProgramPool

CAPTURE = Path(capture_mod.__file__)
FAMILY_MODULES = {"cpu_sampler", "python_stack", "native_unwind", "gpu_api", "device_activity"}
FAMILY_CLASSES = {"CpuSampler", "PythonStacks", "NativeUnwinder", "GpuApi", "DeviceActivity"}
FAMILY_NAMES = {"cpu", "python", "native_unwind", "gpu", "device"}


def test_capture_names_no_family() -> None:
    tree = ast.parse(CAPTURE.read_text())
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.rsplit(".", 1)[-1] in FAMILY_MODULES:
            found.append(f"imports {node.module}")
        elif isinstance(node, ast.Name) and node.id in FAMILY_CLASSES | {"isinstance", "getattr"}:
            found.append(f"uses {node.id} (line {node.lineno})")
        elif isinstance(node, ast.Attribute) and node.attr in FAMILY_CLASSES | {"sampler"}:
            found.append(f"uses .{node.attr} (line {node.lineno})")
        elif isinstance(node, ast.Constant) and node.value in FAMILY_NAMES:
            found.append(f"names family {node.value!r} (line {node.lineno})")
    assert found == []


class Step(FamilyDefaults):
    """A family that notes each step the capture drives."""

    def __init__(self, name: str, calls: list[str]) -> None:
        self.name, self.calls = name, calls

    def source(self) -> str:
        return f"/* {self.name} */"

    def defines(self) -> dict[str, int | str]:
        return {}

    def load(self, bpf: Any) -> None:
        self.calls.append(f"{self.name} load")

    def prepare(self, target: Target) -> None:
        self.calls.append(f"{self.name} prepare")

    def attach(self, bpf: Any, target: Target) -> None:
        self.calls.append(f"{self.name} attach {target.pid}")

    def poll(self, bpf: Any, target: Target) -> None:
        self.calls.append(f"{self.name} poll")

    def finish(self, bpf: Any, target: Target, exited: bool) -> None:
        self.calls.append(f"{self.name} finish")

    def detach(self, bpf: Any, target: Target) -> None:
        self.calls.append(f"{self.name} detach {target.pid}")

    def stats(self, bpf: Any) -> dict[str, int]:
        return {f"{self.name}_steps": len(self.calls)}


class FakeBpf:
    def __init__(self) -> None:
        self.funcs: dict[bytes, object] = {}


@pytest.fixture
def sleeper() -> Any:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield proc
    proc.kill()
    proc.wait()


def test_a_capture_runs_its_families_through_the_lifecycle_and_gives_the_program_back(
        monkeypatch: pytest.MonkeyPatch, sleeper: subprocess.Popen) -> None:
    calls: list[str] = []
    made: list[FakeBpf] = []

    def compile_fn(families: Any) -> FakeBpf:
        calls.append("compile")
        made.append(FakeBpf())
        return made[-1]

    programs = ProgramPool(compile_fn=compile_fn, free_fn=lambda bpf: None)
    monkeypatch.setattr("deepctx.probes.programs.reset_maps", lambda bpf: calls.append("maps emptied"))

    def choose(cls: type, opts: CaptureOptions, target: Target, symbols: Any, tables: Any) -> ProbeSet:
        fams = [Step("a", calls), Step("b", calls)]
        for f in fams:
            f.prepare(target)
        return ProbeSet(opts, fams)  # type: ignore[arg-type]

    monkeypatch.setattr(ProbeSet, "choose", classmethod(choose))

    def run_one() -> dict[str, int]:
        cap = Capture(1, sleeper.pid, CaptureOptions(duration_s=600, sample_hz=99), SymbolCache(4), threading.Event(),
                      programs_pool=programs)
        cap.stop_requested.set()  # ends at the loop's first look: the steps, not the timing
        result = cap.run(lambda p: None, lambda: False)
        assert result.ended == "stopped"
        return result.stats

    stats = run_one()
    pid = sleeper.pid
    assert calls == ["a prepare", "b prepare", "compile", "a load", "b load", f"a attach {pid}", f"b attach {pid}",
                     "a finish", "b finish", "a poll", "b poll", f"a detach {pid}", f"b detach {pid}", "maps emptied"]
    assert stats["a_steps"] == 11  # read at the build: after finish and the last poll, before detach
    calls.clear()
    run_one()  # the second capture of its kind: attach only, on the program the first one gave back
    assert "compile" not in calls and not any(c.endswith("load") for c in calls)
    assert programs.totals()["bpf_programs_compiled"] == 1 and programs.totals()["bpf_programs_reused"] == 1


def test_the_profile_starts_when_its_clock_does_not_when_it_was_asked_for(
        monkeypatch: pytest.MonkeyPatch, sleeper: subprocess.Popen) -> None:
    """duration_s counts from the moment the probes are attached: started_unix is that moment, so that
    [started_unix, started_unix + duration_s] is the time the profile covers (a GPU busy log read over it
    was 0.4 s early on a busy CI machine, where the attach took that long)."""
    attached_at: list[float] = []

    class SlowAttach(Step):
        def attach(self, bpf: Any, target: Target) -> None:
            attached_at.append(time.time())  # what came before the clock started: compile and attach

    programs = ProgramPool(compile_fn=lambda families: FakeBpf(), free_fn=lambda bpf: None)
    monkeypatch.setattr("deepctx.probes.programs.reset_maps", lambda bpf: None)
    monkeypatch.setattr(ProbeSet, "choose", classmethod(
        lambda cls, opts, target, symbols, tables: ProbeSet(opts, [SlowAttach("a", [])])))  # type: ignore[arg-type]
    cap = Capture(1, sleeper.pid, CaptureOptions(duration_s=600, sample_hz=99), SymbolCache(4), threading.Event(),
                  programs_pool=programs)
    asked = cap.started_unix
    cap.stop_requested.set()
    result = cap.run(lambda p: None, lambda: False)
    assert len(attached_at) == 1
    assert asked <= attached_at[0] <= result.started_unix
