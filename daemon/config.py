"""deepctxd's settings: defaults, then the TOML config file, then command-line flags."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import tomllib

DEFAULT_SOCKET = "/run/deepctx/deepctxd.sock"
DEFAULT_CONFIG = "/etc/deepctx/deepctxd.toml"


@dataclass
class Config:
    socket: str = DEFAULT_SOCKET
    socket_mode: int = 0o660  # owner root; group `deepctx` when that group exists
    log_level: str = "info"
    log_format: str = "json"  # "json" (one object per line) or "text"
    log_file: str = "/var/log/deepctx/deepctxd.log"  # used when deepctxd detaches (no --foreground)
    default_sample_hz: int = 99
    max_sample_hz: int = 10_000
    max_duration_s: float = 3600.0
    max_sessions: int = 16
    stack_map_entries: int = 16384
    count_map_entries: int = 65536
    symbol_cache_files: int = 512
    python_max_depth: int = 128
    gpu_sampled_paths_per_s: int = 2000  # sampled mode: call paths captured per second (counts stay exact)
    # extra calls that hand GPU work to worker threads: [{library = "regex", symbol = "name or prefix*",
    # label = "[my pool]"}] (PyTorch's autograd engine is built in)
    handoff_points: list = field(default_factory=list)
    native_unwind: bool = True  # walk native stacks with .eh_frame tables (false: frame pointers only)
    cache_dir: str = "/var/cache/deepctx"  # unwind tables kept by build id


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


def _set(cfg: Config, key: str, value: Any, origin: str) -> None:
    current = getattr(cfg, key)
    if isinstance(current, bool) or not isinstance(value, type(current)):
        if isinstance(current, float) and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        elif not (isinstance(current, bool) and isinstance(value, bool)):
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
    if cfg.max_sessions < 1:
        raise ConfigError("max_sessions must be at least 1")
    if cfg.gpu_sampled_paths_per_s < 1:
        raise ConfigError("gpu_sampled_paths_per_s must be at least 1")
    for p in cfg.handoff_points:
        if not isinstance(p, dict) or set(p) != {"library", "symbol", "label"} or not all(
                isinstance(v, str) and v for v in p.values()):
            raise ConfigError("each handoff_points entry needs exactly library, symbol and label (strings)")
    if cfg.python_max_depth < 1 or cfg.python_max_depth > 1024:
        raise ConfigError("python_max_depth must be within [1, 1024]")
