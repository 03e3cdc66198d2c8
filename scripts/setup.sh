#!/usr/bin/env bash
# Installs everything mds needs on a fresh Debian 12 machine, then configures and builds it.
#   scripts/setup.sh            Debian packages + .venv (torch 2.11, cross-check packages) + build/
#   scripts/setup.sh PHASE...   only these of the three, in this order: system (Debian packages),
#                               python (.venv), build (build/; needs the other two done)
#   MDS_BUILD_DIR=dir ...       build somewhere else
#   MDS_SKIP_APT=1 ...          do not call apt-get (packages already there, or no root)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
build=${MDS_BUILD_DIR:-build}
phases=" ${*:-system python build} "
for p in $phases; do
  case $p in system|python|build) ;; *) echo "setup: unknown phase '$p' (system, python or build)" >&2; exit 2 ;; esac
done

apt_packages=(build-essential cmake ninja-build pkg-config python3-venv
              libcli11-dev nlohmann-json3-dev libzstd-dev zstd libcurl4-openssl-dev libssl-dev doctest-dev
              clang libclang-rt-dev
              libgloo-dev)  # gloo's headers: LibTorch's ProcessGroupGloo.hpp includes them (the code is in libtorch_cpu)
# The single-node SLURM the watchdog's integration test starts (without recommends: 7 packages,
# not the 35 of slurm-wlm with its GPU and database plugins).
# Open MPI's mpirun: test_train_dp.py starts mds-train with it (mds itself links no MPI).
# Chromium: test_report.py renders mds-report's page headless (screenshot and DOM).
apt_packages_norec=(slurmctld slurmd slurm-client munge openmpi-bin chromium)
if [[ $phases == *" system "* && "${MDS_SKIP_APT:-0}" != 1 ]]; then
  missing=() missing_norec=()
  installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
  for p in "${apt_packages[@]}"; do installed "$p" || missing+=("$p"); done
  for p in "${apt_packages_norec[@]}"; do installed "$p" || missing_norec+=("$p"); done
  if ((${#missing[@]} + ${#missing_norec[@]})); then
    echo "setup: installing Debian packages: ${missing[*]} ${missing_norec[*]}" >&2
    sudo_cmd=(); [[ $(id -u) -ne 0 ]] && sudo_cmd=(sudo)
    "${sudo_cmd[@]}" apt-get update -qq
    if ((${#missing[@]})); then
      DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
    if ((${#missing_norec[@]})); then
      DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends \
        "${missing_norec[@]}" >/dev/null
    fi
  fi
fi

if [[ $phases == *" python "* ]]; then
  # The virtual environment lives in the checkout (.venv, ignored by git).
  if [[ ! -x .venv/bin/python ]]; then
    echo "setup: creating .venv" >&2
    python3 -m venv .venv
  fi
  # A stamp with the requirements last installed: re-run pip only when they change.
  if ! cmp -s scripts/requirements.txt .venv/.mds-requirements; then
    echo "setup: installing Python packages into .venv (torch is large; this takes a few minutes once)" >&2
    .venv/bin/python -m pip install -q --disable-pip-version-check -r scripts/requirements.txt
    cp scripts/requirements.txt .venv/.mds-requirements
  fi
fi

if [[ $phases == *" build "* ]]; then
  generator=()
  command -v ninja >/dev/null && generator=(-G Ninja)
  if [[ ! -f "$build/CMakeCache.txt" ]]; then
    cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release ${MDS_CMAKE_ARGS:-} >&2
  fi
  cmake --build "$build" -j "$(nproc)" >&2
  echo "setup: built into $root/$build" >&2
fi
