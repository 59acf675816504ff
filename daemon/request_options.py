"""What a client's capture request asks beyond CaptureOptions (daemon/capture.py: the capture engine's own
options): the PC-sampling options of `deepctx attach --pc-sampling`, which only a request carries (a `deepctx
run` target's environment carries its own). ProbeSet reads them (probe_set.pc_options)."""

from __future__ import annotations

from dataclasses import dataclass

from deepctx.daemon.capture import CaptureOptions
from deepctx.probes.pc_sampling import PcsOptions


@dataclass
class RequestOptions(CaptureOptions):
    pc_sampling: PcsOptions | None = None  # None: as the target's environment says
