# Shared start of the peer tests whose C++ side is a file-driven gtest (in distill_tests unless
# SUITE names another): sourced, not run. Sets PY, here, tests (the gtest binary) and tmp (removed on
# exit); without MODULES (default torch and numpy) in PY the test fails under make test and CI, and
# skips (77) otherwise (tests/peers.sh). run_gtest VAR TEST runs the one file-driven TEST with VAR=$tmp
# and fails the script, printing the gtest output, unless it ran and passed (a skip is a failure).
# Usage: source gtest_peer_lib.sh NAME [SUITE [MODULES]]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/../peers.sh"
suite=${2:-distill_tests}
tests=${PARE_BUILD_DIR:?set PARE_BUILD_DIR to the build folder}/tests/$suite
need_python "${3:-torch, numpy}"
if [[ ! -x "$tests" ]]; then
  echo "FAIL: $tests is missing (build the $suite target)"
  exit 1
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/pare-$1.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

run_gtest() {
  local rc=0
  env "$1=$tmp" "$tests" --gtest_filter="$2" >"$tmp/gtest.txt" 2>&1 || rc=$?
  if ((rc != 0)) || ! grep -q '\[  PASSED  \] 1 test' "$tmp/gtest.txt"; then
    echo "FAIL: $tests --gtest_filter=$2 (exit $rc):"
    head -c 20000 "$tmp/gtest.txt"
    exit 1
  fi
}
