"""deepctx imports only the command it runs: its start is part of attach-to-ready (#30), and the other
commands' imports (the analyzer, numpy, the fleet store) took about 0.2 s of the CLI's 0.4 s."""

from __future__ import annotations

import subprocess
import sys

import pytest

from deepctx.cli.main import COMMANDS, build_parser, command_word


@pytest.mark.parametrize(("argv", "word"), [
    (["attach", "12"], "attach"),
    (["--socket", "/x.sock", "stop", "3"], "stop"),
    (["--socket=/x.sock", "status"], "status"),
    (["--help"], None),
    (["-h", "attach"], None),
    (["atach", "12"], None),
    ([], None),
    (["--socket"], None),
])
def test_the_command_word(argv: list[str], word: str | None) -> None:
    assert command_word(argv) == word


def test_a_named_command_builds_only_its_parser_and_help_builds_all() -> None:
    def names(p: object) -> list[str]:
        (sub,) = [a for a in p._actions if a.dest == "command"]  # type: ignore[attr-defined]
        return list(sub.choices)

    assert names(build_parser(["stop", "3"])) == ["stop"]
    assert names(build_parser(["--help"])) == list(COMMANDS)
    assert names(build_parser()) == list(COMMANDS)


def test_attach_imports_no_other_command() -> None:
    code = ("import sys; from deepctx.cli.main import build_parser; build_parser(['attach', '1']); "
            "print(' '.join(sorted(m for m in sys.modules if m.startswith('deepctx.cli.commands.'))), "
            "'numpy' in sys.modules, 'deepctx.profiles.analyzer' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["deepctx.cli.commands.attach", "False", "False"]
