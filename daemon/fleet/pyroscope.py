"""Pushing a window to a Pyroscope-compatible server: POST /ingest?format=pprof, the profile as the
multipart form field `profile` (gzipped pprof from profiles/pprof.py)."""

from __future__ import annotations

import re
import urllib.error
import urllib.parse
import urllib.request
import uuid

from deepctx.profiles.exporter import ExportOptions
from deepctx.profiles.fold import SHOW_ALL
from deepctx.profiles.pprof import Pprof
from deepctx.profiles.window import Window

_LABEL_VALUE = re.compile(r"[^A-Za-z0-9_.:/@+-]")  # what the {k=v,...} series syntax takes unquoted


class PyroscopeError(RuntimeError):
    pass


def series_name(app: str, window: Window) -> str:
    """The `name` parameter: the application and the window's labels."""
    labels = {"host": window.host, "pid": str(window.pid), "container": window.container or "/",
              "command": window.command.split(" ")[0].rsplit("/", 1)[-1] or "?"}
    inner = ",".join(f"{k}={_LABEL_VALUE.sub('_', v)[:200]}" for k, v in labels.items())
    return f"{app}{{{inner}}}"


def ingest_request(base_url: str, app: str, window: Window) -> urllib.request.Request:
    # as recorded: no deepctx flag reaches what Pyroscope shows, so it keeps every frame the capture had
    profile = Pprof().export(window.profile, ExportOptions(fold=SHOW_ALL))
    params = {"name": series_name(app, window), "from": str(int(window.start_unix)),
              "until": str(int(window.end_unix)), "format": "pprof", "spyName": "deepctx",
              "sampleRate": str(int(window.profile.get("sample_hz") or 100))}
    boundary = uuid.uuid4().hex
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"profile\"; filename=\"profile.pprof\"\r\n"
            f"Content-Type: application/octet-stream\r\n\r\n").encode() + profile + f"\r\n--{boundary}--\r\n".encode()
    return urllib.request.Request(base_url.rstrip("/") + "/ingest?" + urllib.parse.urlencode(params), data=body,
                                  method="POST", headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})


def push(base_url: str, app: str, window: Window, timeout_s: float = 30.0) -> None:
    try:
        with urllib.request.urlopen(ingest_request(base_url, app, window), timeout=timeout_s) as resp:
            resp.read()
    except urllib.error.HTTPError as e:
        raise PyroscopeError(f"{base_url} answered {e.code}: {e.read()[:200].decode(errors='replace')}") from None
    except (urllib.error.URLError, OSError) as e:
        raise PyroscopeError(f"cannot reach {base_url}: {getattr(e, 'reason', e)}") from None
