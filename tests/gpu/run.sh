#!/usr/bin/env bash
# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# The real-GPU check (docs/real-gpu.md): gpu_info, gpu_verify and gpu_reap against a
# process that really holds GPU memory, through ansible-playbook with the local connection.
#
# Usage: tests/gpu/run.sh [CHECK OPTIONS]          on a machine with an NVIDIA GPU and PyTorch
#        tests/gpu/run.sh --sim [CHECK OPTIONS]    the same sequence against the simulated GPU node
# CHECK OPTIONS go to tests/gpu/check.py (--help lists them).
#
# Needs the bundle from `make gpu-bundle` (build/gpu-wheels): no package index is used.
# Results go to $OUT (or build/gpu-check/out) as gpu-check.json. Without a GPU it prints
# "no NVIDIA GPU: skipped (...)", writes a JSON saying so and exits 0.
#
# Environment: GPU_CHECK_PYTHON (python3), GPU_CHECK_WHEELS (build/gpu-wheels),
# GPU_CHECK_WORK (build/gpu-check), GPU_CHECK_MIB (40960; 2048 with --sim).
set -euo pipefail
cd "$(dirname "$0")/../.."

mode=real
if [ "${1:-}" = --sim ]; then
    mode=sim
    shift
fi
python=${GPU_CHECK_PYTHON:-python3}
wheels=${GPU_CHECK_WHEELS:-build/gpu-wheels}
work=${GPU_CHECK_WORK:-build/gpu-check}
out=${OUT:-$work/out}
mkdir -p "$work" "$out"
export LC_ALL=C.UTF-8       # ansible-core refuses to run without a UTF-8 locale
work=$(cd "$work" && pwd)
started=$(date +%s)

skip() {
    echo "no NVIDIA GPU: skipped ($1)"
    printf '{"skipped": true, "mode": "%s", "reason": "%s", "host": "%s"}\n' "$mode" "$1" "$(uname -n)" >"$out/gpu-check.json"
    exit 0
}

if [ "$mode" = real ]; then
    command -v nvidia-smi >/dev/null || skip "nvidia-smi not found"
    nvidia-smi -L >/dev/null 2>&1 || skip "nvidia-smi cannot reach the driver (NVML init fails)"
fi
if ! ls "$wheels"/ansible_core-*.whl >/dev/null 2>&1; then
    echo "no wheel bundle in $wheels: run 'make gpu-bundle' and carry build/gpu-wheels" >&2
    exit 2
fi

# A fresh venv that sees the interpreter's own packages (torch). Where python3 is itself a
# venv, --system-site-packages reaches only the base interpreter, so its site-packages are
# appended through a .pth file after the bundle is installed (the bundle's versions win).
venv=$work/venv
rm -rf "$venv"
if "$python" -m venv --system-site-packages "$venv" >"$work/venv.log" 2>&1; then
    pip=("$venv/bin/python" -m pip)
else    # an interpreter without ensurepip: the venv gets its packages from the interpreter's pip
    rm -rf "$venv"
    "$python" -m venv --system-site-packages --without-pip "$venv"
    pip=("$python" -m pip --python "$venv/bin/python")
fi
"${pip[@]}" install --quiet --disable-pip-version-check --no-index --ignore-installed --find-links "$wheels" \
    -r tests/gpu/requirements.txt
purelib=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
"$python" -c 'import site; print("\n".join(site.getsitepackages()))' >"$purelib/zz-gpu-check-parent.pth"

# The collection: the bundled tarball unless the tree changed after it was built.
newest_tarball() { find "$1" -maxdepth 1 -name 'gpuops-host-*.tar.gz' -printf '%T@ %p\n' 2>/dev/null | sort -rn | head -n 1 | cut -d' ' -f2- || true; }
tarball=$(newest_tarball "$wheels")
if [ -z "$tarball" ] || [ -n "$(find galaxy.yml meta plugins roles -newer "$tarball" -print -quit 2>/dev/null)" ]; then
    "$venv/bin/ansible-galaxy" collection build --force --output-path "$work" . >/dev/null
    tarball=$(newest_tarball "$work")
fi
rm -rf "$work/collections"
export ANSIBLE_COLLECTIONS_PATH=$work/collections
"$venv/bin/ansible-galaxy" collection install --offline --force -p "$work/collections" "$tarball" >/dev/null
echo "collection $(basename "$tarball"), venv $venv ($("$venv/bin/python" -V)), set up in $(($(date +%s) - started)) s"

export ANSIBLE_HOME=$work/ansible-home ANSIBLE_REMOTE_TMP=$work/ansible-tmp ANSIBLE_LOCAL_TEMP=$work/ansible-tmp
export ANSIBLE_LOCALHOST_WARNING=false ANSIBLE_INVENTORY_UNPARSED_WARNING=false ANSIBLE_NOCOLOR=1
export PYTHONUNBUFFERED=1
# Everything below is bounded: the whole run stays under 5 minutes.
exec timeout -k 15 270 "$venv/bin/python" tests/gpu/check.py --mode "$mode" --out "$out" --work "$work" \
    --mib "${GPU_CHECK_MIB:-$([ "$mode" = sim ] && echo 2048 || echo 40960)}" "$@"
