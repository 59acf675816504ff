"""RPCs in progress per caller: no user can take the gRPC server's workers from root or from the others.

grpcio's sync server runs every RPC on a worker thread of one pool for as long as it lasts, so a stream
held open (Health/Watch, a long Attach) holds a worker. Each uid but root may have `per_user` RPCs in
progress, and all of them together `users_total`; root (uid 0) is never counted. The server's pool has
`users_total` workers plus root's own (daemon/server.py), so however the users' slots are used, root's
RPCs find a free worker. A refused RPC holds its worker only for the refusal.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter

log = logging.getLogger("deepctx.rpc")

ROOT = 0


class OverLimit(Exception):
    """The caller may not start another RPC now; the message says which limit, for the caller."""


class Slot:
    """One admitted RPC; release() is idempotent (called when the handler ends and when the RPC ends)."""

    def __init__(self, limits: RpcLimits | None, uid: int) -> None:
        self._limits = limits
        self.uid = uid

    def release(self) -> None:
        limits, self._limits = self._limits, None
        if limits is not None:
            limits._release(self.uid)


class RpcLimits:
    def __init__(self, per_user: int, users_total: int) -> None:
        self.per_user = per_user
        self.users_total = users_total
        self._lock = threading.Lock()
        self._held: Counter[int] = Counter()
        self._total = 0
        self._warned: set[int] = set()  # uids refused since they last had nothing in progress
        self.refused = 0

    def acquire(self, uid: int) -> Slot:
        """A slot for one RPC of uid; raises OverLimit. Root is always admitted and never counted."""
        if uid == ROOT:
            return Slot(None, uid)
        with self._lock:
            if self._held[uid] >= self.per_user:
                why = (f"too many requests in progress for uid {uid}: at most {self.per_user} at once per "
                       f"user (max_rpcs_per_user), streams held open included; end one and retry")
            elif self._total >= self.users_total:
                why = (f"too many requests in progress for users other than root: at most {self.users_total} "
                       f"at once (max_user_rpcs); retry later")
            else:
                self._held[uid] += 1
                self._total += 1
                return Slot(self, uid)
            self.refused += 1
            first = uid not in self._warned
            self._warned.add(uid)
        if first:  # once per episode: a client retrying in a loop does not flood the log
            log.warning("rpc refused: %s", why, extra={"uid": uid})
        raise OverLimit(why)

    def held(self, uid: int) -> int:
        with self._lock:
            return self._held[uid]

    @property
    def total(self) -> int:
        with self._lock:
            return self._total

    def _release(self, uid: int) -> None:
        with self._lock:
            self._held[uid] -= 1
            self._total -= 1
            if self._held[uid] <= 0:
                del self._held[uid]
                self._warned.discard(uid)
