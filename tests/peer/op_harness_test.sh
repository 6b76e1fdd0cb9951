#!/usr/bin/env bash
# Peer test: the op harness against ONNX Runtime. core_tests' OpHarness suite (gradients, FLOPs,
# coverage of the registry, hand references) runs with PARE_OP_HARNESS_DIR set, so that
# OpHarness.WritesEveryCaseForOnnxRuntime writes every case as a one-node ONNX model with its
# inputs and pare's outputs; op_harness_ort.py then runs them all in ONNX Runtime (PyPI onnxruntime)
# and compares,
# printing the ops covered and the worst difference per op family, and FAIL lines naming the op.
# Then it nudges one of pare's outputs and checks that the comparison names that op.
#
# Env: PARE_BUILD_DIR (core_tests is $PARE_BUILD_DIR/tests/core_tests), PARE_SOURCE_DIR,
# PARE_PYTHON. Without onnxruntime the test fails under make test and CI, and skips otherwise
# (tests/peers.sh).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src=${PARE_SOURCE_DIR:-$(cd "$here/../.." && pwd)}
build=${PARE_BUILD_DIR:-$src/build}
tests=$build/tests/core_tests

source "$src/tests/peers.sh"
need_python "numpy, onnxruntime"
if [[ ! -x "$tests" ]]; then
  echo "FAIL: $tests is missing (build the core_tests target)"
  exit 1
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/pare-op-harness.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

rc=0
PARE_OP_HARNESS_DIR=$tmp "$tests" --gtest_filter='OpHarness.*' >"$tmp/gtest.txt" 2>&1 || rc=$?
grep -E '^\[ op harness \]' "$tmp/gtest.txt" || true
if ((rc != 0)); then
  echo "FAIL: core_tests --gtest_filter='OpHarness.*' (exit $rc):"
  tail -c 6000 "$tmp/gtest.txt"
  exit 1
fi
if [[ ! -s "$tmp/manifest.jsonl" ]]; then
  echo "FAIL: OpHarness.WritesEveryCaseForOnnxRuntime wrote no manifest"
  exit 1
fi
rc=0
"$PY" "$here/op_harness_ort.py" "$tmp" || rc=$?

# The comparison can fail: pare's Conv output nudged by 1e-3 in one element must be named.
victim=$(ls "$tmp"/*_Conv_Pads1Bias.pare.y0.npy)
"$PY" -c '
import sys, numpy as np
t = np.load(sys.argv[1])
t.reshape(-1)[7] += 1e-3
with open(sys.argv[1], "wb") as f:
    np.save(f, t)
' "$victim"
if "$PY" "$here/op_harness_ort.py" "$tmp" >"$tmp/nudged.txt" 2>&1; then
  echo "FAIL: op_harness_ort.py accepted a Conv output nudged by 1e-3"
  exit 1
fi
if ! grep -q '^FAIL Conv (case Conv_Pads1Bias' "$tmp/nudged.txt"; then
  echo "FAIL: op_harness_ort.py did not name Conv for a nudged Conv output:"
  cat "$tmp/nudged.txt"
  exit 1
fi
echo "self-check: a Conv output nudged by 1e-3 is reported as 'FAIL Conv (case Conv_Pads1Bias ...)'"
exit $rc
