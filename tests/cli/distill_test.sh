#!/usr/bin/env bash
# pare distill end to end on a small slice: runs, writes a student, reports teacher and student,
# resumes bit-for-bit after SIGKILL, and rejects bad options with exit 2.
source "$(dirname "$0")/lib.sh"
make_npy_data "$work" 512
data="npy:$work/x.npy,$work/y.npy"
"$PARE" train --model lenet5 --data "$data" --epochs 1 --batch-size 32 --no-val --quiet --out "$work/teacher.onnx"

expect_exit 0 '"student_accuracy"' -- "$PARE" distill --teacher "$work/teacher.onnx" --student mlp:784-64-10 \
  --data "$data" --epochs 1 --batch-size 32 --json --quiet --hint fc2:fc1 --out "$work/student.onnx"
expect_exit 0 "Gemm" -- "$PARE" inspect "$work/student.onnx"
# The hint projection is trained with the student but never exported: same parameters as the zoo model.
p1=$("$PARE" inspect "$work/student.onnx" --json | "$PY" -c "import json,sys; print(json.load(sys.stdin)['parameters'])")
p2=$("$PARE" inspect mlp:784-64-10 --json | "$PY" -c "import json,sys; print(json.load(sys.stdin)['parameters'])")
[ "$p1" = "$p2" ] && echo "ok: no projection in the student" || fail "student has $p1 parameters, zoo model $p2"
# An ensemble of two teachers with weights.
expect_exit 0 "" -- "$PARE" distill --teacher "$work/teacher.onnx" --teacher lenet5 --teacher-weights 0.7,0.3 \
  --student mlp:784-64-10 --data "$data" --epochs 1 --batch-size 32 --quiet --no-val --out "$work/ens.onnx"

# SIGKILL mid-epoch, then --resume: identical student.
expect_resume_identical distill 3 distill --teacher "$work/teacher.onnx" --student lenet5 --data "$data" --epochs 2 \
  --batch-size 16 --seed 3 --no-val --quiet --threads 1 --hint relu3:relu3

# Bad options exit 2 naming the problem, leaving no output.
base=(distill --teacher "$work/teacher.onnx" --student mlp:784-64-10 --data "$data" --epochs 1 --quiet --out "$work/bad.onnx")
expect_exit 2 "no value named 'nope'" -- "$PARE" "${base[@]}" --hint nope:fc1
expect_exit 2 "student has no value named 'nope'" -- "$PARE" "${base[@]}" --hint fc1:nope
expect_exit 2 "temperature" -- "$PARE" "${base[@]}" --temperature 0
expect_exit 2 "temperature" -- "$PARE" "${base[@]}" --temperature -1
expect_exit 2 "alpha" -- "$PARE" "${base[@]}" --alpha 1.5
expect_exit 2 "10 classes but student" -- "$PARE" distill --teacher "$work/teacher.onnx" --student mlp:784-64-5 \
  --data "$data" --epochs 1 --quiet --out "$work/bad.onnx"
expect_exit 2 "missing_student.onnx" -- "$PARE" distill --teacher "$work/teacher.onnx" --student "$work/missing_student.onnx" \
  --data "$data" --epochs 1 --quiet --out "$work/bad.onnx"
expect_exit 2 "missing_teacher.onnx" -- "$PARE" distill --teacher "$work/missing_teacher.onnx" --student mlp:784-64-10 \
  --data "$data" --epochs 1 --quiet --out "$work/bad.onnx"
expect_exit 2 "weights" -- "$PARE" "${base[@]}" --teacher-weights 0.5,0.5

# A student derived from a transformer teacher: its layers 0 and 2, hinted layer to layer.
"$PY" - "$work" <<'PYEOF'
import sys, numpy as np
rng = np.random.default_rng(1)
np.save(f"{sys.argv[1]}/tok.npy", rng.integers(0, 50, (128, 6)).astype(np.int64))
np.save(f"{sys.argv[1]}/tok_y.npy", rng.integers(0, 5, 128).astype(np.int64))
PYEOF
tok=(--data "npy:$work/tok.npy,$work/tok_y.npy" --epochs 1 --batch-size 32 --quiet)
tf="transformer:vocab=50,d=16,heads=2,layers=4,classes=5,seq=6"
expect_exit 0 "" -- "$PARE" distill --teacher "$tf" --student from-teacher:layers=0,2 \
  --hint layer2.ffn_residual:layer2.ffn_residual "${tok[@]}" --out "$work/derived.onnx"
expect_exit 0 "layer2.ffn.fc1" -- "$PARE" inspect "$work/derived.onnx"
if "$PARE" inspect "$work/derived.onnx" | grep -q "layer1\."; then fail "layer 1 was kept"; fi
expect_exit 2 "no layer 9" -- "$PARE" distill --teacher "$tf" --student from-teacher:layers=0,9 "${tok[@]}" --out "$work/bad.onnx"
expect_exit 2 "teacher '$work/teacher.onnx' has no repeated layers" -- "$PARE" distill --teacher "$work/teacher.onnx" \
  --student from-teacher:layers=0 --data "$data" --epochs 1 --quiet --out "$work/bad.onnx"
no_file "$work/bad.onnx"
finish
