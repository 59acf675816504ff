"""`deepctx fleet` uses the daemon's ClickHouse account (which reads every user's windows) only for root and
the `deepctx` group; anyone else brings their own (cli/commands/fleet.py client)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from deepctx.cli.client import CliError
from deepctx.cli.commands import fleet


def args(url: str | None = None) -> argparse.Namespace:
    return argparse.Namespace(clickhouse=url, database=None)


def test_the_daemons_account_is_for_privileged_users_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "deepctxd.toml"
    cfg.write_text('clickhouse_url = "http://daemon:s3cret@clickhouse:8123"\n')
    monkeypatch.setattr(fleet, "DAEMON_CONFIG", str(cfg))
    monkeypatch.delenv("DEEPCTX_CLICKHOUSE", raising=False)
    monkeypatch.setattr(fleet, "may_use_daemon_account", lambda: False)
    with pytest.raises(CliError, match="your own ClickHouse account"):
        fleet.client(args())
    assert fleet.client(args("http://alice@clickhouse:8123")).url == "http://alice@clickhouse:8123/"
    monkeypatch.setattr(fleet, "may_use_daemon_account", lambda: True)
    assert fleet.client(args()).url == "http://daemon:s3cret@clickhouse:8123/"


def test_root_may_use_the_daemons_account(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fleet.os, "geteuid", lambda: 0)
    assert fleet.may_use_daemon_account()
    monkeypatch.setattr(fleet.os, "geteuid", lambda: 4242)
    monkeypatch.setattr(fleet.os, "getegid", lambda: 4242)
    monkeypatch.setattr(fleet.os, "getgroups", lambda: [4242])
    monkeypatch.setattr(fleet.grp, "getgrnam", lambda name: argparse.Namespace(gr_gid=999))
    assert not fleet.may_use_daemon_account()
    monkeypatch.setattr(fleet.os, "getgroups", lambda: [4242, 999])
    assert fleet.may_use_daemon_account()
