#!/usr/bin/env bash
# Idempotent set-up on Debian 12: installs the Debian packages gpipe-kokkos
# needs (only those missing), then configures and builds into build/ (-j2)
# and writes the language model's text data into data/ when missing.
# On a cluster, skip this script: see README.md, "On a cluster".
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

packages=(
  cmake g++ make pkg-config ccache
  libtrilinos-kokkos-dev libtrilinos-kokkos-kernels-dev libopenblas-dev libdnnl-dev
  libopenmpi-dev openmpi-bin libhdf5-openmpi-dev hdf5-tools
  libgtest-dev libbenchmark-dev
  libyaml-cpp-dev libcli11-dev libfmt-dev libspdlog-dev nlohmann-json3-dev zlib1g-dev
  dataset-fashion-mnist python3-h5py python3-matplotlib
  bible-kjv bible-kjv-text python3-yaml
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# ccache: a rebuild (and CI's second, sanitizer build of the same sources)
# compiles only what changed; paths relative to the checkout, so a fresh
# clone in another folder reuses the cache.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
if [ ! -f build/CMakeCache.txt ]; then
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache
fi
cmake --build build -j2

# The language model's text (inputs/kjv_gpt.yaml): the King James Bible as
# character ids, written once (docs/file-formats.md, "Token data").
if [ ! -f data/kjv_train.h5 ] || [ ! -f data/kjv_validation.h5 ]; then
  /usr/bin/python3 scripts/make_text_data.py data
fi
