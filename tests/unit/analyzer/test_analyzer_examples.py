"""Every rule has an example program with its marked line and a fixed variant, and a section in the docs;
the GPU tier runs them (tests/gpu/test_analyzer.py)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from harness import line_of

from deepctx.profiles.analyzer import rule_ids
from deepctx.profiles.analyzer.finding import Finding
from deepctx.profiles.analyzer.index import Site

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = REPO / "examples" / "inefficiencies"


@pytest.mark.parametrize("rule", rule_ids())
def test_each_rule_has_an_example_with_one_marked_line(rule: str) -> None:
    path = EXAMPLES / (rule.replace("-", "_") + ".py")
    text = path.read_text()
    tree = ast.parse(text)
    line_of(path, "LINE_" + rule.upper().replace("-", "_"))  # one line ends in the marker
    assert "args.fixed" in text  # the --fixed variant
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "_protocol"
                for a in n.names}
    assert {"options", "serve"} <= imported <= {"options", "serve", "compile_mode"}  # ready/go/done, as
    # tests/harness.py StdinTarget expects


def test_every_rule_is_documented() -> None:
    doc = (REPO / "docs" / "analyzer.md").read_text()
    for n, rule in enumerate(rule_ids(), 1):
        assert f"### {n}. `{rule}`:" in doc


def test_long_call_paths_keep_both_ends() -> None:
    path = tuple(Site("/srv/a.py", i, f"f{i}") for i in range(1, 21))
    j = Finding("r", "t", path[-1], {}, "s", None, 0.3, "m", call_path=path).to_json()
    assert j["call_path"][:2] == ["f1 (/srv/a.py:1)", "f2 (/srv/a.py:2)"]
    assert j["call_path"][2] == "… 9 frames …" and j["call_path"][-1] == "f20 (/srv/a.py:20)"
    assert len(j["call_path"]) == 12
