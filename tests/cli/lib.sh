# Shared helpers for the CLI tests: sourced, not run.
set -euo pipefail
: "${PARE:?PARE must point at the pare binary}"
PY=/usr/bin/python3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0

fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

# expect_exit CODE PATTERN -- CMD...: runs CMD, checks the exit code and that stderr+stdout match PATTERN.
expect_exit() {
  local code=$1 pattern=$2; shift 3
  local out rc=0
  out=$("$@" 2>&1) || rc=$?
  if [ "$rc" -ne "$code" ]; then fail "exit $rc (want $code): $*"$'\n'"$out"; return; fi
  if ! grep -qE -- "$pattern" <<<"$out"; then fail "output lacks /$pattern/: $*"$'\n'"$out"; return; fi
  echo "ok: exit $code /$pattern/: ${*:1:3}"
}

# no_file PATH: the command must not have left PATH (or a temporary sibling) behind.
no_file() {
  if ls "$1"* >/dev/null 2>&1; then fail "left a file behind: $(ls "$1"*)"; else echo "ok: no $1"; fi
}

finish() {
  if [ "$fails" -ne 0 ]; then echo "$fails check(s) failed"; exit 1; fi
  echo "all checks passed"
}

# make_npy_data DIR N: x [N,1,28,28] float32 in [0,1], y [N] int64 in 0..9.
make_npy_data() {
  "$PY" - "$1" "$2" <<'PYEOF'
import sys, numpy as np
d, n = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(0)
np.save(f"{d}/x.npy", rng.random((n, 1, 28, 28), dtype=np.float32))
np.save(f"{d}/y.npy", rng.integers(0, 10, n).astype(np.int64))
PYEOF
}
