#!/usr/bin/env bash
# Installs the Debian 12 packages loom builds, tests and benchmarks with. Skips apt entirely
# when everything is already there (CI machines are reused), so it is cheap to call always.
set -euo pipefail
packages=(cmake g++ make ccache pkg-config libgtest-dev libgmock-dev libbenchmark-dev iproute2
          openmpi-bin libopenmpi-dev libgloo-dev nlohmann-json3-dev libhwloc-dev python3
          python3-dev pybind11-dev python3-pytest python3-numpy python3-torch libtorch-dev python3-pip
          python3-setuptools python3-wheel hpcc lammps python3-mpi4py gfortran libucx-dev
          ucx-utils clang libclang-rt-dev  # clang and libFuzzer: scripts/fuzz.sh
          mpich libmpich-dev)  # beside Open MPI, which stays the default (alternatives: 50 > 40)
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" > /dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  sudo_cmd=""
  [[ $(id -u) -ne 0 ]] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -q --no-install-recommends \
    "${missing[@]}"
fi
