#!/usr/bin/env bash
# Build, or reuse, the simulated GPU node image: Debian with python3, setproctitle, procps, iproute2 (ss),
# psmisc, util-linux (setpriv, runuser), systemd (systemd-sysv, dbus), the NVML test double as the
# system's libnvidia-ml.so.1, pynvml, the gpusim helpers, the SGLang stand-in (`sglang` on PATH), a
# model directory (/models/llama-sim) and the decoy GPU daemons.
#
# A node runs either with a reaper as PID 1 (`podman run --init`, the image's default command
# `sleep infinity`), or with systemd as PID 1, as a real GPU node does: `podman run --systemd=always
# IMAGE /lib/systemd/systemd` (molecule/systemd). Either way the entry point gpuops-node-init sets up
# the simulated GPUs first, then execs the command.
#
# The stand-in runs with the short timings of the tests (GPUSIM_SGLANG_* in the image's
# environment: load 0.3 s, watchdog 0.2 s); a container's own -e settings override them.
#
# Usage: tests/sim/image/build.sh [BUILD_DIR]       (after `make sim`; BUILD_DIR defaults to build)
# Prints the image reference, localhost/gpuops-node:<hash of every input>, and writes it to
# BUILD_DIR/sim/image/ref. The debootstrap root file system is cached as a tarball in
# BUILD_DIR/sim/image, so a change to the simulator only costs a re-import.
#
# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
build=$(realpath -m "${1:-$root/build}")
python=${PYTHON:-$root/.venv/bin/python}
podman=${PODMAN:-podman}
name=localhost/gpuops-node
suite=bookworm
packages=python3,python-is-python3,python3-setproctitle,python3-yaml,procps,psmisc,iproute2,util-linux,systemd,systemd-sysv,dbus
work=$build/sim/image

log() { echo "build.sh: $*" >&2; }

sim=$build/sim
pynvml=$("$python" -c 'import pynvml; print(pynvml.__file__)')
binaries=("$sim/lib/libnvidia-ml.so.1" "$sim/bin/nvidia-persistenced" "$sim/bin/nv-hostengine" "$pynvml")
trees=(tests/sim/image tests/sim/gpusim tests/sim/standin)
for f in "${binaries[@]}"; do
    [[ -f $f ]] || { log "missing $f (run make sim)"; exit 1; }
done

sources() { (cd "$root" && find "${trees[@]}" -type f ! -path '*/__pycache__/*' ! -name '*.pyc' | LC_ALL=C sort); }
tag=$({ (cd "$root" && sources | xargs sha256sum)
        for f in "${binaries[@]}"; do sha256sum <"$f"; done
        echo "$suite $packages"; } | sha256sum | cut -c1-12)
image=$name:$tag
mkdir -p "$work"

if "$podman" image exists "$image"; then
    log "reusing $image"
else
    base=$work/$suite-$(echo "$suite $packages" | sha256sum | cut -c1-12).tar
    if [[ ! -f $base ]]; then
        log "debootstrap $suite ($packages)"
        rm -rf "$work/debootstrap"
        debootstrap --variant=minbase --include="$packages" "$suite" "$work/debootstrap" >"$work/debootstrap.log" 2>&1 \
            || { tail -20 "$work/debootstrap.log" >&2; exit 1; }
        rm -rf "$work"/debootstrap/var/cache/apt/archives/*.deb "$work"/debootstrap/var/lib/apt/lists/* \
            "$work"/debootstrap/usr/share/{doc,man,info}
        tar -C "$work/debootstrap" -cf "$base.tmp" .
        mv "$base.tmp" "$base"
        rm -rf "$work/debootstrap"
    fi

    log "assembling $image"
    tree=$work/root
    rm -rf "$tree"
    mkdir "$tree"
    tar -C "$tree" -xf "$base"
    dist=$tree/usr/lib/python3/dist-packages
    install -m 0755 "$sim/lib/libnvidia-ml.so.1" "$tree/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"
    install -m 0755 "$sim/bin/nvidia-persistenced" "$sim/bin/nv-hostengine" "$tree/usr/bin/"
    install -m 0755 "$here/gpuops-node-init" "$tree/usr/local/sbin/gpuops-node-init"
    install -m 0644 "$pynvml" "$dist/pynvml.py"
    mkdir -p "$tree/opt/gpusim"
    rsync -a --exclude __pycache__ "$root/tests/sim/gpusim" "$tree/opt/gpusim/"
    rsync -a --exclude __pycache__ "$root/tests/sim/standin/" "$tree/opt/sglang-standin/"
    ln -s /opt/sglang-standin/bin/sglang "$tree/usr/local/bin/sglang"
    printf '%s\n' /opt/gpusim /opt/sglang-standin >"$dist/gpuops-sim.pth"
    PYTHONPATH=$root/tests/sim "$python" -c 'import sys; from gpusim.standin import make_model_dir; make_model_dir(sys.argv[1])' \
        "$tree/models/llama-sim"
    ldconfig -r "$tree"

    tar -C "$tree" -c . | "$podman" import --quiet \
        --change 'ENTRYPOINT ["/usr/local/sbin/gpuops-node-init"]' \
        --change 'CMD ["sleep", "infinity"]' \
        --change 'ENV GPUSIM_GPUS=8' \
        --change 'ENV GPUSIM_SGLANG_LOAD_SECONDS=0.3' \
        --change 'ENV GPUSIM_SGLANG_WARMUP_SECONDS=0.2' \
        --change 'ENV GPUSIM_SGLANG_TOKEN_DELAY=0.005' \
        --change 'ENV GPUSIM_SGLANG_WATCHDOG_INTERVAL=0.2' \
        --change "LABEL gpuops.sim.inputs=$tag" \
        - "$image" >/dev/null
    rm -rf "$tree"
fi
"$podman" tag "$image" "$name:latest"
# Keep one node image per build directory: remove the one this build directory made before (its
# ref), unless a container still uses it. Images that other build directories (other checkouts on
# the same machine) made are theirs to keep.
previous=$(cat "$work/ref" 2>/dev/null || true)
if [[ -n $previous && $previous != "$image" ]] && "$podman" image exists "$previous"; then
    "$podman" untag "$previous" >/dev/null 2>&1 || true
    "$podman" images -q --filter dangling=true --filter label=gpuops.sim.inputs="${previous##*:}" \
        | xargs -r "$podman" rmi >/dev/null 2>&1 || true
fi
echo "$image" >"$work/ref"
echo "$image"
