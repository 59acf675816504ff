"""The gRPC server on a Unix socket, with the standard health service."""

from __future__ import annotations

import logging
import os
import threading
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from deepctx.daemon.capture import wait_released
from deepctx.daemon.config import Config
from deepctx.daemon.rpc_limits import RpcLimits
from deepctx.daemon.service import ProfilerService
from deepctx.daemon.service_parts import ServiceParts
from deepctx.host.file_limits import configure as configure_file_limits
from deepctx.proto.v1 import deepctx_pb2_grpc as pb_grpc

log = logging.getLogger("deepctx.server")

SERVICE_NAME = "deepctx.v1.Profiler"
MAX_MESSAGE_BYTES = 256 * 1024 * 1024  # profiles of 100k+ nodes
ROOT_WORKERS = 8  # root's RPCs besides its captures' streams: status, stop, ps, queries at once
# how long a stop waits for the running captures to send their profiles, before the server's own grace:
# with that grace and the probes' detaching, inside systemd's TimeoutStopSec=30 (systemd/deepctxd.service)
SHUTDOWN_CAPTURES_S = 15.0
PLACEMENT_ARRAYS_WAIT_S = 30.0  # the programs' compile waits this long at most for the shared arrays' module
STREAMS_PER_CONNECTION = 100  # HTTP/2 streams one connection may open at once (more wait in the client)


def worker_count(config: Config) -> int:
    """The RPC pool: every user's slots (rpc_limits.py) plus root's captures and ROOT_WORKERS, so no mix of
    users' RPCs, streams held open included, leaves root without a free worker."""
    return config.max_user_rpcs + config.max_sessions + ROOT_WORKERS


class SocketInUse(RuntimeError):
    pass


def _prepare_socket(path: str) -> None:
    sock = Path(path)
    sock.parent.mkdir(parents=True, exist_ok=True)
    if sock.exists() or sock.is_symlink():
        # A live daemon answers on it: refuse to steal its socket. A stale one is removed.
        channel = grpc.insecure_channel(f"unix://{path}")
        try:
            grpc.channel_ready_future(channel).result(timeout=0.5)
            raise SocketInUse(f"another deepctxd is already serving on {path}")
        except grpc.FutureTimeoutError:
            sock.unlink()
        finally:
            channel.close()


class DaemonServer:
    def __init__(self, config: Config) -> None:
        self.config = config
        configure_file_limits(config.max_decompressed_bytes, config.max_unwind_rows)
        self.shutdown = threading.Event()
        self.service = ProfilerService(config, self.shutdown)
        self.continuous: Any = None
        # The relay owns the public socket (owner, mode, caller credentials); gRPC listens privately.
        self.parts = ServiceParts(config, self.service.store, self.service.process_totals,
                                  lambda: self.service.totals, self.service.active_captures)
        self.rpc_limits = RpcLimits(config.max_rpcs_per_user, config.max_user_rpcs)
        self.parts.guard.limits = self.rpc_limits
        self.health = health.HealthServicer()
        self._server: grpc.Server | None = None
        self._prewarm_thread: threading.Thread | None = None
        self._placement_thread: threading.Thread | None = None

    def start(self) -> None:
        _prepare_socket(self.config.socket)
        address = self.parts.prepare()
        # No maximum_concurrent_rpcs: it counts root's RPCs with everyone's, so a user could fill it. Users
        # are held to their slots by the RPC guard instead, and an RPC past the pool waits for a worker.
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=worker_count(self.config), thread_name_prefix="rpc"),
            options=[("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                     ("grpc.max_receive_message_length", 4 * 1024 * 1024),
                     ("grpc.max_concurrent_streams", STREAMS_PER_CONNECTION)],
            interceptors=self.parts.interceptors,
        )
        pb_grpc.add_ProfilerServicer_to_server(self.service, server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        if server.add_insecure_port(address) == 0:
            raise OSError(f"cannot listen on {address}")
        server.start()
        self.parts.start()
        if self.config.continuous and self.service.store is None:  # windows would have nowhere to go
            log.error("continuous mode needs the window store: set store_path (it is empty, or the store "
                      "could not be opened); not profiling in the background")
        elif self.config.continuous:
            from deepctx.daemon.continuous import ContinuousProfiler

            self.continuous = ContinuousProfiler(self.service, self.config, self.shutdown)
            self.continuous.start()
        # the common programs are compiled and loaded while the daemon already serves
        if self.config.prewarm_programs:
            self._prewarm_thread = threading.Thread(target=self._prewarm, name="prewarm", daemon=True)
            self._prewarm_thread.start()
        self.health.set("", health_pb2.HealthCheckResponse.SERVING)
        self.health.set(SERVICE_NAME, health_pb2.HealthCheckResponse.SERVING)
        self._server = server
        log.info("serving", extra={"socket": self.config.socket, "pid": os.getpid()})

    def _prewarm(self) -> None:
        # the tables first: a fraction of a second, where the programs take seconds of compiling
        try:
            self.service.prewarm_unwind_tables()
        except Exception:  # a capture builds what is missing
            log.exception("unwind tables not built ahead")
        # the recently used files' rows, beside the programs' compiles (Python and numpy here, LLVM there); the
        # programs wait for the shared arrays' module only (else its compile waited for a whole program's)
        arrays = threading.Event()
        self._placement_thread = threading.Thread(target=self._prewarm_placements, args=(arrays,),
                                                  name="prewarm-unwind", daemon=True)
        self._placement_thread.start()
        arrays.wait(PLACEMENT_ARRAYS_WAIT_S)
        try:
            self.service.prewarm_programs()
        except Exception:  # a capture compiles what is missing: the daemon serves on
            log.exception("programs not compiled ahead")

    def _prewarm_placements(self, arrays: threading.Event) -> None:
        try:
            self.service.prewarm_unwind_placements(arrays)
        except Exception:  # a capture reads and places what is missing
            log.exception("unwind rows not placed ahead")
        finally:
            arrays.set()
        try:  # after the rows: the unwind tables read for them may leave the host cache for these
            self.service.prewarm_symbols()
        except Exception:  # a capture builds what is missing
            log.exception("symbol tables not built ahead")

    def compiling_ahead(self) -> bool:
        """The programs (or the unwinder's shared arrays) made at start are still compiling (in C: bcc and
        LLVM, outside the interpreter), or rows are still written into those arrays."""
        return any(t is not None and t.is_alive() for t in (self._prewarm_thread, self._placement_thread))

    def stop(self, grace_s: float = 5.0) -> None:
        """Ends every capture (each detaches its probes and returns what it has), then stops serving."""
        self.shutdown.set()
        self.health.enter_graceful_shutdown()
        if self.continuous is not None:
            self.continuous.stop()  # each capture stores its last window
        self.parts.stop_accepting()
        # Captures end on the shutdown event; each then detaches, builds and sends its profile, which can take
        # seconds on a loaded machine: the server's own grace would cut those streams ("not running" at the
        # client, the profile lost), so the captures are waited for first, within SHUTDOWN_CAPTURES_S.
        if not self.service.wait_idle(SHUTDOWN_CAPTURES_S):
            log.warning("captures still running at shutdown; their clients may get no profile",
                        extra={"after_s": SHUTDOWN_CAPTURES_S})
        if self._server is not None:
            self._server.stop(grace_s).wait()
        if not wait_released(grace_s):  # finished captures detach behind their profiles
            log.warning("probes of finished captures still detaching at exit (the kernel drops them with us)")
        self.service.programs.close()
        self.service.close()
        self.parts.stop()
        try:
            Path(self.config.socket).unlink()
        except FileNotFoundError:
            pass
        log.info("stopped")
