"""Which changes between two profiles are bigger than sampling noise.

Two captures of one unchanged program never hold the same samples: every call path, function and line
moves a little. Here each side's values are rolled up (to functions, lines or whole call paths) and
normalised by that side's total, so a longer or faster capture compares alike. For CPU samples each
share is a binomial proportion: a change is significant when its interval excludes zero at a level that
stays 1% over all the rows compared (Bonferroni), and rows rank by how many standard errors they moved.
Other metrics are counted or timed exactly, not sampled: their changes carry no sampling interval.
"""

from __future__ import annotations

import math
import os
import shlex
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from statistics import NormalDist

from deepctx.profiles.tree import Frame, ViewNode, iter_paths

ROLLUPS = ("function", "line", "path")
SAMPLED_METRICS = frozenset({"cpu_samples"})
FAMILY_ALPHA = 0.01  # chance that any row of an unchanged program is called significant
PROGRAM_OVERLAP = 0.5  # below this share of the after side in rows the before side has: different programs


@dataclass(frozen=True)
class Change:
    key: tuple[Frame, ...]  # one frame (function, line) or a call path, outermost first
    before: int
    after: int
    share_before: float
    share_after: float
    se: float | None  # standard error of the change in share; None for exact metrics
    z: float | None  # change / se
    margin: float | None  # half-width of the interval at the family-wise level
    significant: bool

    @property
    def delta(self) -> float:
        """The change in share of the total (0.01 = one percentage point)."""
        return self.share_after - self.share_before

    @property
    def status(self) -> str:
        if not self.significant:
            return "same" if self.before == self.after else "noise"
        if self.before == 0:
            return "appeared"
        if self.after == 0:
            return "vanished"
        return "grew" if self.delta > 0 else "shrank"


@dataclass(frozen=True)
class Comparison:
    metric: str
    rollup: str
    normalised: bool
    total_before: int
    total_after: int
    critical_z: float | None  # the z a sampled row must pass; None for exact metrics
    changes: list[Change]  # significant first, by |z| (exact metrics: by |change|)

    @property
    def significant(self) -> list[Change]:
        return [c for c in self.changes if c.significant]

    @property
    def within_noise(self) -> int:
        return sum(1 for c in self.changes if c.status == "noise")


def _key_of(rollup: str) -> Callable[[list[ViewNode]], Hashable | None]:
    def key(path: list[ViewNode]) -> Hashable | None:
        f = path[-1].frame
        if f.kind in ("thread", "root"):
            return None
        if rollup == "function":
            return (f.function(),)
        if rollup == "line":
            return (f,)
        return tuple(n.frame for n in path)

    return key


def rollup(root: ViewNode, metric: str, by: str) -> dict[tuple[Frame, ...], int]:
    """Self values of metric summed per function, per line or per call path (threads merged by name)."""
    key_of = _key_of(by)
    out: dict[tuple[Frame, ...], int] = {}
    for path, node in iter_paths(root):
        v = node.self.get(metric, 0)
        if v:
            k = key_of(path)
            if k is not None:
                out[k] = out.get(k, 0) + v  # type: ignore[index]
    return out


def _critical_z(rows: int) -> float:
    return NormalDist().inv_cdf(1 - FAMILY_ALPHA / (2 * max(1, rows)))


def compare(before: dict[tuple[Frame, ...], int], after: dict[tuple[Frame, ...], int], metric: str, by: str,
            normalise: bool = True) -> Comparison:
    nb, na = sum(before.values()), sum(after.values())
    keys = list(dict.fromkeys([*before, *after]))
    sampled = metric in SAMPLED_METRICS
    zc = _critical_z(len(keys)) if sampled else None
    out = []
    for k in keys:
        b, a = before.get(k, 0), after.get(k, 0)
        if normalise:
            sb, sa = (b / nb if nb else 0.0), (a / na if na else 0.0)
        else:
            sb, sa = float(b), float(a)
        se = z = margin = None
        if sampled and zc is not None:
            se = _share_se(b, nb, a, na) if normalise else math.sqrt(b + a + 1)  # Poisson counts when absolute
            z = (sa - sb) / se if se > 0 else 0.0
            margin = zc * se
            significant = abs(z) >= zc
        else:
            significant = sa != sb  # exact values: any change of share (or of value, when absolute) is real
        out.append(Change(k, b, a, sb, sa, se, z, margin, significant))
    if sampled:
        out.sort(key=lambda c: (not c.significant, -abs(c.z or 0.0), -abs(c.delta), _label(c.key)))
    else:
        out.sort(key=lambda c: (not c.significant, -abs(c.delta), _label(c.key)))
    return Comparison(metric, by, normalise, nb, na, zc, out)


def _share_se(b: int, nb: int, a: int, na: int) -> float:
    """Standard error of the difference of two binomial shares, each with one success and one failure added
    (Agresti-Caffo): a row seen on one side only still has a width."""
    pb, pa = (b + 1) / (nb + 2), (a + 1) / (na + 2)
    return math.sqrt(pb * (1 - pb) / (nb + 2) + pa * (1 - pa) / (na + 2))


def _label(key: tuple[Frame, ...]) -> str:
    return " ".join(f"{f.name}:{f.file}:{f.line}" for f in key)


# --- different programs ------------------------------------------------------------------------------------

def program_of(command: str) -> str:
    """What a command runs: the script (or -m module) of an interpreter, else the executable's name."""
    try:
        argv = shlex.split(command or "")
    except ValueError:
        argv = (command or "").split()
    if not argv:
        return ""
    for i, a in enumerate(argv[1:], 1):
        if a == "-m" and i + 1 < len(argv):
            return argv[i + 1]
        if a.endswith(".py"):
            return os.path.basename(a)
    return os.path.basename(argv[0])


def different_programs(before_doc: dict, after_doc: dict, before: dict[tuple[Frame, ...], int],
                       after: dict[tuple[Frame, ...], int]) -> str | None:
    """A warning when the two profiles look like two different programs, else None."""
    pb, pa = program_of(str(before_doc.get("command") or "")), program_of(str(after_doc.get("command") or ""))
    if pb and pa and pb != pa:
        return (f"before runs {pb} and after runs {pa}: these look like different programs, so their changes "
                "are not a before and after of one program")
    na = sum(after.values())
    if na and before:
        shared = sum(v for k, v in after.items() if k in before) / na
        if shared < PROGRAM_OVERLAP:
            return (f"only {shared:.0%} of after's total is in rows before also has: these look like different "
                    "programs (or very different runs of one)")
    return None


def significance(before_doc: dict, after_doc: dict, metric: str, by: str = "function",
                 normalise: bool = True) -> tuple[Comparison, str | None]:
    """The comparison of two profile documents, and a warning when they look like different programs.
    Functions and lines take Python-leaf self time where the profiles have Python frames, as the flat view."""
    from deepctx.cli.views.python_self import has_python, python_leaf_self
    from deepctx.profiles.tree import from_doc

    roots = [from_doc(before_doc), from_doc(after_doc)]
    if by != "path" and any(has_python(r) for r in roots):
        roots = [python_leaf_self(r) for r in roots]
    b, a = (rollup(r, metric, by) for r in roots)
    return compare(b, a, metric, by, normalise), different_programs(before_doc, after_doc, b, a)
