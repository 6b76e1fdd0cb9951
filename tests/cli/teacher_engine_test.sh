#!/usr/bin/env bash
# --teacher-engine rt: the teacher runs on pare_rt. With a float teacher the run follows the libtorch
# engine's (same losses to float rounding, the same student accuracy); a QDQ teacher runs on int8
# kernels; hints ask pare_rt for intermediate values; what pare_rt cannot run is refused with exit 2.
source "$(dirname "$0")/lib.sh"
make_npy_data "$work" 512
data="npy:$work/x.npy,$work/y.npy"
"$PARE" train --model lenet5 --data "$data" --epochs 1 --batch-size 32 --no-val --quiet --out "$work/teacher.onnx"
"$PARE" quantize "$work/teacher.onnx" --calib "$data" --quiet --out "$work/teacher.int8.onnx" > /dev/null

common=(--student mlp:784-64-10 --data "$data" --epochs 2 --batch-size 32 --seed 4 --threads 1 --quiet --json)
for engine in torch rt; do
  "$PARE" distill --teacher "$work/teacher.onnx" --teacher-engine "$engine" "${common[@]}" \
    --metrics "$work/$engine.jsonl" --out "$work/$engine.onnx" > "$work/$engine.json"
done
"$PY" - "$work" <<'PYEOF' && echo "ok: rt teacher follows the torch teacher" || fail "rt and torch teachers differ"
import json, sys
d = sys.argv[1]
a = [json.loads(l) for l in open(f"{d}/torch.jsonl")]
b = [json.loads(l) for l in open(f"{d}/rt.jsonl")]
assert len(a) == len(b) == 2
for ea, eb in zip(a, b):
    for k in ("train_loss", "val_loss"):
        assert abs(ea[k] - eb[k]) <= 1e-4 * max(1, abs(ea[k])), (k, ea[k], eb[k])
    assert abs(ea["val_accuracy"] - eb["val_accuracy"]) <= 0.01, (ea["val_accuracy"], eb["val_accuracy"])
PYEOF

expect_exit 0 '"student_accuracy"' -- "$PARE" distill --teacher "$work/teacher.int8.onnx" --teacher-engine rt \
  "${common[@]}" --out "$work/from_int8.onnx"
expect_exit 0 '"student_accuracy"' -- "$PARE" distill --teacher "$work/teacher.onnx" --teacher-engine rt \
  "${common[@]}" --hint relu3:relu1 --out "$work/hinted.onnx"
expect_exit 0 '"bytes_per_sample"' -- "$PARE" teacher-cache --teacher "$work/teacher.int8.onnx" --teacher-engine rt \
  --data "$data" --top-k 4 --json --quiet --out "$work/cache"

bad=(--student mlp:784-64-10 --data "$data" --epochs 1 --quiet --out "$work/bad.onnx")
expect_exit 2 "teacher-engine rt runs ONNX and zoo teachers.*cache" -- "$PARE" distill --teacher "cache:$work/cache" \
  --teacher-engine rt "${bad[@]}"
expect_exit 2 "no value named 'nope'" -- "$PARE" distill --teacher "$work/teacher.onnx" --teacher-engine rt \
  --hint nope:fc1 "${bad[@]}"
expect_exit 2 "does not combine with --teacher-engine rt" -- "$PARE" distill --teacher "$work/teacher.onnx" \
  --teacher-engine rt --teacher-parallel tp "${bad[@]}"
expect_exit 2 "teacher-engine" -- "$PARE" distill --teacher "$work/teacher.onnx" --teacher-engine gpu "${bad[@]}"
no_file "$work/bad.onnx"
finish
