#!/usr/bin/env bash
# The NCCL code path (dist/nccl.cpp with PARE_WITH_NCCL) compiles here, against Debian's libtorch
# 1.13 headers and the CUDA toolkit's (nccl.h, cuda_runtime.h), though this libtorch cannot link it:
# a syntax-only compile with the build's own command line for that file. Skipped (77) without the
# CUDA toolkit. The 2.x build of the same file runs on the GPU machine (scripts/device-check).
set -euo pipefail
: "${PARE_BUILD_DIR:?}" "${PARE_SOURCE_DIR:?}"
cuda=${CUDA_HOME:-/usr/local/cuda}
if [ ! -f "$cuda/include/nccl.h" ] || [ ! -f "$cuda/include/cuda_runtime.h" ]; then
  echo "skip: no CUDA toolkit with NCCL at $cuda"; exit 77
fi
stub=$(mktemp -d)
trap 'rm -rf "$stub"' EXIT
# Debian ships c10/cuda's headers without the one CMake generates for a CUDA build.
mkdir -p "$stub/c10/cuda/impl"
printf '#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n' >"$stub/c10/cuda/impl/cuda_cmake_macros.h"
cmd=$(ninja -C "$PARE_BUILD_DIR" -t commands dist/CMakeFiles/pare_dist.dir/nccl.cpp.o | tail -n 1)
[ -n "$cmd" ] || { echo "FAIL: no compile command for dist/nccl.cpp in $PARE_BUILD_DIR"; exit 1; }
# The compiler line without the launcher, the object, its dependency file and the precompiled header.
cmd=$(sed -E 's/^.*ccache //; s/ -MD//; s/ -MT [^ ]+//; s/ -MF [^ ]+//; s/ -o [^ ]+nccl\.cpp\.o//; s/ -include [^ ]+cmake_pch\.hxx//g; s/ -Winvalid-pch//' <<<"$cmd")
if eval "$cmd -fsyntax-only -DPARE_WITH_NCCL -DUSE_C10D_NCCL -I$cuda/include -I$stub"; then
  echo "ok: dist/nccl.cpp compiles with NCCL against libtorch 1.13 and $cuda"
else
  echo "FAIL: dist/nccl.cpp does not compile with PARE_WITH_NCCL"; exit 1
fi
# And the test can fail: a planted error in the NCCL branch is reported.
sed 's/opts->timeout = timeout;/opts->no_such_field = timeout;/' "$PARE_SOURCE_DIR/dist/nccl.cpp" >"$stub/nccl_bad.cpp"
bad=${cmd//$PARE_SOURCE_DIR\/dist\/nccl.cpp/$stub\/nccl_bad.cpp}
if out=$(eval "$bad -fsyntax-only -DPARE_WITH_NCCL -DUSE_C10D_NCCL -I$cuda/include -I$stub" 2>&1); then
  echo "FAIL: a planted error in the NCCL branch compiled: the check checks nothing"; exit 1
fi
grep -q "no_such_field" <<<"$out" || { echo "FAIL: the planted error failed for another reason:"; echo "$out" | head -5; exit 1; }
echo "ok: a planted error in the NCCL branch is caught"
echo "all checks passed"
