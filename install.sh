#!/usr/bin/env bash
# deepctx set-up for Debian 12, as root. Installs everything deepctx needs, then runs a job:
#   ./install.sh demo    install, start deepctxd, profile the bundled example (on a simulated GPU without one),
#                        print the profile and findings, write a trace and the HTML report to demo-output/
#   ./install.sh test    install, run the whole test suite (unit, integration on real eBPF, GPU tests skip
#                        without a GPU)
#   ./install.sh service install, then put deepctxd in place as a systemd service (unit, sysusers, tmpfiles)
#   ./install.sh         install only
# Installs: the Debian packages listed below (README names each), kernel headers, a virtualenv in
# .venv that imports the system's bcc, and the Python dependencies (pip). Safe to run again.
set -euo pipefail
cd "$(dirname "$(readlink -f "$0")")"
ROOT=$PWD
VENV=$ROOT/.venv
JOB=${1:-install}

say() { printf '\033[1mdeepctx:\033[0m %s\n' "$*" >&2; }
die() { printf '\033[1;31mdeepctx:\033[0m %s\n' "$*" >&2; exit 1; }

case "$JOB" in install|demo|test|service) ;; *) die "unknown job '$JOB' (use: demo, test, service, or nothing to install only)";; esac
[ "$(id -u)" -eq 0 ] || die "run as root: deepctx loads BPF programs (e.g. sudo ./install.sh $JOB)"
[ -r /etc/debian_version ] || say "warning: this set-up is written for Debian 12; other systems may need other package names"

# --- system packages ---------------------------------------------------------------------------------
arch=$(dpkg --print-architecture)
kver=$(uname -r)
# libamdhip64-5: Debian's real AMD HIP runtime, whose entry points the CPU-only GPU tests probe
# chromium, golang-go (go tool pprof), fonts-dejavu-core: the HTML report and export tests' real consumers
# clickhouse-server, prometheus, bpftool: the service tests' real fleet store, scraper and BPF inspector
# strace: the security test that checks every system call of deepctxd against the unit's SystemCallFilter
packages=(python3-bpfcc python3-venv python3-dev gcc g++ make libc6-dev binutils systemtap-sdt-dev libamdhip64-5
          chromium golang-go fonts-dejavu-core clickhouse-server prometheus bpftool strace)
apt_ready=0
apt_update() {
  [ $apt_ready -eq 1 ] && return 0
  say "updating the package lists"
  apt-get update -qq
  apt_ready=1
}
missing=()
for p in "${packages[@]}"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p"); done
# Kernel headers for bcc: the exact ones when Debian has them, else the newest of this architecture.
headers_pkg=""
if [ ! -e "/lib/modules/$kver/build/include" ]; then
  apt_update
  if apt-cache show "linux-headers-$kver" >/dev/null 2>&1; then
    headers_pkg="linux-headers-$kver"
  else
    headers_pkg="linux-headers-$arch"
  fi
  dpkg-query -W -f='${Status}' "$headers_pkg" 2>/dev/null | grep -q "ok installed" || missing+=("$headers_pkg")
fi
if [ ${#missing[@]} -gt 0 ]; then
  apt_update
  say "installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if [ ! -e "/lib/modules/$kver/build/include" ]; then
  newest=$(ls -d /usr/src/linux-headers-*-"$arch" 2>/dev/null | sort -V | tail -1 || true)
  [ -n "$newest" ] || die "no kernel headers found under /usr/src (bcc needs them)"
  mkdir -p "/lib/modules/$kver"
  ln -sfn "$newest" "/lib/modules/$kver/build"
  common=${newest%-"$arch"}-common
  [ -d "$common" ] && ln -sfn "$common" "/lib/modules/$kver/source"
  say "NOTE: no headers package matches the running kernel $kver; linked $(basename "$newest") instead."
  say "      bcc compiles against them; deepctx's probes read no kernel structures, so this is safe for them."
fi

# --- kernel interfaces ---------------------------------------------------------------------------------
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || say "warning: could not mount tracefs"
mountpoint -q /sys/kernel/debug || mount -t debugfs nodev /sys/kernel/debug 2>/dev/null || true

# --- virtualenv ------------------------------------------------------------------------------------------
if [ ! -x "$VENV/bin/python" ]; then
  say "creating the virtualenv $VENV"
  /usr/bin/python3 -m venv "$VENV"
fi
# The venv sees Debian's bcc (pure Python over libbcc.so) and nothing else of the system's packages.
bcc_dir=$(/usr/bin/python3 -c 'import bcc, os; print(os.path.dirname(os.path.dirname(bcc.__file__)))')
mkdir -p "$VENV/bcc-site"
ln -sfn "$bcc_dir/bcc" "$VENV/bcc-site/bcc"
site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$VENV/bcc-site" > "$site/deepctx-bcc.pth"
if ! "$VENV/bin/python" -c 'import deepctx.daemon.main, grpc, pytest, xdist' 2>/dev/null \
   || [ pyproject.toml -nt "$VENV/.deepctx-installed" ]; then
  say "installing Python dependencies into the virtualenv"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  # setuptools says on every editable install of a package mapped from folders that a folder named like the
  # package could shadow it (BuildBackendWarning, information only): ours are named as subpackages, not `deepctx`
  PYTHONWARNINGS="ignore:::setuptools.command.editable_wheel" "$VENV/bin/python" -m pip install -q -e ".[test]"
  touch "$VENV/.deepctx-installed"
fi
"$VENV/bin/python" -c 'import bcc' || die "the virtualenv cannot import bcc"
# The CUPTI agent (device activity) and the mock CUDA/CUPTI libraries its CPU-only tests drive.
if [ -n "$(native/cuda_include.sh cupti.h "$VENV/bin/python")" ]; then
  make -s -C native PYTHON="$VENV/bin/python" || die "building the CUPTI agent (native/) failed"
  make -s -C tests/mocks PYTHON="$VENV/bin/python" || die "building the mock CUDA/CUPTI libraries failed"
  say "built the CUPTI agent: native/build/libdeepctx_cupti.so"
else
  say "CUPTI's headers not found (pip install nvidia-cuda-cupti): the device-activity agent is not built"
fi
say "installed: $VENV/bin/deepctxd and $VENV/bin/deepctx (kernel $kver, $("$VENV/bin/python" --version))"

# --- jobs ------------------------------------------------------------------------------------------------
case "$JOB" in
  install) exit 0 ;;
  test)
    say "running the test suite"
    # pytest-xdist: a worker per CPU, each taking whole test files; tests that share the machine's users,
    # services or GPU keep to one worker each (tests/conftest.py). The few that measure rates, memory or calls
    # against whatever else runs then run alone. PYTEST_ADDOPTS='-m "not slow"' leaves the slow tier out
    # (pyproject.toml's markers); `.venv/bin/python -m pytest tests` runs everything in one process.
    # A run that a -k or -m in PYTEST_ADDOPTS leaves without tests (pytest's status 5) is no failure.
    rc=0
    run_pytest() { "$VENV/bin/python" -m pytest -ra --durations=15 -p no:cacheprovider "$@" tests || { r=$?; [ "$r" -eq 5 ] || rc=$r; }; }
    run_pytest -n auto --dist loadgroup --alone-tests without
    say "running the tests that measure against the rest of the machine, alone"
    run_pytest -n 0 --alone-tests only
    exit "$rc"
    ;;
  demo)
    exec "$VENV/bin/python" examples/demo.py
    ;;
  service)
    # The unit runs this checkout's deepctxd; the fragments make the `deepctx` group and the directories.
    say "installing the systemd unit, sysusers and tmpfiles fragments"
    sed "s#/opt/deepctx/.venv/bin/deepctxd#$VENV/bin/deepctxd#; s#file:///opt/deepctx/README.md#file://$ROOT/README.md#" \
      systemd/deepctxd.service > /etc/systemd/system/deepctxd.service
    install -D -m 0644 systemd/deepctx.sysusers.conf /etc/sysusers.d/deepctx.conf
    install -D -m 0644 systemd/deepctx.tmpfiles.conf /etc/tmpfiles.d/deepctx.conf
    mkdir -p /etc/deepctx
    systemd-sysusers /etc/sysusers.d/deepctx.conf
    systemd-tmpfiles --create /etc/tmpfiles.d/deepctx.conf
    if [ -d /run/systemd/system ]; then
      systemctl daemon-reload
      systemctl enable --now deepctxd.service
      say "deepctxd runs as a service: systemctl status deepctxd; add users to the deepctx group to let them profile any process"
    else
      say "installed; systemd is not running here, so start deepctxd yourself: $VENV/bin/deepctxd"
    fi
    ;;
esac
