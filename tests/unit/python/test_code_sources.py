"""3.10 targets: the qualified name comes from the source file the code object names, which the target
chooses: a FIFO must not block the daemon, a device must not be read, only a regular file is parsed."""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path
from types import SimpleNamespace

from deepctx.host.python.code import CodeReader
from deepctx.host.target_files import read_regular, read_target_file


def qualname_within(path: str, name: str, line: int, timeout: float = 10.0) -> str | None:
    reader = CodeReader(None, SimpleNamespace(pid=os.getpid()))  # type: ignore[arg-type]
    out: list[str] = []
    t = threading.Thread(target=lambda: out.append(reader._source_qualname(path, name, line)), daemon=True)
    t.start()
    t.join(timeout)
    return out[0] if out else None  # None: still blocked


def test_a_fifo_named_as_source_does_not_block(tmp_path: Path) -> None:
    fifo = tmp_path / "mod.py"
    os.mkfifo(fifo)
    assert qualname_within(str(fifo), "f", 1) == "f"


def test_a_regular_source_gives_the_qualified_name(tmp_path: Path) -> None:
    src = tmp_path / "mod.py"
    src.write_text("class C:\n    def f(self):\n        pass\n")
    assert qualname_within(str(src), "f", 2) == "C.f"


def test_only_regular_files_within_the_cap_are_read(tmp_path: Path) -> None:
    big = tmp_path / "big.py"
    big.write_bytes(b"#" * 101)
    assert read_regular("/dev/zero", 100) is None
    assert read_regular(str(big), 100) is None
    assert read_regular(str(big), 101) == b"#" * 101
    assert read_regular(str(tmp_path), 100) is None  # a folder
    assert read_target_file(os.getpid(), str(big)) == b"#" * 101


def test_a_file_another_process_names_is_read_from_its_root_and_cwd(tmp_path: Path) -> None:
    """Another process of the caller's user (root's, with all its capabilities, when the tests run as root):
    its relative names resolve from its working directory, absolute ones from its root, links kept inside
    that root."""
    (tmp_path / "mod.py").write_text("x = 1\n")
    (tmp_path / "link.py").symlink_to("/" + str(tmp_path / "mod.py").lstrip("/"))
    with subprocess.Popen(["sleep", "60"], cwd=tmp_path) as child:
        try:
            assert read_target_file(child.pid, "mod.py") == b"x = 1\n"
            assert read_target_file(child.pid, str(tmp_path / "mod.py")) == b"x = 1\n"
            assert read_target_file(child.pid, "link.py") == b"x = 1\n"
            assert read_target_file(child.pid, "missing.py") is None
        finally:
            child.kill()
