"""deepctxd's settings: defaults, then the TOML config file, then command-line flags."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import tomllib

DEFAULT_SOCKET = "/run/deepctx/deepctxd.sock"
DEFAULT_CONFIG = "/etc/deepctx/deepctxd.toml"
# A duty cycle's period: switching the GPU probes on and off takes about 0.1 s each way on a GPU host
MIN_DUTY_PERIOD_S, MAX_DUTY_PERIOD_S = 0.5, 600.0
MIN_DUTY_ON_S = 0.1  # the least time on per period a capture may ask for


@dataclass
class Config:
    socket: str = DEFAULT_SOCKET
    # Everyone may connect: deepctxd decides per request from the caller's credentials (docs/security.md).
    socket_mode: int = 0o666
    max_connections: int = 256  # open client connections at once
    max_connections_per_user: int = 16  # ... per user outside root and the `deepctx` group
    # RPCs in progress at once (streams held open included): per user but root, and for all of them
    # together; root is never counted and always finds a free worker (daemon/rpc_limits.py)
    max_rpcs_per_user: int = 8
    max_user_rpcs: int = 32
    log_level: str = "info"
    log_format: str = "json"  # "json" (one object per line) or "text"
    log_file: str = "/var/log/deepctx/deepctxd.log"  # used when deepctxd detaches (no --foreground)
    default_sample_hz: int = 99
    max_sample_hz: int = 10_000
    max_duration_s: float = 3600.0
    max_sessions: int = 16  # captures at once (root's own attach requests are served beyond it)
    # captures of one uid at once (its attach requests and the continuous captures of its processes); root's
    # are not counted
    max_sessions_per_user: int = 4
    stack_map_entries: int = 16384
    count_map_entries: int = 65536
    # the host cache (host/file_cache.py): what files say (symbol tables, unwind tables without a copy on
    # disk, Python layouts), per build id or content hash, least recently used out above either bound
    host_cache_bytes: int = 64 << 20
    symbol_cache_files: int = 512  # files the host cache holds at most
    python_max_depth: int = 128
    # sampled mode: call paths captured per second (counts stay exact), at most: a process's calls get one every
    # CPUs / gpu_sampled_paths_per_s seconds (its own interval: processes on one program do not share it)
    gpu_sampled_paths_per_s: int = 2000
    # exact mode, where the kernel has uprobe sessions (Linux 6.13+): a launch's API time is measured on the first
    # call of each call path and every gpu_api_time_every-th after it, and scaled to all; the others skip their
    # return probe (a power of two; 1: every launch timed, as on older kernels). Counts and paths stay exact.
    gpu_api_time_every: int = 8
    # extra calls that hand GPU work to worker threads: [{library = "regex", symbol = "name or prefix*",
    # label = "[my pool]"}] (PyTorch's autograd engine is built in); role = "node_created" / "node_run"
    # for work items numbered at creation (docs/cross-thread.md)
    handoff_points: list = field(default_factory=list)
    # exact mode: charge each backward node's kernels to the forward line that created the node (costs one
    # call path capture per autograd node created); false: backward work stays under the backward() line
    autograd_nodes: bool = True
    # With the target's CUPTI agent reporting: who takes the call path of launches and async copies/sets.
    # "auto" / "on": the agent (sampled mode: it announces a sample of the calls, no trap per call; exact
    # mode: one probe per call in its callback, which also times the call, instead of the uprobes' four
    # traps); "off": the uprobes always (docs/device-activity.md).
    agent_calls: str = "auto"
    # `--gpu-duty` of one capture: the GPU probes and device activity are on for that share of each period
    gpu_duty_period_s: float = 2.0
    native_unwind: bool = True  # walk native stacks with .eh_frame tables (false: frame pointers only)
    # GPU call paths of the calls the GEMM and convolution libraries make (cuBLAS, cuDNN, ...:
    # host/gpu_runtimes.CONTINUED_LIBRARY): where their frame-pointer walk is lost in code without frame
    # pointers, the .eh_frame walk takes over, up to 24 frames, so PyTorch's GEMMs reach their operator. Only
    # those calls: continuing every launch cost the H200's launch-bound PyTorch loop, whose every launch loses
    # its walk, about 21% more (BENCHMARKS.md). Needs native_unwind
    gpu_native_continue: bool = True
    # `deepctx attach --gpu-activity --pc-sampling`: PC sampling turned on in a running process's contexts by the
    # injected agent. On since it passed on an H100 (2026-12-06, tests/gpu/test_attach_pc_sampling.py, once the
    # agent enabled PC sampling after the activity kinds); off, such a request is refused with a pointer to
    # `deepctx run --pc-sampling`
    attach_pc_sampling: bool = True
    # compile and load the programs most captures take as the daemon starts (in the background): the first
    # capture of a Python process, with or without a GPU runtime, then only attaches (probes/programs.py);
    # before them, build the unwind tables of the interpreter and C/C++ runtime libraries the daemon maps
    # itself (service.runtime_files), which nearly every GPU job maps too
    prewarm_programs: bool = True
    # with prewarm_programs: the unwind tables of this many files most recently used on this host (recorded in
    # cache_dir/unwind) are read from the disk cache as the daemon starts, in the background, and their rows
    # placed in the daemon's shared arrays (as many as fit with room left for new files): the first process of
    # those files then reads no table, as a later one (#30: 0.9 CPU-s for a restarted daemon's first PyTorch
    # process). 0: off (the first process reads its tables)
    prewarm_unwind_files: int = 128
    # with prewarm_programs: the symbol tables (and interpreter layouts) of this many files captures most recently
    # asked symbols of on this host (recorded in cache_dir/symbols: the GPU runtimes, libtorch for the hand-off
    # points, the interpreter) are built into the host cache as the daemon starts, in the background, after the
    # unwind rows: the first process of those files then builds none (#30). 0: off
    prewarm_symbol_files: int = 32
    # unwind tables kept by a hash of the CFI they are built from; compiled BPF programs (cache_programs)
    cache_dir: str = "/var/cache/deepctx"
    # keep each compiled program's code in cache_dir/programs (probes/program_cache.py): a daemon that starts
    # again compiles only the programs' maps (0.5 s instead of 2.2 s on the CI VM) before the verifier loads them
    cache_programs: bool = True
    # caps on a target's files (host/file_limits.py): one section's bytes once decompressed, one file's
    # unwind table rows; a file over either is unwound with frame pointers, and the profile says why
    max_decompressed_bytes: int = 256 << 20
    max_unwind_rows: int = 1 << 24
    # Continuous mode (deepctxd --continuous): every process that loads a CUDA/HIP library is profiled in
    # windows kept in the window store.
    continuous: bool = False
    continuous_window_s: float = 10.0
    continuous_sample_hz: int = 19
    continuous_scan_s: float = 2.0  # how often new GPU processes are looked for
    # share of each window the GPU API probes are attached (0.02: 0.2 s of 10 s); the window's counts are
    # scaled up from that share. 1.0 keeps them attached and the counts exact, at the uprobes' full cost.
    continuous_gpu_duty: float = 0.02
    # GPU call paths while attached: "sampled" (every count exact, a sample of the call paths) or "exact"
    # (every call's path, at exact mode's cost per call)
    continuous_gpu_mode: str = "sampled"
    # Only GPU processes whose command line matches this regular expression (Python's re.search) are
    # profiled; "" takes every one. For a host shared by jobs that must not be watched, or by test daemons.
    continuous_match: str = ""
    # The window store of continuous mode (docs/fleet.md); "" keeps none.
    store_path: str = "/var/lib/deepctx/windows.db"
    store_max_mb: int = 512  # the database file's size; the oldest windows go first
    store_max_age_s: float = 7 * 24 * 3600.0  # windows older than this go
    # Prometheus /metrics listener, "HOST:PORT" (e.g. "127.0.0.1:9464"); "" = off (docs/metrics.md).
    metrics_address: str = ""
    # /metrics labels each process with its executable's name; true: with its whole command line, whose
    # arguments (tokens included) everyone who reaches the endpoint then reads
    metrics_command_lines: bool = False
    # Fleet export of every stored window (docs/fleet.md); "" = off.
    clickhouse_url: str = ""  # ClickHouse's HTTP interface, e.g. "http://clickhouse:8123"
    clickhouse_database: str = "deepctx"
    pyroscope_url: str = ""  # a Pyroscope-compatible server's base URL (POST /ingest, pprof)
    pyroscope_app: str = "deepctx"  # application name of the pushed profiles
    fleet_queue_windows: int = 1000  # windows waiting for export; more are dropped and counted


class ConfigError(ValueError):
    pass


def default_socket() -> str:
    return os.environ.get("DEEPCTX_SOCKET") or DEFAULT_SOCKET


def load(path: str | None, overrides: dict[str, Any]) -> Config:
    """Defaults < config file < DEEPCTX_SOCKET < flags. A missing default config file is fine; a missing
    file named explicitly, an unknown key or a wrong type is an error."""
    cfg = Config()
    values: dict[str, Any] = {}
    file = path or DEFAULT_CONFIG
    if Path(file).exists():
        try:
            values = tomllib.loads(Path(file).read_text())
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"{file}: {e}") from e
    elif path:
        raise ConfigError(f"config file {path} does not exist")
    known = {f.name: f for f in fields(Config)}
    for key, value in values.items():
        if key not in known:
            raise ConfigError(f"{file}: unknown setting {key!r} (known: {', '.join(sorted(known))})")
        _set(cfg, key, value, file)
    if os.environ.get("DEEPCTX_SOCKET"):
        cfg.socket = os.environ["DEEPCTX_SOCKET"]
    for key, value in overrides.items():
        if value is not None:
            _set(cfg, key, value, "command line")
    _validate(cfg)
    return cfg


def _validate_handoff(p: Any) -> None:
    from deepctx.probes.gpu_api import HandoffPoint

    strings, ints = {"library", "symbol", "label", "role"}, {"node_arg", "node_seq_offset"}
    if not isinstance(p, dict) or not {"library", "symbol", "label"} <= set(p) <= strings | ints or not all(
            (isinstance(v, str) and v) if k in strings else (isinstance(v, int) and not isinstance(v, bool))
            for k, v in p.items()):
        raise ConfigError("each handoff_points entry needs library, symbol and label (strings), and may set role "
                          "(string), node_arg and node_seq_offset (integers)")
    try:
        HandoffPoint(**p)
    except ValueError as e:
        raise ConfigError(f"handoff_points entry {p.get('symbol')!r}: {e}") from None


def _set(cfg: Config, key: str, value: Any, origin: str) -> None:
    current = getattr(cfg, key)
    if isinstance(current, float) and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    # bool is an int in Python: `max_sessions = true` must not pass for a number, nor 1 for a switch
    if isinstance(value, bool) != isinstance(current, bool) or not isinstance(value, type(current)):
        raise ConfigError(f"{origin}: {key} must be a {type(current).__name__}, not {value!r}")
    setattr(cfg, key, value)


def _validate(cfg: Config) -> None:
    if cfg.log_format not in ("json", "text"):
        raise ConfigError(f"log_format must be 'json' or 'text', not {cfg.log_format!r}")
    if cfg.log_level.lower() not in ("debug", "info", "warning", "error"):
        raise ConfigError(f"log_level must be debug, info, warning or error, not {cfg.log_level!r}")
    if not 1 <= cfg.default_sample_hz <= cfg.max_sample_hz:
        raise ConfigError(f"default_sample_hz must be within [1, max_sample_hz={cfg.max_sample_hz}]")
    if cfg.max_duration_s <= 0:
        raise ConfigError("max_duration_s must be positive")
    if cfg.max_sessions < 1 or cfg.max_sessions_per_user < 1:
        raise ConfigError("max_sessions and max_sessions_per_user must be at least 1")
    if cfg.gpu_sampled_paths_per_s < 1:
        raise ConfigError("gpu_sampled_paths_per_s must be at least 1")
    if cfg.gpu_api_time_every < 1 or cfg.gpu_api_time_every & (cfg.gpu_api_time_every - 1):
        raise ConfigError(f"gpu_api_time_every must be a power of two (1, 2, 4, 8, ...), not {cfg.gpu_api_time_every}")
    for p in cfg.handoff_points:
        _validate_handoff(p)
    if cfg.python_max_depth < 1 or cfg.python_max_depth > 1024:
        raise ConfigError("python_max_depth must be within [1, 1024]")
    if cfg.continuous_window_s < 1 or cfg.continuous_scan_s <= 0:
        raise ConfigError("continuous_window_s must be at least 1 and continuous_scan_s positive")
    if not MIN_DUTY_PERIOD_S <= cfg.gpu_duty_period_s <= MAX_DUTY_PERIOD_S:
        raise ConfigError(f"gpu_duty_period_s must be within [{MIN_DUTY_PERIOD_S:g}, {MAX_DUTY_PERIOD_S:g}] seconds")
    if not 0 < cfg.continuous_gpu_duty <= 1:
        raise ConfigError("continuous_gpu_duty must be within (0, 1]")
    if cfg.continuous_gpu_mode not in ("sampled", "exact"):
        raise ConfigError(f"continuous_gpu_mode must be 'sampled' or 'exact', not {cfg.continuous_gpu_mode!r}")
    if cfg.continuous_match:
        try:
            re.compile(cfg.continuous_match)
        except re.error as e:
            raise ConfigError(f"continuous_match is not a regular expression: {e}") from e
    if not 1 <= cfg.continuous_sample_hz <= cfg.max_sample_hz:
        raise ConfigError(f"continuous_sample_hz must be within [1, max_sample_hz={cfg.max_sample_hz}]")
    _validate_service(cfg)


def _validate_service(cfg: Config) -> None:
    if not 0 <= cfg.socket_mode <= 0o777:
        raise ConfigError(f"socket_mode must be a file mode within [0, 0o777], not {cfg.socket_mode:#o}")
    if cfg.max_connections < 1 or cfg.max_connections_per_user < 1:
        raise ConfigError("max_connections and max_connections_per_user must be at least 1")
    if not 1 <= cfg.max_rpcs_per_user <= cfg.max_user_rpcs:
        raise ConfigError("max_rpcs_per_user must be at least 1 and at most max_user_rpcs")
    if cfg.max_decompressed_bytes < 1 << 20 or cfg.max_unwind_rows < 1 << 16:
        raise ConfigError("max_decompressed_bytes must be at least 1 MiB and max_unwind_rows at least 65536")
    if cfg.host_cache_bytes < 1 << 20 or cfg.symbol_cache_files < 1:
        raise ConfigError("host_cache_bytes must be at least 1 MiB and symbol_cache_files at least 1")
    if not 0 <= cfg.prewarm_unwind_files <= 4096:
        raise ConfigError("prewarm_unwind_files must be within [0, 4096] (0: off)")
    if not 0 <= cfg.prewarm_symbol_files <= 512:
        raise ConfigError("prewarm_symbol_files must be within [0, 512] (0: off)")
    if cfg.store_max_mb < 1:
        raise ConfigError("store_max_mb must be at least 1")
    if cfg.store_max_age_s <= 0:
        raise ConfigError("store_max_age_s must be positive")
    if cfg.metrics_address:
        host, _, port = cfg.metrics_address.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(f"metrics_address must be HOST:PORT, not {cfg.metrics_address!r}")
    for key in ("clickhouse_url", "pyroscope_url"):
        url = getattr(cfg, key)
        if url and not url.startswith(("http://", "https://")):
            raise ConfigError(f"{key} must be an http:// or https:// URL, not {url!r}")
    if cfg.fleet_queue_windows < 1:
        raise ConfigError("fleet_queue_windows must be at least 1")
