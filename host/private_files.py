"""deepctxd's own files on disk (its caches): in folders of its own (0700), written 0600 through a fresh
name and renamed into place (readers never see a partial file), read without following a link and only from
a regular file that deepctxd owns and no one else may write. What they hold goes into every user's captures,
and a cached BPF program into the kernel: a file someone else could have written is never read."""

from __future__ import annotations

import logging
import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

log = logging.getLogger("deepctx.cache")


def private_dir(path: Path, what: str) -> Path | None:
    """A cache's folder, made deepctxd's own (0700); None (no disk cache) when it is a link or someone else's.
    A folder that does not exist yet is made 0700 when first written (replace_private). what: the cache, for
    the warning ("unwind tables")."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return path
    except OSError as e:
        log.warning("no disk cache for %s: %s: %s", what, path, e.strerror)
        return None
    if stat.S_ISLNK(st.st_mode) or (stat.S_ISDIR(st.st_mode) and st.st_uid != os.geteuid()):
        log.warning("no disk cache for %s: %s is a link or not deepctxd's own folder", what, path)
        return None
    if stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) & 0o077:
        os.chmod(path, 0o700)
    return path


def replace_private(path: Path, write: Callable[[BinaryIO], None]) -> None:
    """Writes path atomically through write(file); raises OSError (and whatever write raises)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")  # 0600
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def open_private(path: Path) -> BinaryIO:
    """path opened for reading; raises OSError (missing, a link) or ValueError (not a regular file of
    deepctxd's own, or writable by its group or others)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    f = os.fdopen(fd, "rb")
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        f.close()
        raise ValueError(f"{path} is not a regular file of deepctxd's own that only it may write")
    return f
