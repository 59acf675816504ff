"""The systemd unit and its fragments, checked by systemd's own tools (skipped where they are missing)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SYSTEMD = Path(__file__).resolve().parents[2] / "systemd"
UNIT = SYSTEMD / "deepctxd.service"
DEEPCTXD = Path(sys.executable).parent / "deepctxd"


def installed_unit(tmp_path: Path) -> Path:
    """The unit as `./install.sh service` writes it: ExecStart pointing at this checkout's deepctxd."""
    out = tmp_path / "deepctxd.service"
    out.write_text(UNIT.read_text().replace("/opt/deepctx/.venv/bin/deepctxd", str(DEEPCTXD)))
    return out


def unit_values(key: str) -> list[str]:
    return re.findall(rf"^{key}=(.*)$", UNIT.read_text(), re.M)


@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="systemd-analyze is not installed")
def test_unit_verifies_without_a_warning(tmp_path: Path) -> None:
    if not DEEPCTXD.exists():
        pytest.skip("deepctxd is not installed in this environment")
    r = subprocess.run(["systemd-analyze", "verify", "--man=no", str(installed_unit(tmp_path))],
                       capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stdout + r.stderr) == (0, "")


@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="systemd-analyze is not installed")
def test_unit_exposure_is_ok(tmp_path: Path) -> None:
    r = subprocess.run(["systemd-analyze", "security", "--offline=yes", "--no-pager",
                        str(installed_unit(tmp_path))], capture_output=True, text=True, timeout=60)
    m = re.search(r"Overall exposure level for deepctxd.service: ([\d.]+) (\w+)", r.stdout)
    assert m, r.stdout[-2000:] + r.stderr
    assert float(m.group(1)) <= 5.0, m.group(0)  # systemd's scale: 0 safest, 10 most exposed


def test_unit_keeps_only_the_measured_capabilities() -> None:
    assert unit_values("CapabilityBoundingSet") == [
        "CAP_BPF CAP_PERFMON CAP_SYS_PTRACE CAP_DAC_READ_SEARCH CAP_CHECKPOINT_RESTORE CAP_CHOWN CAP_SYSLOG"]
    for key, value in (("ProtectSystem", "strict"), ("PrivateTmp", "yes"), ("Restart", "on-failure"),
                       ("NoNewPrivileges", "yes"), ("RuntimeDirectoryMode", "0755")):
        assert unit_values(key) == [value], key


@pytest.mark.skipif(not shutil.which("systemd-sysusers") or os.geteuid() != 0, reason="needs systemd-sysusers and root")
def test_sysusers_and_tmpfiles_fragments(tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    for tool, fragment in (("systemd-sysusers", "deepctx.sysusers.conf"), ("systemd-tmpfiles", "deepctx.tmpfiles.conf")):
        args = [tool, f"--root={tmp_path}"] + (["--create"] if tool == "systemd-tmpfiles" else [])
        r = subprocess.run([*args, str(SYSTEMD / fragment)], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
    assert re.search(r"^deepctx:x:\d+:$", (tmp_path / "etc" / "group").read_text(), re.M)
    modes = {d: (tmp_path / d).stat().st_mode & 0o777 for d in ("run/deepctx", "var/lib/deepctx", "var/log/deepctx")}
    assert modes == {"run/deepctx": 0o755, "var/lib/deepctx": 0o700, "var/log/deepctx": 0o750}
