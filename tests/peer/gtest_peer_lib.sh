# Shared start of the peer tests whose C++ side is a file-driven gtest in distill_tests: sourced,
# not run. Sets PY, here, tests (the gtest binary) and tmp (removed on exit); without torch and
# numpy in PY the test fails under make test and CI, and skips (77) otherwise (tests/peers.sh).
# Usage: source gtest_peer_lib.sh NAME
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/../peers.sh"
tests=${PARE_BUILD_DIR:?set PARE_BUILD_DIR to the build folder}/tests/distill_tests
need_python "torch, numpy"
if [[ ! -x "$tests" ]]; then
  echo "FAIL: $tests is missing (build the distill_tests target)"
  exit 1
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/pare-$1.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
