"""deepctx run [--] CMD...: start a command with the device-activity agents and profile it, device times
included from its first kernel.

The command runs with CUDA_INJECTION64_PATH naming the CUPTI agent and ROCP_TOOL_LIBRARIES naming the
rocprofiler-sdk one (each where it is built). When a process of it initializes CUDA or HIP, the agent sends
its pid over a socket this command passes down, and waits. The first such process is profiled: the CLI asks
deepctxd to attach (the agent is loaded by then, so the daemon finds it), and once the capture runs it tells
the agent to go on. Later processes are told to go on at once. The capture ends when that process exits (or
after --duration); the command's exit status is this command's."""

from __future__ import annotations

import argparse
import array
import os
import selectors
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
from typing import Any

import grpc
from rich.console import Console

from deepctx.cli.client import CliError, connect, rpc_error
from deepctx.cli.commands.attach import (
    CALL_PATH_MODES,
    PYTHON_MODES,
    add_duty_arguments,
    attach_request,
    call_path_mode,
    check_duty,
    check_rate,
    emit,
)
from deepctx.cli.escape import literal
from deepctx.cli.pc_args import add_pc_arguments, check_pc_arguments, pc_environment
from deepctx.cli.view_args import add_fold_arguments
from deepctx.host.gpu_runtimes import INJECTION_VARS
from deepctx.profiles.document import to_doc
from deepctx.proto.v1 import deepctx_pb2 as pb

GO, SKIP = b"g", b"s"
AGENT_WAIT_MS = 120_000  # how long a process waits in cuInit for the daemon to attach


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="start a command with the GPU activity agent and profile it",
                       description="Start a command with deepctx's CUPTI agent and profile the first process "
                                   "of it that uses CUDA, with exact device times from its first kernel.")
    p.add_argument("--duration", type=float, default=0.0,
                   help="seconds to capture at most (default: until the process exits, within the daemon's "
                        "max_duration_s)")
    p.add_argument("--rate", type=int, default=0, dest="sample_hz", help="CPU samples per second (default: the daemon's, 99)")
    p.add_argument("--python", choices=sorted(PYTHON_MODES), default="auto",
                   help="walk Python frames: auto (when the command runs CPython; the default), on (required), off")
    p.add_argument("--mode", choices=sorted(CALL_PATH_MODES),
                   help="GPU calls: the call path of every call (exact) or of a fraction (sampled, the default; "
                        "--trace captures in exact mode unless told otherwise)")
    p.add_argument("--trace", action="store_true",
                   help="record every API call and device record; with -o FILE, write a Chrome/Perfetto trace")
    add_duty_arguments(p)
    add_pc_arguments(p)
    p.add_argument("--format", choices=["tree", "json"], default="tree",
                   help="tree: the top-down tree on the terminal (default); json: the profile document (docs/formats.md)")
    p.add_argument("-o", "--output", help="write the profile (JSON; Chrome trace with --trace) here")
    p.add_argument("--min-percent", type=float, default=0.5, help="tree: hide nodes below this share of the total, in percent (default 0.5)")
    p.add_argument("--depth", type=int, default=64, help="tree: deepest level shown (default 64)")
    add_fold_arguments(p)
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.add_argument("--agent", help="the CUPTI agent library (default: the one deepctx ships)")
    p.add_argument("--no-compile-trace", action="store_true",
                   help="do not set TORCH_TRACE and XLA_FLAGS' --xla_dump_to for the command (by default, where they "
                        "are unset, a private directory while it runs: the kernels of torch.compile and JAX then "
                        "carry the model lines they came from, and torch.compile's recompiles and graph breaks "
                        "their causes)")
    p.add_argument("cmd", nargs=argparse.REMAINDER, metavar="CMD", help="the command (after --)")
    p.set_defaults(run=run)


def agent_env(flag: str | None) -> dict[str, str]:
    """The injection variables naming the agents (CUPTI, rocprofiler-sdk); --agent replaces the CUPTI one."""
    if flag and not os.path.isfile(flag):
        raise CliError(f"--agent {flag}: no such file", 2)
    from deepctx.host.gpu_agents import injection_env

    try:
        return injection_env(os.path.abspath(flag) if flag else None)
    except ValueError as e:
        raise CliError(str(e), 2) from None


UCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


def receive_pid(sock: socket.socket) -> tuple[int, socket.socket, int | None] | None:
    """One agent's message: the pid it names, its end of a private socket pair, and the sender's pid as the
    kernel tells it (SO_PASSCRED on sock; None without). None at end of stream."""
    fds = array.array("i")
    try:
        data, anc, _, _ = sock.recvmsg(64, socket.CMSG_SPACE(fds.itemsize * 4) + socket.CMSG_SPACE(UCRED.size))
    except ConnectionResetError:
        return None
    if not data:
        return None
    sender = None
    for level, kind, payload in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[:len(payload) - len(payload) % fds.itemsize])
        elif level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS and len(payload) >= UCRED.size:
            sender = UCRED.unpack(payload[:UCRED.size])[0]
    for extra in fds[1:]:
        os.close(extra)
    if not fds:
        return None
    return int.from_bytes(data[:4], "little", signed=True), socket.socket(fileno=fds[0]), sender


def parent_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            return next((int(line.split()[1]) for line in f if line.startswith("PPid:")), None)
    except (OSError, ValueError):
        return None


def refusal(pid: int, sender: int | None, command_pid: int) -> str | None:
    """Why a pid sent over DEEPCTX_NOTIFY_FD is not profiled (None: it is). Every process of the command
    can write there, so it names only itself (the kernel's sender pid) and must descend from the command:
    the pid is bound with a pidfd first, its parents walked, and the pidfd checked again after, so a pid
    reused meanwhile by another process does not pass."""
    if sender is not None and sender != pid:
        return f"process {sender} sent pid {pid}, not its own"
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        return f"process {pid} does not exist"
    try:
        p: int | None = pid
        for _ in range(4096):  # a chain of parents is finite; the bound keeps a racing one from looping
            if p is None or p <= 1 or p == command_pid:
                break
            p = parent_of(p)
        if p != command_pid:
            return f"process {pid} is not a process of the command"
        signal.pidfd_send_signal(pidfd, 0)  # still the process walked (not exited, so its pid not reused)
    except ProcessLookupError:
        return f"process {pid} has exited"
    except PermissionError:
        pass  # alive, of another user (a setuid program of the command): the walk above stands
    finally:
        os.close(pidfd)
    return None


def reply(channel: socket.socket, what: bytes) -> None:
    try:
        channel.send(what)
    except OSError:
        pass  # the process is gone
    finally:
        channel.close()


class Capture:
    """The daemon's capture of one process, in a thread: the stream's progress says when the probes are
    live (then the waiting agent is released), the last message is the profile."""

    def __init__(self, stub: Any, req: pb.AttachRequest, socket_path: str, on_live: Any) -> None:
        self.stub = stub
        self.req = req
        self.socket_path = socket_path
        self.on_live = on_live
        self.profile: pb.Profile | None = None
        self.error: CliError | None = None
        self.thread = threading.Thread(target=self._run, name="deepctx-run-capture", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        live = answered = False
        try:
            for ev in self.stub.Attach(self.req):
                answered = True
                if ev.HasField("progress"):
                    if not live and ev.progress.message == "capturing":
                        live = True
                        self.on_live()
                else:
                    self.profile = ev.profile
        except grpc.RpcError as e:
            self.error = rpc_error(e, self.socket_path, streaming=answered)
        finally:
            if not live:
                self.on_live()  # never leave the process waiting for a capture that failed


def run(args: argparse.Namespace) -> int:
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        raise CliError("nothing to run: deepctx run [options] -- CMD [ARGS...]", 2)
    check_rate(args.sample_hz)  # before the command starts
    check_pc_arguments(args)  # run always records device activity
    args.gpu_duty, args.gpu_duty_period = check_duty(args.gpu_duty, args.gpu_duty_period)  # as the request has them
    for var in INJECTION_VARS:
        if os.environ.get(var):
            raise CliError(f"{var} is already set ({os.environ[var]}): another tool injects into the GPU runtime; "
                           f"unset it to run with deepctx", 2)
    stub = connect(args.socket_path)  # fails early, before the command starts, when no daemon answers
    agents = agent_env(args.agent)
    err = Console(stderr=True)
    show = not args.quiet
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)  # the kernel names each sender (see refusal)
    env = dict(os.environ, **agents, **pc_environment(args), DEEPCTX_NOTIFY_FD=str(theirs.fileno()),
               DEEPCTX_AGENT_WAIT_MS=str(AGENT_WAIT_MS))
    compiled = None if args.no_compile_trace else compile_traces(env)
    try:
        return _run(cmd, env, theirs, ours, stub, args, err, show)
    finally:
        if compiled is not None:
            shutil.rmtree(compiled, ignore_errors=True)


def compile_traces(env: dict[str, str]) -> str | None:
    """What compiled code's kernels are traced back by, in a private directory removed after the run, where the
    command does not set it itself: torch.compile's structured trace (TORCH_TRACE) and XLA's optimized modules
    (XLA_FLAGS' --xla_dump_to, as text). deepctxd reads them while the command runs (host/compiled_sources.py)."""
    torch_set = bool(env.get("TORCH_TRACE"))
    xla_set = "--xla_dump_to" in env.get("XLA_FLAGS", "")
    if torch_set and xla_set:
        return None
    base = tempfile.mkdtemp(prefix="deepctx-compiled-")
    if not torch_set:
        env["TORCH_TRACE"] = os.path.join(base, "torch")
    if not xla_set:
        env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} --xla_dump_to={os.path.join(base, 'xla')} " \
                           "--xla_dump_hlo_as_text".strip()
    return base


def _run(cmd: list[str], env: dict[str, str], theirs: socket.socket, ours: socket.socket, stub: Any,
         args: argparse.Namespace, err: Console, show: bool) -> int:
    try:
        proc = subprocess.Popen(cmd, env=env, pass_fds=(theirs.fileno(),))
    except OSError as e:
        raise CliError(f"cannot run {cmd[0]}: {e.strerror}", 127) from None
    theirs.close()
    capture: Capture | None = None
    try:
        capture = wait_and_profile(proc, ours, stub, args, err if show else None)
    except KeyboardInterrupt:
        proc.terminate()
        raise
    finally:
        ours.close()
    rc = proc.wait()
    if capture is None:
        if args.pc_sampling:  # said with --quiet too: the user asked for GPU samples and there was no GPU work
            err.print("deepctx: error: --pc-sampling: the command never initialized CUDA (no GPU, or no GPU work): "
                      "no PC samples", style="red", markup=False)
            return rc or 2
        if show:
            err.print("[yellow]warning:[/] the command never initialized CUDA or HIP: nothing was profiled")
        return rc
    capture.thread.join()
    if capture.error is not None:
        raise capture.error
    if capture.profile is None:
        raise CliError("the daemon ended the capture without a profile")
    render(to_doc(capture.profile), args, err)
    return rc


def wait_and_profile(proc: subprocess.Popen, ours: socket.socket, stub: Any, args: argparse.Namespace,
                     err: Console | None) -> Capture | None:
    """Answers the agents of the command's processes until the command exits; profiles the first."""
    capture: Capture | None = None
    sel = selectors.DefaultSelector()
    sel.register(ours, selectors.EVENT_READ)
    pidfd = os.pidfd_open(proc.pid)
    sel.register(pidfd, selectors.EVENT_READ)
    try:
        while True:
            for key, _ in sel.select():
                if key.fileobj is not ours:
                    return capture  # the command exited
                got = receive_pid(ours)
                if got is None:
                    sel.unregister(ours)
                    continue
                pid, channel, sender = got
                if capture is not None:
                    reply(channel, SKIP)
                    continue
                why = refusal(pid, sender, proc.pid)
                if why:
                    reply(channel, SKIP)
                    (err or Console(stderr=True)).print(literal(  # shown with --quiet too
                        f"deepctx: warning: {why}: ignored (only the command's own processes are profiled)",
                        style="yellow"), soft_wrap=True)
                    continue
                if err is not None:
                    err.print(f"deepctx: process {pid} initialized CUDA: profiling it")
                req = attach_request(pid, args.duration or 0.0, sample_hz=args.sample_hz, python=args.python,
                                     gpu="on", mode=call_path_mode(args), gpu_activity="on", trace=args.trace,
                                     gpu_duty=args.gpu_duty, gpu_duty_period_s=args.gpu_duty_period)
                if not req.duration_s:
                    req.duration_s = max_duration(stub)
                capture = Capture(stub, req, args.socket_path, lambda ch=channel: reply(ch, GO))
    finally:
        os.close(pidfd)
        sel.close()


def max_duration(stub: Any) -> float:
    try:
        return float(stub.Status(pb.StatusRequest()).max_duration_s) or 3600.0
    except grpc.RpcError:
        return 3600.0


def render(doc: dict, args: argparse.Namespace, err: Console) -> None:
    emit(doc, args, err)
    sys.stdout.flush()
