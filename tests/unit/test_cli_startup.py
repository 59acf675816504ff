"""The CLI's start-up imports what its commands need, not the daemon side's heavy libraries: every
`deepctx` invocation pays its imports in CPU (issue #35.7: a 20 s capture's CPU against py-spy's, where the
CLI's start-up was about half of deepctx's share)."""

from __future__ import annotations

import subprocess
import sys

# numpy: 0.12 s of CPU at import on the development VM, needed by the ELF reader (the daemon's), never by
# the CLI's commands
HEAVY = ("numpy",)


def test_cli_start_leaves_out_heavy_modules() -> None:
    code = ("import sys, deepctx.cli.main as m; m.build_parser(); "
            f"print(' '.join(n for n in {HEAVY!r} if n in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [], f"importing the CLI imports {r.stdout.strip()}"


def test_status_prefix_is_the_cache_s() -> None:
    from deepctx.cli.commands import status
    from deepctx.host import file_cache

    assert status.HOST_CACHE == file_cache.STATUS_PREFIX == "host_cache_"
