"""deepctxd: the deepctx profiling daemon."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys

from deepctx.daemon import config as config_mod
from deepctx.daemon import logs, native_heap
from deepctx.host.signals import Interrupt, wait_in_slices

log = logging.getLogger("deepctx.daemon")


def build_parser() -> argparse.ArgumentParser:
    """Flags override the config file's keys of the same name; a flag not given leaves the file's value (so
    each default below is the config's)."""
    cfg = config_mod.Config()
    p = argparse.ArgumentParser(
        prog="deepctxd", description="deepctx profiling daemon (runs as root)",
        epilog=f"Every setting is a key of the TOML config file ({config_mod.DEFAULT_CONFIG}, or --config): "
               "socket, log_level, log_format, log_file, default_sample_hz, max_sample_hz, max_duration_s, "
               "max_sessions, max_sessions_per_user, store_path, continuous, metrics_address, clickhouse_url and "
               "more; README.md's \"deepctxd settings\" section lists them all with their defaults. Flags "
               "override the file.")
    p.add_argument("--config", help=f"TOML config file (default {config_mod.DEFAULT_CONFIG} if present)")
    p.add_argument("--socket", help=f"Unix socket to serve on (default $DEEPCTX_SOCKET or {config_mod.DEFAULT_SOCKET})")
    p.add_argument("--foreground", action="store_true",
                   help="stay in the foreground, logging to stderr (use this under systemd); "
                        "without it deepctxd detaches once it serves and logs to log_file")
    p.add_argument("--log-level", choices=["debug", "info", "warning", "error"],
                   help=f"least severe log record written (config key log_level; default {cfg.log_level})")
    p.add_argument("--log-format", choices=["json", "text"],
                   help=f"json: one object per line; text: for people (config key log_format; default "
                        f"{cfg.log_format})")
    p.add_argument("--log-file", help=f"log file when detached (config key log_file; default {cfg.log_file})")
    p.add_argument("--default-sample-hz", type=int, metavar="HZ",
                   help=f"CPU samples per second of a capture that names no rate (config key default_sample_hz; "
                        f"default {cfg.default_sample_hz}, at most max_sample_hz, {cfg.max_sample_hz})")
    p.add_argument("--max-duration", type=float, dest="max_duration_s", metavar="S",
                   help=f"longest capture a client may ask for, in seconds (config key max_duration_s; default "
                        f"{cfg.max_duration_s:g})")
    p.add_argument("--max-sessions", type=int, metavar="N",
                   help=f"captures at once; root's own attach is served beyond it (config key max_sessions; "
                        f"default {cfg.max_sessions})")
    p.add_argument("--continuous", action="store_true", default=None,
                   help="profile every GPU process by itself, in windows kept in the window store (config key "
                        "continuous; default off)")
    p.add_argument("--prewarm", action=argparse.BooleanOptionalAction, default=None, dest="prewarm_programs",
                   help="compile and load the common BPF programs, and build the unwind tables of the "
                        "interpreter and the C/C++ runtime libraries, as the daemon starts, so the first capture "
                        "only attaches (config key prewarm_programs; default on); --no-prewarm compiles each "
                        "program and builds each table when a capture first needs it")
    p.add_argument("--print-bpf", action="store_true",
                   help="print the BPF program an attach compiles (with its settings) and exit")
    return p


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    return build_parser().parse_args(argv)


def _daemonize(log_file: str) -> int:
    """Detaches (double fork); the parent waits until the child serves or fails and exits with that.
    Returns the write end of the readiness pipe in the child."""
    r, w = os.pipe()
    if os.fork() > 0:
        os.close(w)
        answer = b""
        while chunk := os.read(r, 4096):
            answer += chunk
        if answer.startswith(b"ok"):
            print(answer[2:].decode(), end="")
            os._exit(0)
        print(f"deepctxd: {answer.decode() or 'failed to start'}", file=sys.stderr)
        os._exit(1)
    os.close(r)
    os.setsid()
    if os.fork() > 0:
        os._exit(0)
    os.makedirs(os.path.dirname(log_file), exist_ok=True)
    out = os.open(log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o640)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(out, 1)
    os.dup2(out, 2)
    return w


def main(argv: list[str] | None = None) -> int:
    native_heap.tune()
    args = parse_args(argv)
    overrides = {
        "socket": args.socket, "log_level": args.log_level, "log_format": args.log_format,
        "log_file": args.log_file,
        "default_sample_hz": args.default_sample_hz, "max_duration_s": args.max_duration_s,
        "max_sessions": args.max_sessions, "continuous": args.continuous,
        "prewarm_programs": args.prewarm_programs,
    }
    try:
        cfg = config_mod.load(args.config, overrides)
    except config_mod.ConfigError as e:
        print(f"deepctxd: {e}", file=sys.stderr)
        return 2
    if args.print_bpf:
        from deepctx.probes.compose import render
        from deepctx.probes.cpu_sampler import CpuSampler

        print(render([CpuSampler(cfg.default_sample_hz)]))
        return 0
    if os.geteuid() != 0:
        print("deepctxd: must run as root (it loads BPF programs and reads other processes' memory)",
              file=sys.stderr)
        return 1
    ready_fd = -1
    if not args.foreground:
        ready_fd = _daemonize(cfg.log_file)
    logs.setup(cfg.log_level, cfg.log_format)
    # Imported after the fork: gRPC's threads do not survive one.
    from deepctx.daemon import self_memory
    from deepctx.daemon.self_profile import start_from_env
    from deepctx.daemon.server import DaemonServer, SocketInUse

    profiler = start_from_env()
    self_memory.start_from_env()  # DEEPCTX_SELF_MEMORY: SIGUSR2 writes where the daemon's heap is
    server = DaemonServer(cfg)
    try:
        server.start()
    except (SocketInUse, OSError) as e:
        log.error(str(e))
        if ready_fd >= 0:
            os.write(ready_fd, str(e).encode())
        else:
            print(f"deepctxd: {e}", file=sys.stderr)
        return 1
    if ready_fd >= 0:
        os.write(ready_fd, f"ok deepctxd {os.getpid()} serving on {cfg.socket}, logging to {cfg.log_file}\n".encode())
        os.close(ready_fd)
    # the handlers only note the signal (host/signals.py: a handler that set an Event could deadlock inside the
    # main thread's own wait on it), and the main thread looks for the note a slice at a time
    stop = Interrupt()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    wait_in_slices(stop)
    log.info("signal received, detaching probes", extra={"signal": signal.Signals(stop.signum).name})
    server.stop()
    if profiler is not None:
        profiler.stop()
    if server.compiling_ahead():
        # A compile in flight is inside LLVM: the process's exit would run LLVM's and bcc's static destructors
        # under it (deepctxd once died of SIGSEGV so, stopped a second after it started). Everything is
        # detached and the socket is gone: the process ends here, without them.
        log.info("exiting while programs compile ahead (left unfinished)")
        logging.shutdown()
        os._exit(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
