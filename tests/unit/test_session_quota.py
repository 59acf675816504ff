"""Sessions per user (#29 finding 7): root's attach requests are always served; everyone else, and every
continuous capture, counts against max_sessions and the uid's max_sessions_per_user."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from deepctx.daemon.config import Config, ConfigError, load
from deepctx.daemon.service import ProfilerService


def service(max_sessions: int, per_user: int, *uids: int) -> SimpleNamespace:
    cfg = Config(max_sessions=max_sessions, max_sessions_per_user=per_user)
    return SimpleNamespace(config=cfg, _sessions={i: SimpleNamespace(uid=u) for i, u in enumerate(uids)})


def refusal(svc: SimpleNamespace, uid: int, continuous: bool = False) -> str | None:
    return ProfilerService._quota_refusal(svc, uid, continuous)  # type: ignore[arg-type]


def test_a_user_is_held_to_its_quota_and_others_are_not() -> None:
    svc = service(16, 2, 1000, 1000)
    assert refusal(svc, 1000) == ("uid 1000 already has 2 captures running, the most one user may have at once "
                                  "(setting max_sessions_per_user)")
    assert refusal(svc, 1000, continuous=True) is not None  # continuous captures of its processes count too
    assert refusal(svc, 1001) is None
    assert refusal(service(16, 2, 1000), 1000) is None


def test_root_attach_is_served_beyond_max_sessions_but_continuous_is_not() -> None:
    full = service(2, 4, 1000, 1001)
    assert refusal(full, 0) is None
    assert refusal(full, 0, continuous=True) == "2 captures are running, the most this daemon runs at once (setting max_sessions)"
    assert refusal(full, 1002) is not None
    assert refusal(service(16, 1, 0, 0, 0), 0, continuous=True) is None  # root's own are not a user quota


def test_max_sessions_per_user_is_a_setting(tmp_path) -> None:  # noqa: ANN001
    assert Config().max_sessions_per_user == 4
    f = tmp_path / "d.toml"
    f.write_text("max_sessions_per_user = 0\n")
    with pytest.raises(ConfigError, match="max_sessions_per_user must be at least 1"):
        load(str(f), {})
