#!/usr/bin/env bash
# Every command answers --help; train -> eval -> inspect -> run work end to end on a small slice.
source "$(dirname "$0")/lib.sh"
expect_exit 0 "^pare [0-9]" -- "$PARE" --version
expect_exit 0 "inspect" -- "$PARE" --help
for c in inspect run train eval; do expect_exit 0 "Usage|usage|OPTIONS" -- "$PARE" "$c" --help; done
# An unknown command is named, with the nearest one, also before --help (issue 12's papercuts).
expect_exit 2 "unknown command 'bogus'" -- "$PARE" bogus
expect_exit 2 "unknown command 'bogus'" -- "$PARE" bogus --help
expect_exit 2 "did you mean 'prune'" -- "$PARE" prun model.onnx

make_npy_data "$work" 64
expect_exit 0 "val_accuracy" -- "$PARE" train --model lenet5 --data "npy:$work/x.npy,$work/y.npy" --epochs 2 \
  --batch-size 16 --seed 3 --quiet --json --metrics "$work/m.jsonl" --out "$work/m.onnx"
[ "$(wc -l < "$work/m.jsonl")" -eq 2 ] || fail "metrics file should have 2 lines: $(cat "$work/m.jsonl")"
expect_exit 0 '"accuracy"' -- "$PARE" eval "$work/m.onnx" --data "npy:$work/x.npy,$work/y.npy" --json
expect_exit 0 "parameters" -- "$PARE" inspect "$work/m.onnx"
expect_exit 0 '"flops_per_sample"' -- "$PARE" inspect "$work/m.onnx" --json
expect_exit 0 "" -- "$PARE" run "$work/m.onnx" --input "input=$work/x.npy" --output "$work/logits.npy"
"$PY" -c "import numpy as np; a = np.load('$work/logits.npy'); assert a.shape == (64, 10), a.shape" \
  || fail "logits shape"
# The same seed gives the same model, bit for bit.
"$PARE" train --model lenet5 --data "npy:$work/x.npy,$work/y.npy" --epochs 2 --batch-size 16 --seed 3 \
  --quiet --out "$work/m2.onnx"
cmp -s "$work/m.onnx" "$work/m2.onnx" || fail "same seed gave different models"
finish
