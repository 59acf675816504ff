"""The PC-sampling options of `deepctx run` and `deepctx attach` (--pc-sampling, --kernel, --pc-period,
--pc-duration), checked before anything starts: what `deepctx run` puts in the command's environment for
the CUPTI agent (native/pc_sampling.h) and deepctxd (probes/pc_sampling.py) to read, and what `deepctx attach`
sends in its request (the daemon hands them to the agent it finds or loads in the process)."""

from __future__ import annotations

import argparse
import re

from deepctx.cli.client import CliError
from deepctx.proto.v1 import deepctx_pb2 as pb

PERIOD_MIN, PERIOD_MAX = 5, 31  # CUPTI's SAMPLING_PERIOD: 2^n cycles between samples
DEFAULT_DURATION_S = 30.0
MAX_DURATION_S = 3600.0


def add_pc_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pc-sampling", action="store_true",
                   help="sample the PCs of the GPU kernels (CUPTI's PC sampling): each kernel's hot source lines "
                        "and SASS instructions with their stall reasons (attach: with --gpu-activity, which loads "
                        "the agent, where deepctxd's attach_pc_sampling allows it, as it does by default; "
                        "default: off)")
    p.add_argument("--kernel", metavar="REGEX",
                   help="with --pc-sampling: keep the samples of kernels whose name matches (Python regex, "
                        "searched; default: every kernel)")
    p.add_argument("--pc-period", type=int, metavar="N",
                   help=f"with --pc-sampling: 2^N GPU cycles between samples, N in {PERIOD_MIN}..{PERIOD_MAX} "
                        "(default: CUPTI's, from the GPU's SM count)")
    p.add_argument("--pc-duration", type=float, metavar="S",
                   help=f"with --pc-sampling: stop sampling S seconds after it started (default "
                        f"{DEFAULT_DURATION_S:g}, at most {MAX_DURATION_S:g})")


def check_pc_arguments(args: argparse.Namespace, gpu_activity: bool = True) -> None:
    """Refuses what cannot work, before the command starts (exit status 2)."""
    extra = [flag for flag, v in (("--kernel", args.kernel), ("--pc-period", args.pc_period),
                                  ("--pc-duration", args.pc_duration)) if v is not None]
    if not args.pc_sampling:
        if extra:
            raise CliError(f"{', '.join(extra)} {'needs' if len(extra) == 1 else 'need'} --pc-sampling", 2)
        return
    if not gpu_activity:
        raise CliError("--pc-sampling needs --gpu-activity: the samples come from the CUPTI agent", 2)
    if args.kernel is not None:
        try:
            re.compile(args.kernel)
        except re.error as e:
            raise CliError(f"--kernel {args.kernel!r}: not a regular expression ({e})", 2) from None
    if args.pc_period is not None and not PERIOD_MIN <= args.pc_period <= PERIOD_MAX:
        raise CliError(f"--pc-period {args.pc_period}: must be {PERIOD_MIN} to {PERIOD_MAX} (2^N cycles)", 2)
    if args.pc_duration is not None and not 0 < args.pc_duration <= MAX_DURATION_S:
        raise CliError(f"--pc-duration {args.pc_duration:g}: must be more than 0 and at most {MAX_DURATION_S:g} s", 2)


def pc_environment(args: argparse.Namespace) -> dict[str, str]:
    """The command's environment for PC sampling (empty without --pc-sampling: nothing changes)."""
    if not args.pc_sampling:
        return {}
    env = {"DEEPCTX_PC_SAMPLING": "1",
           "DEEPCTX_PC_DURATION_MS": str(round(1000 * (args.pc_duration or DEFAULT_DURATION_S)))}
    if args.kernel is not None:
        env["DEEPCTX_PC_KERNEL"] = args.kernel
    if args.pc_period is not None:
        env["DEEPCTX_PC_PERIOD"] = str(args.pc_period)
    return env


def pc_request(args: argparse.Namespace) -> pb.PcSampling | None:
    """attach's PC-sampling options for its request (None without --pc-sampling: nothing asked)."""
    if not args.pc_sampling:
        return None
    return pb.PcSampling(kernel=args.kernel or "", period=args.pc_period or 0,
                         duration_ms=max(1, round(1000 * (args.pc_duration or DEFAULT_DURATION_S))))
