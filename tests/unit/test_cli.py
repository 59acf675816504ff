"""The CLI without a daemon: argument errors, the message when deepctxd is not running, tree rendering."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from deepctx.cli.formats.tree import render
from deepctx.cli.main import main
from deepctx.daemon.capture import CaptureResult
from deepctx.daemon.profile_wire import to_message
from deepctx.daemon.tree import CallTree
from deepctx.host.frames import Frame, thread_frame
from deepctx.profiles.document import to_doc


def test_daemon_not_running_says_how_to_start_it(tmp_path: Path, capsys) -> None:
    rc = main(["--socket", str(tmp_path / "nothing.sock"), "status"])
    err = capsys.readouterr().err
    assert rc == 3
    assert err.count("\n") == 1
    assert "deepctxd is not running" in err and str(tmp_path / "nothing.sock") in err
    # the deepctxd installed next to this deepctx (.venv/bin), by its path: a bare name is not on root's PATH
    assert f"start it with `{Path(sys.executable).parent / 'deepctxd'}`" in err


def test_daemon_not_running_tells_a_user_to_start_it_with_sudo(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    assert main(["--socket", str(tmp_path / "nothing.sock"), "status"]) == 3
    assert f"`sudo {Path(sys.executable).parent / 'deepctxd'}`" in capsys.readouterr().err


def test_a_socket_left_by_a_killed_daemon_is_not_running_at_once(tmp_path: Path, capsys) -> None:
    import socket
    import time

    path = tmp_path / "stale.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.bind(str(path))  # the file exists; nothing listens on it
        t0 = time.monotonic()
        assert main(["--socket", str(path), "status"]) == 3
        took = time.monotonic() - t0
    assert "deepctxd is not running" in capsys.readouterr().err
    assert took < 5  # not gRPC's retries until connect's 10 s answer time


def test_a_daemon_that_accepts_but_does_not_answer_is_named_as_such(tmp_path: Path) -> None:
    import socket

    from deepctx.cli.client import CliError, connect

    path = tmp_path / "busy.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.bind(str(path))
        s.listen(8)  # accepts in the kernel's backlog, never speaks HTTP/2
        with pytest.raises(CliError) as e:
            connect(str(path), timeout_s=0.3)
    assert e.value.status == 3
    assert e.value.message.startswith(f"deepctxd accepted a connection on {path} but did not answer within 0.3 s")


def test_environment_variable_names_the_socket(tmp_path: Path) -> None:
    sock = tmp_path / "env.sock"
    r = subprocess.run([sys.executable, "-m", "deepctx.cli.main", "ps"], capture_output=True, text=True,
                       env={"DEEPCTX_SOCKET": str(sock), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 3 and str(sock) in r.stderr


def test_bad_arguments_exit_2(capsys) -> None:
    with pytest.raises(SystemExit) as e:
        main(["attach", "not-a-pid"])
    assert e.value.code == 2
    assert "invalid int value" in capsys.readouterr().err


def doc_for_render() -> dict:
    t = CallTree("app")
    th = thread_frame(7, "main")
    m = Frame("native", "main", module="app")
    t.add([th, m, Frame("native", "outer", module="app"), Frame("native", "hot_loop", module="app")], "cpu_samples", 90)
    t.add([th, m, Frame("python", "step", file="train.py", line=12)], "cpu_samples", 9)
    t.add([th, m, Frame("native", "rare", module="app")], "cpu_samples", 1)
    r = CaptureResult(pid=7, command="app", duration_s=1.0, started_unix=0.0, ended="duration", sample_hz=99, tree=t)
    return to_doc(to_message(r))


def test_tree_render_shows_percentages_and_hides_small_nodes() -> None:
    out = io.StringIO()
    render(doc_for_render(), min_percent=2.0, console=Console(file=out, width=100, color_system=None))
    text = out.getvalue()
    # % of the total, then CPU samples self and total; Python `step` ran below native `main`, a start-up
    # frame to a Python reader: folded, `step` hangs below its thread and `main` keeps its native callees
    assert "100.0%                 100 [thread] main (7)" in text
    assert " 91.0%                  91 ├─main  app" in text
    assert " 90.0%        90        90 │ │ └─hot_loop  app" in text
    assert "  9.0%         9         9 └─step  train.py:12" in text
    assert "rare" not in text
    assert "(1 nodes below 2.0%" in text


def test_tree_render_in_a_narrow_terminal_keeps_the_numbers() -> None:
    out = io.StringIO()
    render(doc_for_render(), min_percent=0, console=Console(file=out, width=40, color_system=None))
    # the frame column gives way: numbers whole, names cut with an ellipsis, nothing wrapped
    assert " 90.0%        90        90 │ │ └─hot_l…" in out.getvalue()


def test_tree_render_says_when_gpu_figures_were_scaled_up() -> None:
    doc = doc_for_render()
    out = io.StringIO()
    render(doc, console=Console(file=out, width=120, color_system=None))
    assert "scaled up" not in out.getvalue()  # no duty cycle: nothing to say
    for permille, said in ((100, True), (1000, False)):
        doc["stats"]["gpu_probe_duty_permille"] = permille
        out = io.StringIO()
        render(doc, console=Console(file=out, width=120, color_system=None))
        assert ("scaled up" in out.getvalue()) is said, out.getvalue()
    assert "GPU calls and device times: recorded 10.0% of the time, scaled up to the capture by time (estimates: the " \
        "shares between paths hold; totals run low where recording slows the job)" in " ".join(text_of(doc, 100).split())
    doc["stats"]["gpu_busy_scaled_permille"] = 1000  # scaled by NVML's busy time
    assert "GPU calls and device times: recorded 10.0% of the time, scaled up to the capture by the GPU's busy " \
        "time (estimates: the shares between paths hold)" in " ".join(text_of(doc, 100).split())


def text_of(doc: dict, permille: int) -> str:
    doc["stats"]["gpu_probe_duty_permille"] = permille
    out = io.StringIO()
    render(doc, console=Console(file=out, width=120, color_system=None))
    return out.getvalue()


def test_a_connection_lost_mid_capture_is_not_called_not_running() -> None:
    import grpc

    from deepctx.cli.client import rpc_error

    class Lost(grpc.RpcError):
        def code(self) -> grpc.StatusCode:
            return grpc.StatusCode.UNAVAILABLE

    assert "deepctxd is not running" in rpc_error(Lost(), "/run/d.sock").message
    mid = rpc_error(Lost(), "/run/d.sock", streaming=True)
    assert mid.status == 3
    assert mid.message.startswith("deepctxd closed the connection on /run/d.sock before the profile came")
