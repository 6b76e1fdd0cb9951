#!/usr/bin/env bash
# Peer test: a student derived from a PyTorch-exported nn.TransformerEncoder classifier
# (`--student from-teacher:layers=1`, distill::derive_student) computes what PyTorch computes with
# only that encoder layer kept (model.encoder.layers = [layers[1]]), with the teacher's weights.
#
# The C++ side is the gtest DerivedStudentPeer.WritesOutputsForTheScript in distill_tests, which
# runs only when PARE_DERIVE_PEER_DIR is set. Env: PARE_BUILD_DIR. Needs torch and numpy in the peers\' Python (tests/peers.sh).
source "$(dirname "${BASH_SOURCE[0]}")/gtest_peer_lib.sh" derived-student
ATOL=1e-4   # as for the exported models themselves

echo "== exporting the transformer with torch into $tmp"
"$PY" "$here/export_models.py" "$tmp" --only transformer --keep-layers 1 >/dev/null

echo "== deriving the student in pare"
if ! PARE_DERIVE_PEER_DIR="$tmp" "$tests" --gtest_filter='DerivedStudentPeer.*' --gtest_brief=1; then
  echo "FAILED: DerivedStudentPeer (see above)"
  exit 1
fi

failures=()
for expected in "$tmp"/transformer.b*.keep.expected.npy; do
  actual=${expected%.expected.npy}.pare.npy
  if ! "$PY" "$here/peer_util.py" compare "$actual" "$expected" --atol "$ATOL" --rtol 0 \
         --label "derived $(basename "$actual" .keep.pare.npy)"; then
    failures+=("$(basename "$actual")")
  fi
done
if ((${#failures[@]})); then
  echo "FAILED (${#failures[@]}): ${failures[*]}"
  exit 1
fi
echo "PASSED: the derived student gives PyTorch's outputs for the kept layer"
