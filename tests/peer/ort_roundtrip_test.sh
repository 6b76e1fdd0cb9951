#!/usr/bin/env bash
# Peer test: ONNX files written by pare (zoo models after a couple of training steps, so that
# BatchNorm statistics and weights have moved) pass onnx.checker and give the same outputs in
# ONNX Runtime (PyPI onnxruntime) as in `pare run`, the import of pare's own export.
#
# Env: PARE (the binary), PARE_SOURCE_DIR, PARE_PYTHON. Without numpy, onnx and onnxruntime in the
# peers' Python the test fails under make test and CI, and skips otherwise (tests/peers.sh).
# PARE_PEER_SPECS="cnn lenet5" limits the run to some zoo specs.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src=${PARE_SOURCE_DIR:-$(cd "$here/../.." && pwd)}
PARE=${PARE:?set PARE to the pare binary}
ATOL=1e-5   # max |pare - ort| <= ATOL * max(1, max|ort|)
source "$src/tests/peers.sh"
need_python "numpy, onnx, onnxruntime"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/pare-ort-roundtrip.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

transformer="transformer:vocab=50,d=32,heads=4,layers=2,classes=5,seq=8"
read -r -a specs <<<"${PARE_PEER_SPECS:-mlp:784-300-100-10 lenet5 cnn resnet:1 $transformer}"

"$PY" "$here/peer_util.py" make-data "$tmp/image" --kind image --n 64 --classes 10
"$PY" "$here/peer_util.py" make-data "$tmp/tokens" --kind tokens --n 64 --vocab 50 --seq 8 --classes 5
for b in 1 3; do
  "$PY" "$here/peer_util.py" make-input "$tmp/image.b$b.npy" --kind image --batch "$b" --seed $((10 + b))
  "$PY" "$here/peer_util.py" make-input "$tmp/tokens.b$b.npy" --kind tokens --batch "$b" --vocab 50 --seq 8 --seed $((10 + b))
done

failures=()
i=0
for spec in "${specs[@]}"; do
  i=$((i + 1))
  kind=image
  [[ $spec == transformer:* ]] && kind=tokens
  model="$tmp/m$i.onnx"
  rc=0
  "$PARE" train --model "$spec" --data "npy:$tmp/$kind/x.npy,$tmp/$kind/y.npy" --epochs 1 \
    --batch-size 16 --max-steps 2 --seed 1 --no-val --quiet --out "$model" 2>"$tmp/err.txt" || rc=$?
  if ((rc != 0)); then
    echo "FAIL $spec: pare train --model $spec ... --out $model (exit $rc):"
    head -c 2000 "$tmp/err.txt"; echo
    failures+=("$spec train")
    continue
  fi
  if ! "$PY" "$here/peer_util.py" check-onnx "$model" 2>"$tmp/err.txt"; then
    echo "FAIL $spec: onnx.checker.check_model rejects pare's export:"
    tail -c 2000 "$tmp/err.txt"; echo
    failures+=("$spec onnx.checker")
  fi
  for b in 1 3; do
    x="$tmp/$kind.b$b.npy"
    rc=0
    "$PY" "$here/ort_run.py" "$model" --input "$x" --output "$tmp/ort.npy" 2>"$tmp/err.txt" || rc=$?
    if ((rc != 0)); then
      echo "FAIL $spec batch $b: onnxruntime cannot run pare's export (exit $rc):"
      head -c 2000 "$tmp/err.txt"; echo
      failures+=("$spec b$b ort")
      continue
    fi
    rc=0
    "$PARE" run "$model" --input "$x" --output "$tmp/pare.npy" 2>"$tmp/err.txt" || rc=$?
    if ((rc != 0)); then
      echo "FAIL $spec batch $b: pare run $model --input $x (exit $rc):"
      head -c 2000 "$tmp/err.txt"; echo
      failures+=("$spec b$b run")
      continue
    fi
    if ! "$PY" "$here/peer_util.py" compare "$tmp/pare.npy" "$tmp/ort.npy" --atol "$ATOL" \
           --label "$spec batch $b (pare vs onnxruntime)" --scale-floor 1; then
      failures+=("$spec b$b values")
    fi
  done
done

if ((${#failures[@]})); then
  echo "FAILED (${#failures[@]}): ${failures[*]}"
  exit 1
fi
echo "PASSED: pare's exports pass onnx.checker and match onnxruntime"
