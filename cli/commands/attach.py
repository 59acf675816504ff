"""deepctx attach PID: profile a running process through the daemon."""

from __future__ import annotations

import argparse
import sys

import grpc
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

from deepctx.cli.client import CliError, connect, rpc_error
from deepctx.cli.escape import printable
from deepctx.cli.formats import json_file, tree
from deepctx.cli.output import write_output
from deepctx.cli.pc_args import add_pc_arguments, check_pc_arguments, pc_request
from deepctx.cli.view_args import add_fold_arguments, fold_of, view_console
from deepctx.profiles.document import to_doc
from deepctx.proto.v1 import deepctx_pb2 as pb

PYTHON_MODES = {"auto": pb.PYTHON_AUTO, "on": pb.PYTHON_ON, "off": pb.PYTHON_OFF}
GPU_PROBES = {"auto": pb.GPU_AUTO, "on": pb.GPU_ON, "off": pb.GPU_OFF}
CALL_PATH_MODES = {"exact": pb.MODE_EXACT, "sampled": pb.MODE_SAMPLED}
GPU_ACTIVITY = {"auto": pb.GPU_ACTIVITY_AUTO, "on": pb.GPU_ACTIVITY_ON, "off": pb.GPU_ACTIVITY_OFF}


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("attach", help="profile a running process", description="Profile a running process.")
    p.add_argument("pid", type=int, help="the process to profile (its threads included)")
    p.add_argument("--duration", type=float, default=10.0, help="seconds to capture (default 10)")
    p.add_argument("--rate", type=int, default=0, dest="sample_hz",
                   help="CPU samples per second (default: the daemon's, 99)")
    p.add_argument("--kernel-stacks", action="store_true", help="also record kernel stacks")
    p.add_argument("--python", choices=sorted(PYTHON_MODES), default="auto",
                   help="walk Python frames: auto (when the target runs CPython; the default), on (required), off")
    p.add_argument("--native-python", action="store_true", help="keep libpython's own native frames")
    gpu = p.add_mutually_exclusive_group()
    gpu.add_argument("--gpu", dest="gpu", action="store_const", const="on",
                     help="probe GPU APIs, also in GPU libraries the target loads later (default: probe those it has "
                          "loaded, if any)")
    gpu.add_argument("--no-gpu", dest="gpu", action="store_const", const="off",
                     help="no GPU API probes (default: probe the GPU libraries the target has loaded, if any)")
    p.set_defaults(gpu="auto")
    act = p.add_mutually_exclusive_group()
    act.add_argument("--gpu-activity", dest="gpu_activity", action="store_const", const="on",
                     help="device times through CUPTI: loads deepctx's agent into the process (ptrace) when it "
                          "has none (default: device times only from an agent the process already runs)")
    act.add_argument("--no-gpu-activity", dest="gpu_activity", action="store_const", const="off",
                     help="no device times, even from an agent the process has (default: device times from an agent "
                          "the process already runs)")
    p.set_defaults(gpu_activity="auto")
    p.add_argument("--trace", action="store_true",
                   help="record every API call and device record (implies --gpu-activity); with -o FILE, write a "
                        "Chrome/Perfetto trace that Holistic Trace Analysis reads")
    p.add_argument("--mode", choices=["exact", "sampled"],
                   help="GPU calls: the call path of every call (exact), or of a fraction with exact counts "
                        "(sampled, the default; --trace captures in exact mode unless told otherwise)")
    add_duty_arguments(p)
    add_pc_arguments(p)
    p.add_argument("--format", choices=["tree", "json"], default="tree",
                   help="tree: the top-down tree on the terminal (default); json: the profile document (docs/formats.md)")
    p.add_argument("-o", "--output", help="write the profile here (JSON; gzipped when it ends in .gz) instead of stdout")
    p.add_argument("--min-percent", type=float, default=0.5, help="tree: hide nodes below this share of the total, in percent (default 0.5)")
    p.add_argument("--depth", type=int, default=64, help="tree: deepest level shown (default 64)")
    add_fold_arguments(p)
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(run=run)


def add_duty_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--gpu-duty", type=float, default=None, metavar="SHARE",
                   help="keep the GPU probes and device activity (CUPTI) on for this share of each period only, "
                        "e.g. 0.1, and scale their counts and GPU times up to the capture: a fraction of the "
                        "cost, at a sample's precision (default: on all the time)")
    p.add_argument("--gpu-duty-period", type=float, default=None, metavar="S",
                   help="the period of --gpu-duty in seconds (default: the daemon's, 2)")


def check_duty(gpu_duty: float | None, period_s: float | None) -> tuple[float, float]:
    """Flags the daemon would refuse, refused before it is asked (it checks them all again); the request's
    values, where 0 stands for "not given" (so a 0 the user typed must not reach it: it would mean a
    capture with the probes on all the time, the opposite of what was asked)."""
    if gpu_duty is not None and not 0 < gpu_duty <= 1:
        raise CliError(f"--gpu-duty must be a share above 0 and at most 1 (e.g. 0.1), not {gpu_duty:g}", 2)
    if period_s is not None and period_s <= 0:  # nan goes on: the daemon names its range
        raise CliError(f"--gpu-duty-period must be a positive number of seconds, not {period_s:g}", 2)
    return gpu_duty or 0.0, period_s or 0.0


def check_rate(sample_hz: int) -> None:
    if sample_hz < 0:
        raise CliError(f"--rate must be a positive number of samples per second, not {sample_hz}", 2)


def call_path_mode(args: argparse.Namespace) -> str:
    """--mode, else sampled (the cheap default), or exact for --trace (a trace shows every launch)."""
    return args.mode or ("exact" if args.trace else "sampled")


def attach_request(pid: int, duration_s: float, *, sample_hz: int = 0, kernel_stacks: bool = False,
                   python: str = "auto", native_python: bool = False, gpu: str = "auto", mode: str = "exact",
                   gpu_activity: str = "auto", trace: bool = False, gpu_duty: float = 0.0,
                   gpu_duty_period_s: float = 0.0, pc_sampling: pb.PcSampling | None = None) -> pb.AttachRequest:
    """The request every capture through the daemon sends (attach, run, analyze PID, report --pid), from
    the flags' values: python in PYTHON_MODES, gpu in GPU_PROBES, mode in CALL_PATH_MODES, gpu_activity in
    GPU_ACTIVITY. --trace needs device records, so it turns GPU activity on. gpu_duty 0: no duty cycle.
    pc_sampling: attach's PC-sampling options (None: none asked; `run` asks through the command's environment)."""
    return pb.AttachRequest(pid=pid, duration_s=duration_s, sample_hz=sample_hz, kernel_stacks=kernel_stacks,
                            python=PYTHON_MODES[python], native_python=native_python, gpu=GPU_PROBES[gpu],
                            mode=CALL_PATH_MODES[mode], gpu_activity=GPU_ACTIVITY["on" if trace else gpu_activity],
                            trace=trace, gpu_duty=gpu_duty, gpu_duty_period_s=gpu_duty_period_s,
                            pc_sampling=pc_sampling)


def capture(stub: object, req: pb.AttachRequest, socket: str, show_progress: bool) -> pb.Profile:
    err = Console(stderr=True)
    progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), TextColumn("{task.fields[samples]} samples"),
                        TimeRemainingColumn(), console=err, transient=True, disable=not show_progress)
    profile = None
    answered = False
    try:
        with progress:
            task = progress.add_task(f"pid {req.pid}: starting", total=req.duration_s, samples=0)
            for ev in stub.Attach(req):  # type: ignore[attr-defined]
                answered = True
                if ev.HasField("progress"):
                    p = ev.progress
                    progress.update(task, completed=p.elapsed_s, samples=p.samples,
                                    description=f"pid {req.pid}: {p.message}")
                else:  # the last event: what the daemon does after it (metrics, freeing memory) is not waited for
                    profile = ev.profile
                    break
    except grpc.RpcError as e:
        raise rpc_error(e, socket, streaming=answered) from None
    except KeyboardInterrupt:
        raise CliError("interrupted: the capture was cancelled", status=130) from None
    if profile is None:
        raise CliError("the daemon ended the capture without a profile")
    return profile


def run(args: argparse.Namespace) -> int:
    check_rate(args.sample_hz)
    check_pc_arguments(args, gpu_activity=args.gpu_activity == "on" or args.trace)
    gpu_duty, gpu_duty_period_s = check_duty(args.gpu_duty, args.gpu_duty_period)
    stub = connect(args.socket_path)
    req = attach_request(args.pid, args.duration, sample_hz=args.sample_hz, kernel_stacks=args.kernel_stacks,
                         python=args.python, native_python=args.native_python, gpu=args.gpu, mode=call_path_mode(args),
                         gpu_activity=args.gpu_activity, trace=args.trace, gpu_duty=gpu_duty,
                         gpu_duty_period_s=gpu_duty_period_s, pc_sampling=pc_request(args))
    profile = capture(stub, req, args.socket_path, show_progress=not args.quiet and sys.stderr.isatty())
    emit(to_doc(profile), args, Console(stderr=True))
    return 0


def emit(doc: dict, args: argparse.Namespace, err: Console) -> None:
    """Warnings on stderr; the trace (Chrome JSON) or the profile (JSON) to -o; the tree to stdout.
    Shared by `attach` and `run`."""
    for w in doc["warnings"]:
        err.print(f"[yellow]warning:[/] {escape(printable(w))}")  # may quote the target: escaped, not markup
    if args.trace and args.output:
        from deepctx.cli.formats.chrome import ChromeTrace
        from deepctx.profiles.exporter import ExportOptions

        write_output(args.output, ChromeTrace().export(doc, ExportOptions(fold=fold_of(args))))
        if not args.quiet:
            err.print(f"trace written to {args.output}")
    elif args.format == "json" or args.output:
        json_file.write(doc, args.output)
        if args.output and not args.quiet:
            err.print(f"profile written to {args.output}")
    if args.format == "tree":
        tree.render(doc, min_percent=args.min_percent, max_depth=args.depth, console=view_console(),
                    fold=fold_of(args))
