"""The service tier's environment: a daemon folder every user may enter, free loopback ports."""

from __future__ import annotations

import os
import re
import shutil
import socket
import tempfile
from pathlib import Path

from harness import Daemon, start_daemon

from deepctx.daemon.store import Window, WindowStore


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServiceDir:
    """A folder every user may enter (the socket's), with the daemon's config, store and log."""

    def __init__(self) -> None:
        self.path = Path(tempfile.mkdtemp(prefix="deepctx-svc-", dir="/tmp"))
        os.chmod(self.path, 0o755)
        self.store = self.path / "state" / "windows.db"

    def config(self, **keys: object) -> Path:
        values = {"store_path": str(self.store), "cache_dir": str(self.path / "cache"), **keys}
        lines = []
        for k, v in values.items():
            lines.append(f"{k} = {v!r}".replace("'", '"') if isinstance(v, str) else f"{k} = {v}")
        f = self.path / "deepctxd.toml"
        f.write_text("\n".join(lines) + "\n")
        return f

    def continuous(self, *extra: str, **keys: object) -> Daemon:
        """A continuous daemon that profiles only the processes whose command line names this folder (see
        linked()): test files run side by side (tests/conftest.py), and a continuous daemon that took every GPU
        process on the machine would capture, and slow, the targets of other tests."""
        return self.start("--continuous", *extra, continuous_match=re.escape(str(self.path)), **keys)

    def linked(self, script: Path) -> Path:
        """A link to script in this folder, to run it by: its command line then names the folder (for
        continuous_match), while Python runs the file linked to (sys.path[0] is the real file's folder)."""
        link = self.path / script.name
        if not link.exists():
            link.symlink_to(script)
        return link

    def put(self, windows: list[Window]) -> None:
        """Windows into the store before the daemon opens it (a continuous-mode producer's output)."""
        s = WindowStore(str(self.store))
        for w in windows:
            assert s.put(w) is not None
        s.close()

    def start(self, *extra: str, **keys: object) -> Daemon:
        return start_daemon(self.path, "--config", str(self.config(**keys)), *extra)

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
