#!/bin/sh
# Writes a kernel numerics header (bnb/jit/kernels/NAME.cuh) as the host C++ header NAME_host.h, its own includes of
# kernel headers renamed alike, so host tests compile the very functions the GPU runs. Used by bnb/jit/BUILD.bazel's
# *_host_h genrules and by tools/gpu/cc_binaries.sh.
# Usage: host_header.sh FILE.cuh > FILE_host.h
set -eu
sed 's/^#include "\([a-z0-9_]*\)\.cuh"/#include "\1_host.h"/' "$1"
