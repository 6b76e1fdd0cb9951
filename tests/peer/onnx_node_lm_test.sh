#!/usr/bin/env bash
# ONNX's backend node tests of the opset-23 transformer ops (test_attention_*, test_rotary_embedding*,
# test_rms_normalization*, and their _expanded function bodies) from the PyPI onnx package's data
# folder, which Debian's libonnx-testdata (ONNX 1.12) lacks, through pare's interpreter: every test
# must end as tests/conformance/onnx_node_expected_lm.txt lists it (tests/conformance/onnx_node_tests.cpp).
#
# Env: PARE_BUILD_DIR (onnx_node_tests is $PARE_BUILD_DIR/tests/onnx_node_tests), PARE_SOURCE_DIR,
# PARE_PYTHON. Without onnx in the venv the test fails under make test and CI, and skips otherwise.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src=${PARE_SOURCE_DIR:-$(cd "$here/../.." && pwd)}
build=${PARE_BUILD_DIR:-$src/build}
source "$src/tests/peers.sh"
need_python "onnx"
runner=$build/tests/onnx_node_tests
if [[ ! -x "$runner" ]]; then
  echo "FAIL: $runner is missing (build the onnx_node_tests target)"
  exit 1
fi
data=$("$PY" -c 'import os, onnx; print(os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "node"))')
"$runner" --data "$data" --only test_attention_ --only test_rotary_embedding --only test_rms_normalization \
  --expected "$src/tests/conformance/onnx_node_expected_lm.txt" "$@"
