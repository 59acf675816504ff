"""The public socket: deepctxd accepts each client itself, learns who it is, and relays its bytes to the
gRPC server, which listens only in a directory no one else can enter.

grpcio's Python server does not expose a Unix socket's peer credentials. So for every client the relay
reads SO_PEERCRED/SO_PEERGROUPS, opens a connection to the private gRPC socket from a socket bound to a
fresh name in the private directory, and registers the credentials under that name: gRPC reports it as
`context.peer()` ("unix:<private dir>/c<N>"), and daemon/auth.py looks the caller up there.

Why it cannot be bypassed: the private directory is created fresh by root with mode 0700 (an existing one
that root does not own stops the daemon), so only root can connect to the gRPC socket or bind a name in
it; a connection whose name the relay did not register is refused by the service.
"""

from __future__ import annotations

import grp
import logging
import os
import select
import shutil
import socket
import stat
import threading
from collections import Counter
from dataclasses import dataclass

from deepctx.daemon.auth import PEERS, Caller, PeerRegistry, peer_credentials
from deepctx.host.identity import GROUP

log = logging.getLogger("deepctx.relay")

_CHUNK = 256 * 1024
_SUN_PATH_MAX = 107  # sockaddr_un.sun_path, less the terminating NUL


@dataclass
class RelayCounters:
    accepted: int = 0
    refused: int = 0  # over max_connections, or over max_per_user for a caller outside root and `deepctx`
    failed: int = 0  # the gRPC socket could not be reached


class Relay:
    def __init__(self, public_path: str, mode: int, registry: PeerRegistry = PEERS, max_connections: int = 256,
                 max_per_user: int = 16) -> None:
        self.public_path = public_path
        self.mode = mode
        self.registry = registry
        self.max_connections = max_connections
        self.max_per_user = max_per_user
        folder, name = os.path.split(os.path.abspath(public_path))
        self.private_dir = os.path.join(folder, f".{name}.d")
        self.private_socket = os.path.join(self.private_dir, "grpc")
        self.counters = RelayCounters()
        self._listener: socket.socket | None = None
        self._wake_r, self._wake_w = -1, -1
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._conns: dict[int, tuple[socket.socket, socket.socket, Caller]] = {}
        self._per_user: Counter[int] = Counter()
        self._next = 0

    @property
    def grpc_address(self) -> str:
        return f"unix:{self.private_socket}"

    def active(self) -> int:
        with self._lock:
            return len(self._conns)

    # --- life cycle -------------------------------------------------------------------------------

    def prepare(self) -> str:
        """Makes the private directory (0700, root's); returns the address the gRPC server listens on."""
        longest = os.path.join(self.private_dir, f"c{2**63}")
        if len(longest.encode()) > _SUN_PATH_MAX:
            raise OSError(f"socket path too long for a Unix socket: {longest} (use a shorter --socket path)")
        try:
            st = os.lstat(self.private_dir)
        except FileNotFoundError:
            pass
        else:
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
                raise OSError(f"{self.private_dir} exists and is not deepctxd's own directory: remove it")
            shutil.rmtree(self.private_dir)  # left by a daemon that was killed
        os.mkdir(self.private_dir, 0o700)
        os.chmod(self.private_dir, 0o700)  # whatever the umask
        st = os.lstat(self.private_dir)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or stat.S_IMODE(st.st_mode) != 0o700:
            raise OSError(f"{self.private_dir}: could not make a private directory")
        return self.grpc_address

    def start(self) -> None:
        """Listens on the public socket (owner root, group `deepctx`, the configured mode)."""
        lst = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        lst.bind(self.public_path)
        try:
            gid = grp.getgrnam(GROUP).gr_gid
        except KeyError:
            gid = -1
        os.chown(self.public_path, 0 if os.geteuid() == 0 else -1, gid)
        os.chmod(self.public_path, self.mode)
        lst.listen(128)  # only now can anyone connect: owner and mode are already set
        self._listener = lst
        self._wake_r, self._wake_w = os.pipe()
        self._thread = threading.Thread(target=self._accept_loop, name="relay-accept", daemon=True)
        self._thread.start()

    def stop_accepting(self) -> None:
        """No new connections (the public socket goes); open ones keep flowing until stop()."""
        if self._thread is not None:
            os.write(self._wake_w, b"x")
            self._thread.join(timeout=10)
            self._thread = None
            os.close(self._wake_r)
            os.close(self._wake_w)
        if self._listener is not None:
            self._listener.close()
            self._listener = None
            try:
                os.unlink(self.public_path)
            except FileNotFoundError:
                pass

    def stop(self) -> None:
        """Ends every connection and removes the sockets and the private directory."""
        self.stop_accepting()
        with self._lock:
            conns = list(self._conns.values())
        for client, upstream, _ in conns:
            for s in (client, upstream):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        shutil.rmtree(self.private_dir, ignore_errors=True)

    # --- connections ------------------------------------------------------------------------------

    def _accept_loop(self) -> None:
        assert self._listener is not None
        poller = select.poll()
        poller.register(self._listener.fileno(), select.POLLIN)
        poller.register(self._wake_r, select.POLLIN)
        while True:
            ready = {fd for fd, _ in poller.poll()}
            if self._wake_r in ready:
                return
            try:
                client, _ = self._listener.accept()
            except OSError:
                continue
            try:
                self._relay(client)
            except Exception:
                log.exception("relay failed")
                client.close()

    def _relay(self, client: socket.socket) -> None:
        caller = peer_credentials(client)
        with self._lock:
            over = len(self._conns) >= self.max_connections or (
                not caller.privileged and self._per_user[caller.uid] >= self.max_per_user)
            if over:
                self.counters.refused += 1
            else:
                self._next += 1
                n = self._next
        if over:
            log.warning("connection refused: too many", extra={"uid": caller.uid, "pid": caller.pid})
            client.close()
            return
        name = os.path.join(self.private_dir, f"c{n}")
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            upstream.bind(name)
            upstream.connect(self.private_socket)
        except OSError as e:
            self.counters.failed += 1
            log.error("cannot reach the gRPC socket", extra={"error": str(e)})
            upstream.close()
            client.close()
            return
        finally:
            try:
                os.unlink(name)  # the socket keeps its name for getpeername(); the file is not needed
            except FileNotFoundError:
                pass
        peer = f"unix:{name}"
        self.registry.add(peer, caller)
        with self._lock:
            self._conns[n] = (client, upstream, caller)
            self._per_user[caller.uid] += 1
            self.counters.accepted += 1
        threading.Thread(target=self._serve, args=(n, peer, client, upstream, caller), name=f"relay-{n}",
                         daemon=True).start()

    def _serve(self, n: int, peer: str, client: socket.socket, upstream: socket.socket, caller: Caller) -> None:
        back = threading.Thread(target=_pump, args=(upstream, client), name=f"relay-{n}-back", daemon=True)
        back.start()
        _pump(client, upstream)
        back.join()
        self.registry.remove(peer)
        client.close()
        upstream.close()
        with self._lock:
            self._conns.pop(n, None)
            self._per_user[caller.uid] -= 1
            if self._per_user[caller.uid] <= 0:
                del self._per_user[caller.uid]


def _pump(src: socket.socket, dst: socket.socket) -> None:
    """Copies src to dst until src ends, then ends dst's writing side (the peer sees EOF)."""
    try:
        while data := src.recv(_CHUNK):
            dst.sendall(data)
    except OSError:
        pass
    try:
        dst.shutdown(socket.SHUT_WR)
    except OSError:
        pass
