"""Interpreter discovery rules that need no live process: which builds are refused, and how."""

from __future__ import annotations

import pytest

from deepctx.host.python.discovery import check_build
from deepctx.host.python.layouts import table_layout


def test_default_build_is_accepted() -> None:
    check_build("libpython3.13.so.1.0", free_threaded=False, debug=False)


def test_free_threaded_build_is_refused() -> None:
    with pytest.raises(ValueError, match=r"^free-threaded CPython builds \(libpython3\.13t\.so\.1\.0\) are not supported$"):
        check_build("libpython3.13t.so.1.0", free_threaded=True, debug=False)


def test_debug_build_is_refused() -> None:
    with pytest.raises(ValueError, match=r"^debug builds of CPython \(python3\.12d, --with-pydebug\) are not supported$"):
        check_build("python3.12d", free_threaded=False, debug=True)


@pytest.mark.parametrize("version", [(3, 9), (3, 8), (2, 7)])
def test_old_versions_are_refused(version: tuple[int, int]) -> None:
    with pytest.raises(ValueError, match=rf"^Python {version[0]}\.{version[1]} is not supported \(supported: 3\.10, 3\.11, 3\.12, 3\.13, 3\.14\)$"):
        table_layout(version)
