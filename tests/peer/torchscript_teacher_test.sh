#!/usr/bin/env bash
# Peer test: TorchScript teachers saved by PyTorch (a scripted BatchNorm CNN saved in training mode,
# a traced model returning a tuple, a float64 model) give PyTorch's eval-mode logits when pare loads
# them with engine::load; a corrupt .pt is an InputError naming the file.
#
# The C++ side is the gtest TorchScriptTeacherPeer.WritesLogitsForTheScript in distill_tests, which
# runs only when PARE_TS_PEER_DIR is set. Env: PARE_BUILD_DIR (for tests/distill_tests),
# PARE_SOURCE_DIR. Needs torch and numpy in the peers\' Python (tests/peers.sh).
source "$(dirname "${BASH_SOURCE[0]}")/gtest_peer_lib.sh" ts-teacher
ATOL=1e-5   # max |pare - torch|

echo "== saving TorchScript teachers with torch $("$PY" "$here/torchscript_teacher.py" "$tmp") into $tmp"

echo "== running the teachers in pare"
if ! PARE_TS_PEER_DIR="$tmp" "$tests" --gtest_filter='TorchScriptTeacherPeer.*' --gtest_brief=1; then
  echo "FAILED: TorchScriptTeacherPeer (see above)"
  exit 1
fi

failures=()
for expected in "$tmp"/*.expected.npy; do
  name=$(basename "$expected" .expected.npy)
  actual="$tmp/$name.pare.npy"
  if [[ ! -f "$actual" ]]; then
    echo "FAIL $name: pare wrote no logits ($actual)"
    failures+=("$name")
    continue
  fi
  if ! "$PY" - "$actual" "$expected" "$ATOL" "$name" <<'EOF'
import sys
import numpy as np
actual, expected, atol, name = np.load(sys.argv[1]), np.load(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
if actual.shape != expected.shape or actual.dtype != np.float32:
    print(f"FAIL {name}: {actual.dtype} {list(actual.shape)}, expected float32 {list(expected.shape)}")
    sys.exit(1)
diff = float(np.abs(actual.astype(np.float64) - expected.astype(np.float64)).max())
ok = np.isfinite(diff) and diff <= atol
print(f"{'ok  ' if ok else 'FAIL'} {name}: logits {list(actual.shape)}, max abs diff {diff:.3g} (tolerance {atol})")
sys.exit(0 if ok else 1)
EOF
  then
    failures+=("$name")
  fi
done

if ((${#failures[@]})); then
  echo "FAILED (${#failures[@]}): ${failures[*]}"
  exit 1
fi
echo "PASSED: TorchScript teachers give PyTorch's logits in pare"
