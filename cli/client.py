"""The CLI's connection to deepctxd: a channel on the Unix socket, errors turned into one-line reasons."""

from __future__ import annotations

import os
import shutil
import socket
import sys
from pathlib import Path

import grpc

from deepctx.proto.v1 import deepctx_pb2_grpc as pb_grpc

DEFAULT_SOCKET = "/run/deepctx/deepctxd.sock"
MAX_MESSAGE_BYTES = 256 * 1024 * 1024


class CliError(Exception):
    """A failure the CLI reports as one line on stderr, with an exit status."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


def socket_path(flag: str | None) -> str:
    return flag or os.environ.get("DEEPCTX_SOCKET") or DEFAULT_SOCKET


def daemon_command() -> str:
    """How to start the deepctxd installed with this deepctx: the one next to the running interpreter (a
    virtualenv's bin/ is rarely on root's PATH, so a bare `deepctxd` would not be found), else the PATH's."""
    here = Path(sys.executable).parent / "deepctxd"  # not resolved: a venv's python links out of the venv
    found = str(here) if os.access(here, os.X_OK) else shutil.which("deepctxd") or "deepctxd"
    return found if os.geteuid() == 0 else f"sudo {found}"


def not_running(path: str) -> CliError:
    return CliError(f"deepctxd is not running (nothing answers on {path}): start it with "
                    f"`{daemon_command()}` (or `systemctl start deepctxd`), or point --socket / DEEPCTX_SOCKET "
                    f"at its socket", status=3)


def not_answering(path: str, timeout_s: float) -> CliError:
    return CliError(f"deepctxd accepted a connection on {path} but did not answer within {timeout_s:g} s: it may "
                    f"be overloaded or stuck; see its log (`journalctl -u deepctxd`)", status=3)


def listening(path: str) -> bool:
    """Something accepts connections on the socket. A socket file left by a daemon that was killed refuses them:
    that is "not running" at once, where gRPC would retry until its timeout."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        try:
            s.connect(path)
        except OSError:
            return False
    return True


def connect(path: str, timeout_s: float = 10.0) -> pb_grpc.ProfilerStub:
    """timeout_s: how long a daemon that accepts the connection has to answer it (a daemon busy setting up
    captures on a loaded machine can take seconds)."""
    if not os.path.exists(path):
        raise not_running(path)
    if not os.access(path, os.R_OK | os.W_OK):
        raise CliError(f"permission denied on {path}: run as root or as a member of the `deepctx` group", 4)
    if not listening(path):
        raise not_running(path)
    channel = grpc.insecure_channel(f"unix://{path}", options=[("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)])
    try:
        grpc.channel_ready_future(channel).result(timeout=timeout_s)
    except grpc.FutureTimeoutError:
        raise not_answering(path, timeout_s) from None
    return pb_grpc.ProfilerStub(channel)


def rpc_error(e: grpc.RpcError, path: str, streaming: bool = False) -> CliError:
    """streaming: the daemon had answered on this call already (a capture's progress came), so a lost
    connection is the daemon going away mid-capture, not a daemon that is not running."""
    code = e.code() if hasattr(e, "code") else None
    if code == grpc.StatusCode.UNAVAILABLE and streaming:
        return CliError(f"deepctxd closed the connection on {path} before the profile came (it stopped or "
                        f"restarted): see its log (`journalctl -u deepctxd`)", status=3)
    if code == grpc.StatusCode.UNAVAILABLE:
        return not_running(path)
    details = e.details() if hasattr(e, "details") else str(e)
    return CliError(details or str(code), status=1)
