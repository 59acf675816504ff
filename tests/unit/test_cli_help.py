"""Every option of every command, of deepctx and of deepctxd, says what it does, and its default where it
has one (#34: attach's pid and --format, deepctxd's --log-level and others had neither)."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import pytest

from deepctx.cli.main import build_parser
from deepctx.daemon.main import build_parser as daemon_parser


def commands(p: argparse.ArgumentParser, name: str) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield name, p
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            for sub, sp in a.choices.items():
                yield from commands(sp, f"{name} {sub}")


def options() -> list[tuple[str, argparse.Action]]:
    out = []
    for name, p in [*commands(build_parser(), "deepctx"), *commands(daemon_parser(), "deepctxd")]:
        out += [(f"{name} {'/'.join(a.option_strings) or a.dest}", a) for a in p._actions
                if not isinstance(a, argparse._HelpAction | argparse._SubParsersAction)]
    return out


OPTIONS = options()


def test_the_walk_finds_every_command() -> None:
    names = {n.rsplit(" ", 1)[0] for n, _ in OPTIONS}
    assert {"deepctx attach", "deepctx ps", "deepctx top", "deepctx report", "deepctxd"} <= names
    assert len(OPTIONS) > 100


@pytest.mark.parametrize("action", [a for _, a in OPTIONS], ids=[n for n, _ in OPTIONS])
def test_every_option_has_a_description_and_its_default(action: argparse.Action) -> None:
    assert action.help and action.help is not argparse.SUPPRESS and len(action.help) > 10
    default = action.default
    switch = isinstance(default, bool)  # store_true / store_false: off unless given
    if default is not None and default is not argparse.SUPPRESS and default != [] and not switch and not action.required:
        assert "default" in action.help.lower(), f"default {default!r} not said"


def test_daemon_help_points_to_the_config_keys() -> None:
    text = daemon_parser().format_help()
    assert "/etc/deepctx/deepctxd.toml" in text and "deepctxd settings" in text
    for key in ("log_level", "default_sample_hz", "max_duration_s", "max_sessions"):
        assert key in text
