# Shared start of the peer tests whose C++ side is a file-driven gtest in distill_tests: sourced,
# not run. Sets PY, here, tests (the gtest binary) and tmp (removed on exit); exits 77 (skipped)
# when /usr/bin/python3 lacks torch or numpy. Usage: source gtest_peer_lib.sh NAME
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PY=/usr/bin/python3
tests=${PARE_BUILD_DIR:?set PARE_BUILD_DIR to the build folder}/tests/distill_tests
if ! "$PY" -c 'import torch, numpy' 2>/dev/null; then
  echo "SKIP: $PY cannot import torch and numpy (apt-get install python3-torch)"
  exit 77
fi
if [[ ! -x "$tests" ]]; then
  echo "FAIL: $tests is missing (build the distill_tests target)"
  exit 1
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/pare-$1.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
