"""The ClickHouse table windows go to, and the SQL that reads it (docs/fleet.md). Written for the HTTP
interface and the SQL of ClickHouse 18.16 (Debian 12's): no query parameters, no TTL, no DateTime64."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from deepctx.profiles.metrics import METRICS
from deepctx.profiles.summary import iter_costs
from deepctx.profiles.window import Window

TABLE = "callpaths"
PATH_FIELDS = ("kind", "name", "file", "line", "module")

CREATE_TABLE = """CREATE TABLE IF NOT EXISTS {db}.{table} (
    host String,
    container String,
    pid UInt32,
    uid Int64,
    command String,
    window_start DateTime,
    window_end DateTime,
    path_kind Array(String),
    path_name Array(String),
    path_file Array(String),
    path_line Array(UInt32),
    path_module Array(String),
    kind String,
    name String,
    line_file String,
    line_no UInt32,
    line_function String,
    {metrics}
) ENGINE = MergeTree() PARTITION BY toDate(window_start) ORDER BY (window_start, host, pid)"""


def create_statements(db: str) -> list[str]:
    check_identifier(db)
    metrics = ",\n    ".join(f"{m} UInt64" for m in METRICS)
    return [f"CREATE DATABASE IF NOT EXISTS {db}", CREATE_TABLE.format(db=db, table=TABLE, metrics=metrics)]


def check_identifier(name: str) -> str:
    if not name or not (name[0].isalpha() or name[0] == "_") or not all(c.isalnum() or c == "_" for c in name):
        raise ValueError(f"not a plain ClickHouse identifier: {name!r}")
    return name


def quote(value: str) -> str:
    """A ClickHouse string literal."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def rows(window: Window) -> Iterator[dict[str, Any]]:
    """One row per call path with a nonzero self value (JSONEachRow)."""
    for cost in iter_costs(window.profile):
        path = cost.path()
        m = cost.node.get("metrics") or {}
        line = cost.line or ("", 0, "")
        yield {
            "host": window.host, "container": window.container, "pid": window.pid, "uid": window.uid,
            "command": window.command, "window_start": int(window.start_unix), "window_end": int(window.end_unix),
            "path_kind": [str(n.get("kind") or "") for n in path],
            "path_name": [str(n.get("name") or "") for n in path],
            "path_file": [str(n.get("file") or "") for n in path],
            "path_line": [int(n.get("line") or 0) for n in path],
            "path_module": [str(n.get("module") or "") for n in path],
            "kind": str(cost.node.get("kind") or ""), "name": str(cost.node.get("name") or ""),
            "line_file": line[0], "line_no": line[1], "line_function": line[2],
            **{k: int(m.get(k, 0)) for k in METRICS},
        }


# --- reading ---------------------------------------------------------------------------------------

# Aliases t_*: ClickHouse resolves an alias named like a column inside other aggregates (sumIf(calls ...)).
PROCESS_SUMS = ", ".join(f"sum({m}) AS t_{m}" for m in METRICS) + (
    ", sumIf(calls, kind = 'kernel') AS t_launches, sumIf(bytes, kind = 'memcpy') AS t_copy_bytes")


def where(since: float, until: float, host: str | None = None, pid: int | None = None, command: str | None = None,
          container: str | None = None) -> str:
    sql = [f"window_end > toDateTime({int(since)})", f"window_start < toDateTime({int(until) + 1})"]
    if host:
        sql.append(f"host = {quote(host)}")
    if pid is not None:
        sql.append(f"pid = {int(pid)}")
    if command:
        sql.append(f"position(command, {quote(command)}) > 0")
    if container:
        sql.append(f"startsWith(container, {quote(container)})")
    return " AND ".join(sql)


def totals_query(db: str, cond: str) -> str:
    return f"SELECT count() AS rows, {PROCESS_SUMS} FROM {check_identifier(db)}.{TABLE} WHERE {cond}"


def processes_query(db: str, cond: str, metric: str, n: int) -> str:
    return (f"SELECT host, pid, command, container, uniqExact(window_start) AS windows, {PROCESS_SUMS} "
            f"FROM {check_identifier(db)}.{TABLE} WHERE {cond} GROUP BY host, pid, command, container "
            f"ORDER BY t_{_metric(metric)} DESC, host, pid LIMIT {int(n)}")


def kernels_query(db: str, cond: str, metric: str, n: int) -> str:
    return (f"SELECT name, uniqExact(host, pid) AS processes, sum(calls) AS calls, sum(api_time_ns) AS api_time_ns, "
            f"sum(gpu_time_ns) AS gpu_time_ns FROM {check_identifier(db)}.{TABLE} WHERE {cond} AND kind = 'kernel' "
            f"GROUP BY name ORDER BY {_metric(metric)} DESC, name LIMIT {int(n)}")


def lines_query(db: str, cond: str, metric: str, n: int) -> str:
    sums = ", ".join(f"sum({m}) AS {m}" for m in METRICS)
    return (f"SELECT line_file AS file, line_no AS line, line_function AS function, {sums} "
            f"FROM {check_identifier(db)}.{TABLE} WHERE {cond} AND line_file != '' "
            f"GROUP BY line_file, line_no, line_function ORDER BY {_metric(metric)} DESC, file, line LIMIT {int(n)}")


def profile_query(db: str, cond: str) -> str:
    sums = ", ".join(f"sum({m}) AS {m}" for m in METRICS)
    paths = ", ".join(f"path_{f}" for f in PATH_FIELDS)
    return (f"SELECT {paths}, {sums}, uniqExact(host, pid, window_start) AS windows, "
            f"min(toUnixTimestamp(window_start)) AS first, max(toUnixTimestamp(window_end)) AS last "
            f"FROM {check_identifier(db)}.{TABLE} WHERE {cond} GROUP BY {paths}")


def header_query(db: str, cond: str) -> str:
    """What a merged profile's header says: windows, hosts, processes, commands, time span."""
    return (f"SELECT uniqExact(host, pid, window_start) AS h_windows, any(host) AS h_host, uniqExact(host) AS h_hosts, "
            f"any(pid) AS h_pid, uniqExact(pid) AS h_pids, uniqExact(host, pid) AS h_processes, any(command) AS h_command, "
            f"uniqExact(command) AS h_commands, min(toUnixTimestamp(window_start)) AS h_first, "
            f"max(toUnixTimestamp(window_end)) AS h_last FROM {check_identifier(db)}.{TABLE} WHERE {cond}")


def _metric(name: str) -> str:
    if name not in (*METRICS, "launches", "copy_bytes"):
        raise ValueError(f"unknown metric {name!r}")
    return name


def tree_from_paths(rows: list[dict[str, Any]], header: dict[str, Any]) -> dict[str, Any]:
    """A profile document from profile_query's rows: each row's path inserted below one root, its metrics
    at the path's end. Thread nodes carry no tid (threads of one name merge across processes)."""
    root: dict[str, Any] = {"kind": "root", "name": header.get("command") or "", "file": None, "line": None,
                            "module": None, "metrics": dict.fromkeys(METRICS, 0), "children": []}
    index: dict[int, dict[tuple, dict[str, Any]]] = {}
    for row in rows:
        node = root
        for kind, name, file, line, module in zip(*(row[f"path_{f}"] for f in PATH_FIELDS), strict=True):
            key = (kind, name, file or None, int(line) or None, module or None)
            children = index.setdefault(id(node), {})
            child = children.get(key)
            if child is None:
                child = {"kind": kind, "name": name, "file": key[2], "line": key[3], "module": key[4],
                         "metrics": dict.fromkeys(METRICS, 0), "children": []}
                node["children"].append(child)
                children[key] = child
            node = child
        for m in METRICS:
            node["metrics"][m] += int(row.get(m) or 0)
    return {"schema": "deepctx.profile/v1", "pid": int(header.get("pid") or 0), "command": header.get("command") or "",
            "hostname": header.get("hostname") or "", "started_unix": float(header.get("started_unix") or 0.0),
            "duration_s": float(header.get("duration_s") or 0.0), "ended": "windows", "sample_hz": 0, "mode": None,
            "metrics": list(METRICS), "root": root, "stats": {"windows": int(header.get("windows") or 0)},
            "warnings": []}
