"""deepctxd settings: defaults < TOML file < DEEPCTX_SOCKET < flags, with clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from deepctx.daemon.config import DEFAULT_SOCKET, ConfigError, load


def test_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("DEEPCTX_SOCKET", raising=False)
    empty = tmp_path / "empty.toml"
    empty.write_text("")
    cfg = load(str(empty), {})
    assert cfg.socket == DEFAULT_SOCKET
    assert cfg.default_sample_hz == 99
    assert (cfg.host_cache_bytes, cfg.symbol_cache_files) == (64 << 20, 512)
    (tmp_path / "cache.toml").write_text("host_cache_bytes = 268435456\n")
    assert load(str(tmp_path / "cache.toml"), {}).host_cache_bytes == 256 << 20


def test_file_then_env_then_flags(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    f = tmp_path / "d.toml"
    f.write_text('socket = "/tmp/from-file.sock"\ndefault_sample_hz = 49\nmax_duration_s = 60\n')
    monkeypatch.delenv("DEEPCTX_SOCKET", raising=False)
    cfg = load(str(f), {})
    assert (cfg.socket, cfg.default_sample_hz, cfg.max_duration_s) == ("/tmp/from-file.sock", 49, 60.0)
    monkeypatch.setenv("DEEPCTX_SOCKET", "/tmp/from-env.sock")
    assert load(str(f), {}).socket == "/tmp/from-env.sock"
    cfg = load(str(f), {"socket": "/tmp/from-flag.sock", "default_sample_hz": 19, "max_sessions": None})
    assert (cfg.socket, cfg.default_sample_hz, cfg.max_sessions) == ("/tmp/from-flag.sock", 19, 16)


@pytest.mark.parametrize(("text", "message"), [
    ("bogus = 1\n", "unknown setting 'bogus'"),
    ('default_sample_hz = "fast"\n', "default_sample_hz must be a int"),
    ("default_sample_hz = 0\n", "default_sample_hz must be within"),
    ("max_duration_s = -5\n", "max_duration_s must be positive"),
    ('log_format = "xml"\n', "log_format must be 'json' or 'text'"),
    ("socket = \n", "Invalid value"),
    ('[[handoff_points]]\nlibrary = "x"\nsymbol = "y"\n', "needs library, symbol and label"),
    ('[[handoff_points]]\nlibrary = "x"\nsymbol = "y"\nlabel = "z"\nrole = "sometimes"\n', "role must be one of"),
    ('[[handoff_points]]\nlibrary = "x"\nsymbol = "y"\nlabel = "z"\nrole = "node_run"\nnode_arg = 9\n',
     "node_arg must be within"),
    ('[[handoff_points]]\nlibrary = "x"\nsymbol = "y"\nlabel = "z"\nnode_arg = "2"\n', "integers"),
    ("autograd_nodes = 1\n", "autograd_nodes must be a bool"),
    ("max_sessions = true\n", "max_sessions must be a int"),
    ('continuous_gpu_mode = "full"\n', "continuous_gpu_mode must be 'sampled' or 'exact'"),
    ('continuous_match = "train("\n', "continuous_match is not a regular expression"),
    ("host_cache_bytes = 1000\n", "host_cache_bytes must be at least 1 MiB"),
    ("gpu_api_time_every = 6\n", "gpu_api_time_every must be a power of two"),
    ("gpu_api_time_every = 0\n", "gpu_api_time_every must be a power of two"),
])
def test_bad_config_files_are_refused_with_the_reason(tmp_path: Path, text: str, message: str) -> None:
    f = tmp_path / "d.toml"
    f.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load(str(f), {})


def test_handoff_points_with_roles_load(tmp_path: Path) -> None:
    from deepctx.probes.gpu_api import HandoffPoint

    f = tmp_path / "d.toml"
    f.write_text('autograd_nodes = false\n[[handoff_points]]\nlibrary = "^libg\\\\.so$"\nsymbol = "run*"\n'
                 'label = "[b {node}]"\nrole = "node_run"\nnode_arg = 2\nnode_seq_offset = 24\n')
    cfg = load(str(f), {})
    assert cfg.autograd_nodes is False
    assert HandoffPoint(**cfg.handoff_points[0]) == HandoffPoint("^libg\\.so$", "run*", "[b {node}]", "node_run", 2, 24)


def test_missing_explicit_config_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load(str(tmp_path / "missing.toml"), {})
