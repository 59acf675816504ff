"""Every measured figure that README.md and docs/*.md quote is one of BENCHMARKS.md's current figures.

BENCHMARKS.md opens with "## Current figures" (headline tables: one per workload, medians and spread, the
machine, the command); "## History" follows. A paragraph (or list item, or table row) of README.md or docs/*.md is a claim when it names a
machine (H200, H100, the development or CI VM, the GPU host), a benchmark script (bench/*.py) or BENCHMARKS.md,
or speaks of cost ("cost", "slower", "overhead", "measured"). Every figure in a claim (a ratio such as 1.064×,
a percentage, a time in ns, µs, ms or seconds with a decimal point, a size in MB) must appear, number and unit
as written, in the current tables, and the claim must name its machine. Code blocks (example
output) are not claims.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCHMARKS = REPO / "BENCHMARKS.md"
QUOTING = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]

MACHINE = re.compile(r"\bH200\b|\bH100\b|\bdevelopment VM\b|\bCI VM\b|\bGPU host\b")
CLAIM = re.compile(MACHINE.pattern + r"|\bbench/\w+\.py\b|BENCHMARKS\.md|\bmeasured\b|\bcosts?\b|\bslower\b|\boverhead\b")
NUM = r"\d+(?:\.\d+)?"
UNIT = r"(?:×(?!\d)|x(?![\w])|%|\s?(?:ns|µs|us|ms|MB)\b|\s?s\b)"
# "A to B unit", "A–B unit", "A-B unit": A takes B's unit.
RANGE = re.compile(rf"({NUM})\s*(?:to|–|-)\s*({NUM})({UNIT})")
FIGURE = re.compile(rf"(?<![\w.])({NUM})({UNIT})")
# "at least 30%", "at most 1.25x", "the 1.02x threshold": a rule's threshold or a budget, not a measurement.
BOUND = re.compile(rf"\bat (?:least|most) ({NUM}(?:\s*(?:to|–|-)\s*{NUM})?){UNIT}|{NUM}{UNIT} threshold\b")


def _unit(u: str) -> str:
    u = u.strip()
    return {"x": "×", "us": "µs"}.get(u, u)


def figures(text: str) -> set[tuple[str, str]]:
    """(number, unit) of every figure in text. Seconds count only with a decimal point (1 s, 10 s windows
    and 2 s periods are settings, not measurements); "at least" and "at most" make thresholds and budgets."""
    found: set[tuple[str, str]] = set()
    text = BOUND.sub("", text)
    for a, b, u in RANGE.findall(text):
        found |= {(a, _unit(u)), (b, _unit(u))}
    for n, u in FIGURE.findall(text):
        found.add((n, _unit(u)))
    return {(n, u) for n, u in found if u != "s" or "." in n}


def _strip_code(text: str) -> str:
    return re.sub(r"```.*?```", "", text, flags=re.S)


def _paragraphs(text: str) -> list[str]:
    """Paragraphs, list items and table rows of a Markdown file, code blocks left out."""
    parts: list[str] = []
    for block in re.split(r"\n\s*\n", _strip_code(text)):
        lines = block.split("\n")
        if all(line.startswith("|") for line in lines if line.strip()):
            parts.extend(lines)
            continue
        item: list[str] = []
        for line in lines:
            if re.match(r"\s*(?:[-*]|\d+\.)\s", line) and item:
                parts.append(" ".join(item))
                item = []
            item.append(line.strip())
        parts.append(" ".join(item))
    return [p for p in parts if p.strip()]


def _sentences(paragraph: str) -> list[str]:
    return re.split(r"(?<=[.!?:;])\s+(?=[A-Z(*`\[])", paragraph)


def current_figures(benchmarks: str) -> set[tuple[str, str]]:
    m = re.search(r"^## Current figures\n(.*?)^## History", benchmarks, flags=re.S | re.M)
    assert m, "BENCHMARKS.md has no '## Current figures' section before '## History'"
    return figures(m.group(1))


@dataclass(frozen=True)
class Problem:
    file: str
    figure: str
    why: str
    sentence: str

    def __str__(self) -> str:
        return f"{self.file}: {self.figure}: {self.why}: {self.sentence[:160]!r}"


def check(name: str, text: str, current: set[tuple[str, str]]) -> list[Problem]:
    problems: list[Problem] = []
    for para in _paragraphs(text):
        if not CLAIM.search(para):
            continue
        names_machine = bool(MACHINE.search(para))
        for sentence in _sentences(para):
            for n, u in sorted(figures(sentence)):
                if (n, u) not in current:
                    problems.append(Problem(name, n + u, "not in BENCHMARKS.md's current figures", sentence))
                elif not names_machine:
                    problems.append(Problem(name, n + u, "its paragraph names no machine", sentence))
    return problems


def test_every_quoted_figure_is_a_current_benchmark_figure() -> None:
    current = current_figures(BENCHMARKS.read_text())
    problems = [p for f in QUOTING for p in check(f.relative_to(REPO).as_posix(), f.read_text(), current)]
    assert problems == [], "\n".join(map(str, problems))


def test_the_readme_quotes_current_figures() -> None:
    """The check is not vacuous: README's cost answer quotes the headline medians it is checked against."""
    current = current_figures(BENCHMARKS.read_text())
    readme = (REPO / "README.md").read_text()
    quoted = {f for p in _paragraphs(readme) if CLAIM.search(p) for f in figures(p)}
    assert {("1.581", "×"), ("1.026", "×"), ("1.064", "×"), ("1.600", "×")} <= quoted & current


@pytest.mark.parametrize(
    ("sentence", "figure"),
    [
        ("On ResNet-50 it cost 1.065× on the H200 host.", "1.065×"),
        ("deepctxd used 0.39% of a core on the development VM.", "0.39%"),
        ("Profiles were ready in 0.83 s on the H200 host.", "0.83s"),
        ("The loop ran 1.053 to 1.600× slower (bench/duty_pairs.py, H100).", "1.053×"),
        ("A stray 1.0999x overhead.", "1.0999×"),
    ],
)
def test_an_edited_figure_fails(sentence: str, figure: str) -> None:
    current = current_figures(BENCHMARKS.read_text())
    problems = check("README.md", sentence, current)
    assert [p.figure.replace(" ", "") for p in problems if p.why.startswith("not in")] == [figure]


def test_a_current_figure_without_its_machine_fails() -> None:
    current = current_figures(BENCHMARKS.read_text())
    problems = check("README.md", "It measured 1.581× on the tiny-kernel loop.", current)
    assert [(p.figure, p.why) for p in problems] == [("1.581×", "its paragraph names no machine")]


def test_figures_reads_units_ranges_and_settings() -> None:
    assert figures("0.97 to 1.06× and 3 to 9% low, 4.73 s, 2 s windows, 305 to 420 MB, 8×512, 5.9 us, "
                   "at least 30% of samples, at most 1.25x, the 1.02x threshold") == {
        ("0.97", "×"), ("1.06", "×"), ("3", "%"), ("9", "%"), ("4.73", "s"), ("305", "MB"), ("420", "MB"),
        ("5.9", "µs"),
    }
