"""A small client for ClickHouse's HTTP interface (urllib; no driver needed)."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable
from typing import Any

from deepctx.profiles.fleet import schema
from deepctx.profiles.window import Window


class ClickHouseError(RuntimeError):
    """ClickHouse refused or could not be reached; the message is one line."""


class ClickHouse:
    def __init__(self, url: str, database: str = "deepctx", timeout_s: float = 30.0) -> None:
        self.url = url.rstrip("/") + "/"
        self.database = schema.check_identifier(database)
        self.timeout_s = timeout_s

    def execute(self, sql: str, body: bytes = b"") -> bytes:
        """Runs sql (its data, for INSERT ... FORMAT, in body) and returns the answer."""
        query = urllib.parse.urlencode({"query": sql}) if body else ""
        req = urllib.request.Request(self.url + ("?" + query if query else ""), data=body or sql.encode(),
                                     method="POST")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                return resp.read()
        except urllib.error.HTTPError as e:
            text = e.read().decode(errors="replace").strip().splitlines()
            raise ClickHouseError(f"ClickHouse at {self.url} answered {e.code}: {text[0] if text else e.reason}") from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise ClickHouseError(f"cannot reach ClickHouse at {self.url}: {reason}") from None

    def rows(self, sql: str) -> list[dict[str, Any]]:
        out = json.loads(self.execute(sql + " FORMAT JSON"))
        return list(out.get("data") or [])

    def create_schema(self) -> None:
        for stmt in schema.create_statements(self.database):
            self.execute(stmt)

    def insert_rows(self, rows: Iterable[dict[str, Any]]) -> int:
        lines = [json.dumps(r, ensure_ascii=False, separators=(",", ":")) for r in rows]
        if lines:
            self.execute(f"INSERT INTO {self.database}.{schema.TABLE} FORMAT JSONEachRow",
                         ("\n".join(lines) + "\n").encode())
        return len(lines)

    def insert_window(self, window: Window) -> int:
        return self.insert_rows(schema.rows(window))
