"""The PC-sampling options (cli/pc_args.py): refused before anything starts, and what `deepctx run` puts in
the command's environment."""

from __future__ import annotations

import argparse

import pytest

from deepctx.cli.client import CliError
from deepctx.cli.pc_args import add_pc_arguments, check_pc_arguments, pc_environment, pc_request
from deepctx.proto.v1 import deepctx_pb2 as pb


def parse(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_pc_arguments(p)
    return p.parse_args(argv)


@pytest.mark.parametrize(("argv", "gpu_activity", "message"), [
    (["--kernel", "gemm"], True, "--kernel needs --pc-sampling"),
    (["--kernel", "gemm", "--pc-period", "9"], True, "--kernel, --pc-period need --pc-sampling"),
    (["--pc-sampling"], False, "--pc-sampling needs --gpu-activity: the samples come from the CUPTI agent"),
    (["--pc-sampling", "--kernel", "(gemm"], True, "--kernel '(gemm': not a regular expression"),
    (["--pc-sampling", "--pc-period", "4"], True, "--pc-period 4: must be 5 to 31 (2^N cycles)"),
    (["--pc-sampling", "--pc-period", "32"], True, "--pc-period 32: must be 5 to 31 (2^N cycles)"),
    (["--pc-sampling", "--pc-duration", "0"], True, "--pc-duration 0: must be more than 0 and at most 3600 s"),
])
def test_refusals(argv: list[str], gpu_activity: bool, message: str) -> None:
    with pytest.raises(CliError) as e:
        check_pc_arguments(parse(*argv), gpu_activity=gpu_activity)
    assert str(e.value).startswith(message) and e.value.status == 2


def test_the_environment_the_agent_and_the_daemon_read() -> None:
    args = parse("--pc-sampling", "--kernel", "^gemm", "--pc-period", "9", "--pc-duration", "2.5")
    check_pc_arguments(args)
    assert pc_environment(args) == {"DEEPCTX_PC_SAMPLING": "1", "DEEPCTX_PC_DURATION_MS": "2500",
                                    "DEEPCTX_PC_KERNEL": "^gemm", "DEEPCTX_PC_PERIOD": "9"}
    assert pc_environment(parse("--pc-sampling")) == {"DEEPCTX_PC_SAMPLING": "1", "DEEPCTX_PC_DURATION_MS": "30000"}


def test_off_by_default_changes_nothing() -> None:
    args = parse()
    check_pc_arguments(args, gpu_activity=False)
    assert pc_environment(args) == {}
    assert pc_request(args) is None


def test_the_options_attach_sends() -> None:
    args = parse("--pc-sampling", "--kernel", "^gemm", "--pc-period", "9", "--pc-duration", "2.5")
    assert pc_request(args) == pb.PcSampling(kernel="^gemm", period=9, duration_ms=2500)
    assert pc_request(parse("--pc-sampling")) == pb.PcSampling(kernel="", period=0, duration_ms=30000)
    assert pc_request(parse("--pc-sampling", "--pc-duration", "0.0001")).duration_ms == 1  # 0 would be the default
