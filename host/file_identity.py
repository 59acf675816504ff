"""What a file is, as the host caches see it: its ELF build id, or a hash of its content where it has none.

Data derived from a file (unwind tables, symbol tables, an interpreter's layout) is cached under this
identity, so ten processes that map one library share one entry, and a library replaced at the same path
(a new build) gets a new identity and is read again. A path, or (device, inode), names no content: an
inode is reused once its file is deleted, and a file rewritten in place keeps it.

The identity is found once per version of a file: a memo keyed by what fstat says of the open file
(device, inode, size, modification and change times; any write changes the change time). The build id
is read from the same descriptor that was fstat'ed, so a rename between the two cannot pair one file's
stat with another's build id. File times tick coarsely (a few ms), so a file changed within the last
RACY_NS is not memoized (as git treats a racily clean index entry): two writes in one tick, of one size,
would otherwise share a fingerprint.

A build id is what its file says it is, so the key also holds the file's size (a stripped copy of a build
has the same id and fewer symbols) and, unless root owns the file and no one else may write it, the
owner's uid: a user who crafts a file with another build's id gets entries of their own, never the data
that other users' profiles read. A content hash carries the owner's uid too: the cache builds from the file
after it was hashed, and a user who rewrites their file in between would otherwise file the new content
under the hash of content that other users' files have.

A file without a build id over max_decompressed_bytes (host/file_limits.py) is not hashed (a target could
map a huge file executable to make the daemon read all of it): it is "f:" and its whole fstat
fingerprint, so its data is never shared with another file and is read again once the file changes.
"""

from __future__ import annotations

import hashlib
import os
import stat
import threading
import time
from collections import OrderedDict

from deepctx.host.elf.reader import ElfError, ElfFile
from deepctx.host.file_limits import LIMITS

MEMO_ENTRIES = 8192  # fstat fingerprints remembered (about 200 bytes each)
HASH_CHUNK = 1 << 20
RACY_NS = 2_000_000_000

Fingerprint = tuple[int, int, int, int, int]  # st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns


class FileIdentities:
    """Identities of files, remembered per fstat fingerprint. Safe from several threads."""

    def __init__(self, memo_entries: int = MEMO_ENTRIES) -> None:
        self.memo_entries = memo_entries
        self._memo: OrderedDict[Fingerprint, str] = OrderedDict()
        self._lock = threading.Lock()
        self.counters = {"build_ids_read": 0, "content_hashes": 0, "memo_hits": 0}

    def of(self, path: str) -> str:
        """The identity of the file at path: "b:<build id>:<size>[:u<uid>]", "h:<blake2b of the content>[:u<uid>]" or,
        over the size cap without a build id, "f:<fingerprint>".
        Raises OSError when the file cannot be opened."""
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
        try:
            st = os.fstat(fd)
            fp = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
            with self._lock:
                known = self._memo.get(fp)
                if known is not None:
                    self._memo.move_to_end(fp)
                    self.counters["memo_hits"] += 1
                    return known
            ident = _identify(fd, st)
            with self._lock:
                self.counters["content_hashes" if ident.startswith("h:") else "build_ids_read"] += 1
                if time.time_ns() - st.st_ctime_ns < RACY_NS:
                    return ident  # changed moments ago: it may change again within the same file times
                self._memo[fp] = ident
                while len(self._memo) > self.memo_entries:
                    self._memo.popitem(last=False)
            return ident
        finally:
            os.close(fd)


def _identify(fd: int, st: os.stat_result) -> str:
    build_id: str | None = None
    if stat.S_ISREG(st.st_mode) and st.st_size:
        try:
            with ElfFile(f"/proc/self/fd/{fd}", allow_32bit=True) as f:
                build_id = f.build_id()
        except ElfError:
            build_id = None
    # the cache's builds read the file again after this: one its owner may write can change in between
    owner = "" if st.st_uid == 0 and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) else f":u{st.st_uid}"
    if build_id:
        return f"b:{build_id}:{st.st_size}{owner}"
    if st.st_size > LIMITS.max_decompressed_bytes:
        return f"f:{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"
    return f"h:{content_hash(fd)}{owner}"


def content_hash(fd: int) -> str:
    """blake2b of everything the descriptor reads, from its start."""
    h = hashlib.blake2b(digest_size=20)
    offset = 0
    while chunk := os.pread(fd, HASH_CHUNK, offset):
        h.update(chunk)
        offset += len(chunk)
    return h.hexdigest()
