#!/usr/bin/env bash
# Run HERE (with apt): downloads the Debian packages tools/gpu/build.sh unpacks on the GPU machine, which has no
# network and no Bazel, into .gpu-deps/ (ignored by git). Name .gpu-deps in the device tool's `carry`.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .gpu-deps  # ignored by .gitignore: the device tool carries only ignored paths named in its carry
cd .gpu-deps
apt-get download -o APT::Sandbox::User=root libabsl-dev libabsl20220623 libhwy-dev libhwy1 libtomlplusplus-dev \
  libtomlplusplus3 libgtest-dev >/dev/null
ls -1
