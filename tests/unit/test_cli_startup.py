"""The CLI's start-up imports what its commands need, not the daemon side's heavy libraries: every
`deepctx` invocation pays its imports in CPU (issue #35.7: a 20 s capture's CPU against py-spy's, where the
CLI's start-up was about half of deepctx's share)."""

from __future__ import annotations

import subprocess
import sys

import pytest

# numpy: 0.12 s of CPU at import on the development VM, needed by the ELF reader (the daemon's), never by
# the CLI's commands
HEAVY = ("numpy",)


def test_cli_start_leaves_out_heavy_modules() -> None:
    code = ("import sys, deepctx.cli.main as m; m.build_parser(); "
            f"print(' '.join(n for n in {HEAVY!r} if n in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [], f"importing the CLI imports {r.stdout.strip()}"


def test_a_command_imports_its_own_module_only() -> None:
    """`deepctx attach` builds attach's parser alone: the analyzer, ClickHouse's client and the fleet and
    diff views stay out (about 0.17 CPU-s of a 0.37 CPU-s start on the development VM)."""
    others = ("deepctx.profiles.analyzer", "deepctx.profiles.fleet.clickhouse", "deepctx.cli.commands.fleet",
              "deepctx.cli.commands.diff", "deepctx.cli.commands.analyze")
    code = ("import sys, contextlib, io, deepctx.cli.main as m\n"
            "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
            "    m.main(['--socket', '/nonexistent', 'attach', '--help'])\n"
            f"print(' '.join(n for n in {others!r} if n in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [], f"deepctx attach imported {r.stdout.strip()}"


@pytest.mark.parametrize(("argv", "command"), [
    (["attach", "1"], "attach"), (["--socket", "/s", "stop", "1"], "stop"), (["--socket=/s", "ps"], "ps"),
    (["--help"], None), ([], None), (["bogus"], None), (["--socket"], None)])
def test_command_of(argv: list[str], command: str | None) -> None:
    from deepctx.cli.main import command_of

    assert command_of(argv) == command


def test_every_command_is_in_the_full_parser() -> None:
    import argparse

    from deepctx.cli.main import COMMANDS, build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert tuple(sub.choices) == COMMANDS


def test_status_prefix_is_the_cache_s() -> None:
    from deepctx.cli.commands import status
    from deepctx.host import file_cache

    assert status.HOST_CACHE == file_cache.STATUS_PREFIX == "host_cache_"
