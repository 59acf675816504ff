"""Shared by the Python targets: a readiness line on stdout, and a deadline so a target left
behind by a failed test stops by itself."""

import json
import os
import sys
import threading
import time

DEADLINE = time.monotonic() + float(os.environ.get("DEEPCTX_TARGET_SECONDS", "120"))


def running():
    return time.monotonic() < DEADLINE


def ready(**info):
    """Tells the test that the stacks it expects are now running: `ready <pid> <json>`."""
    info.setdefault("version", list(sys.version_info[:3]))
    print(f"ready {os.getpid()} {json.dumps(info)}", flush=True)


def native_id():
    return threading.get_native_id()
