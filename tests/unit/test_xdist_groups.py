"""How ./install.sh test shares the tests among xdist's workers (tests/conftest.py): names that must stay true."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
# Loaded by path: `conftest` names a module in several test folders.
_spec = importlib.util.spec_from_file_location("deepctx_tests_conftest", TESTS / "conftest.py")
assert _spec and _spec.loader
conftest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(conftest)


def test_every_alone_file_exists_and_is_an_integration_test() -> None:
    """A renamed file would otherwise leave the tests that measure against the machine running beside others."""
    assert conftest.ALONE_FILES, "no test runs alone"
    for rel in sorted(conftest.ALONE_FILES):
        assert (TESTS / rel).is_file(), rel
        assert rel.startswith("integration/"), rel


def test_the_gpu_tier_keeps_to_one_group_the_service_folders_to_theirs_and_other_files_to_their_own() -> None:
    groups = {rel: conftest.xdist_group(rel) for rel in (
        "integration/test_cpu_profile.py", "integration/device/test_device_join.py",
        "integration/security/test_sec_auth.py", "integration/security/test_sec_unit.py",
        "integration/service/test_restart.py", "gpu/test_gpu_api.py", "gpu/test_analyzer.py",
        "unit/test_config.py", "unit/unwind/test_unwind_readelf.py", "views/test_html_browser.py")}
    assert groups == {
        "integration/test_cpu_profile.py": "integration/test_cpu_profile.py",
        "integration/device/test_device_join.py": "integration/device/test_device_join.py",
        "integration/security/test_sec_auth.py": "integration/security/",
        "integration/security/test_sec_unit.py": "integration/security/",
        "integration/service/test_restart.py": "integration/service/",
        "gpu/test_gpu_api.py": conftest.SERIAL_GROUP,
        "gpu/test_analyzer.py": conftest.SERIAL_GROUP,
        "unit/test_config.py": "unit/test_config.py",
        "unit/unwind/test_unwind_readelf.py": "unit/unwind/test_unwind_readelf.py",
        "views/test_html_browser.py": "views/test_html_browser.py",
    }


def test_every_continuous_daemon_of_the_integration_tier_profiles_only_its_own_targets() -> None:
    """Integration files run side by side: a `--continuous` daemon must say which processes are its own
    (continuous_match), else it captures the targets of the files beside it."""
    for path in sorted((TESTS / "integration").rglob("test_*.py")):
        rel = str(path.relative_to(TESTS))
        if rel in conftest.ALONE_FILES:
            continue
        for call in re.findall(r'start\("--continuous"[^)]*\)', path.read_text()):
            assert "continuous_match" in call, f"{rel}: {call}"


def test_install_sh_runs_the_rest_with_xdist_then_the_alone_tests_by_themselves() -> None:
    script = (TESTS.parent / "install.sh").read_text()
    runs = re.findall(r"^\s*run_pytest (.+)$", script, flags=re.M)
    assert runs == ["-n auto --dist loadgroup --alone-tests without", "-n 0 --alone-tests only"]
    assert '-m pytest -ra --durations=15 -p no:cacheprovider "$@" tests' in script
