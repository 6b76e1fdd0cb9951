#!/usr/bin/env bash
# pare quantize: writes a QDQ model that pare eval/run execute and onnx.checker accepts, prints
# and writes the per-layer report, and refuses bad input with exit 2 and no output file; --qat
# trains a fake-quant model (with or without a teacher) and writes the same QDQ form; --dynamic
# writes DynamicQuantizeLinear + MatMulInteger.
source "$(dirname "$0")/lib.sh"
make_npy_data "$work" 64
data="npy:$work/x.npy,$work/y.npy"
"$PARE" train --model cnn --data "$data" --epochs 1 --batch-size 16 --max-steps 3 --no-val --quiet \
  --seed 1 --out "$work/cnn.onnx"

# --help says what the command does and lists the options.
expect_exit 0 "--calib-samples" -- "$PARE" quantize --help
expect_exit 0 "entropy" -- "$PARE" quantize --help

# A good run: report table on stdout, JSON report on disk, a model pare can evaluate.
expect_exit 0 "model output SQNR" -- "$PARE" quantize "$work/cnn.onnx" --calib "$data" --calib-samples 32 \
  --method entropy --report "$work/report.json" --out "$work/cnn.int8.onnx"
"$PY" - "$work/report.json" "$work/cnn.int8.onnx" <<'PYEOF' || fail "report or model content"
import json, sys, onnx
r = json.load(open(sys.argv[1]))
assert r["method"] == "entropy" and r["calib_samples"] == 32, r
assert r["folded_batch_norms"] >= 1, r
assert len(r["layers"]) >= 3 and all(l["weight_sqnr_db"] > 20 for l in r["layers"]), r["layers"]
m = onnx.load(sys.argv[2])
onnx.checker.check_model(m, full_check=True)
ops = {n.op_type for n in m.graph.node}
assert {"QuantizeLinear", "DequantizeLinear"} <= ops and "BatchNormalization" not in ops, ops
int8 = [i for i in m.graph.initializer if i.data_type == onnx.TensorProto.INT8 and len(i.dims) >= 2]
assert len(int8) == len(r["layers"]), (len(int8), len(r["layers"]))
print("ok: report and QDQ model")
PYEOF
expect_exit 0 "accuracy" -- "$PARE" eval "$work/cnn.int8.onnx" --data "$data"
expect_exit 0 "" -- "$PARE" run "$work/cnn.int8.onnx" --input "$work/x.npy" --output "$work/y_int8.npy"
# pare inspect counts the int8 weights as parameters: as many as the fp32 model has (BatchNorm
# folded away, int32 biases counted).
"$PARE" inspect "$work/cnn.onnx" --json >"$work/fp32.json"
"$PARE" inspect "$work/cnn.int8.onnx" --json >"$work/int8.json"
"$PY" - "$work/fp32.json" "$work/int8.json" <<'PYEOF' && echo "ok: inspect counts quantized weights" || fail "inspect of the int8 model"
import json, sys
f, q = (json.load(open(p)) for p in sys.argv[1:3])
assert q["quantized_parameters"] > 0.95 * f["parameters"], (q["quantized_parameters"], f["parameters"])
assert q["parameters"] <= f["parameters"], (q["parameters"], f["parameters"])
PYEOF

# --exclude by op type, --per-tensor and --json.
expect_exit 0 '"skipped"' -- "$PARE" quantize "$work/cnn.onnx" --calib "$data" --calib-samples 16 \
  --exclude Gemm --per-tensor --json --quiet --out "$work/cnn.conv.onnx"

# --qat with a teacher: a few steps of QAT with distillation of an MLP with 4-bit per-tensor weights.
"$PARE" train --model mlp:784-32-10 --data "$data" --epochs 1 --batch-size 16 --max-steps 3 --no-val --quiet \
  --seed 1 --out "$work/mlp.onnx"
expect_exit 0 "QDQ model" -- "$PARE" quantize "$work/mlp.onnx" --calib "$data" --calib-samples 32 --qat \
  --teacher "$work/cnn.onnx" --epochs 1 --max-steps 3 --batch-size 16 --weight-bits 4 --per-tensor \
  --temperature 2 --alpha 0.5 --report "$work/qat.json" --out "$work/mlp.qat.onnx"
"$PY" - "$work/qat.json" "$work/mlp.qat.onnx" <<'PYEOF' || fail "QAT report or model content"
import json, sys, onnx
from onnx import numpy_helper
r = json.load(open(sys.argv[1]))
q = r["qat"]
assert q["teachers"] and q["epochs"] == 1, q
# The QDQ model written gives exactly the fake-quant model's accuracy.
assert q["accuracy"] == q["fake_quant_accuracy"], q
assert "4-bit" in r["weights"] and "QAT" in r["method"], r
m = onnx.load(sys.argv[2])
onnx.checker.check_model(m, full_check=True)
ops = {n.op_type for n in m.graph.node}
assert {"QuantizeLinear", "DequantizeLinear"} <= ops and "FakeQuantize" not in ops, ops
codes = [numpy_helper.to_array(i) for i in m.graph.initializer if i.data_type == onnx.TensorProto.INT8 and len(i.dims) == 2]
assert len(codes) == 2 and all(abs(c).max() <= 7 for c in codes), [abs(c).max() for c in codes]
print("ok: QAT report and QDQ model")
PYEOF
expect_exit 0 "accuracy" -- "$PARE" eval "$work/mlp.qat.onnx" --data "$data"
# QAT killed after a checkpoint resumes to the model an uninterrupted run writes.
expect_resume_identical qat 3 quantize "$work/mlp.onnx" --calib "$data" --calib-samples 16 --weight-bits 4 \
  --qat --epochs 2 --batch-size 8 --no-val --seed 2 --quiet
# --qat without a teacher trains on the labels; learned scales; a BatchNorm model (folded first).
expect_exit 0 "cross entropy" -- "$PARE" quantize "$work/cnn.onnx" --calib "$data" --calib-samples 16 --qat \
  --learn-scales --max-steps 2 --batch-size 16 --no-val --out "$work/cnn.qat.onnx"
expect_exit 0 "accuracy" -- "$PARE" eval "$work/cnn.qat.onnx" --data "$data"

# --dynamic: int8 weights, activation scales at run time; no calibration data.
expect_exit 0 "2 layers dynamically quantized" -- "$PARE" quantize "$work/mlp.onnx" --dynamic --quiet \
  --out "$work/mlp.dyn.onnx"
"$PY" -c "
import onnx, sys
m = onnx.load('$work/mlp.dyn.onnx'); onnx.checker.check_model(m, full_check=True)
ops = [n.op_type for n in m.graph.node]
assert ops.count('DynamicQuantizeLinear') == 2 and ops.count('MatMulInteger') == 2 and 'Gemm' not in ops, ops
" || fail "dynamic model content"
expect_exit 0 "accuracy" -- "$PARE" eval "$work/mlp.dyn.onnx" --data "$data"

# Calibration reads inputs only (issue 18, item 2): 'npy:X.npy' is enough, and gives the same file.
expect_exit 0 "" -- "$PARE" quantize "$work/cnn.onnx" --calib "npy:$work/x.npy" --calib-samples 32 \
  --method entropy --quiet --out "$work/cnn.int8.x.onnx"
cmp "$work/cnn.int8.onnx" "$work/cnn.int8.x.onnx" && echo "ok: calibration without labels" \
  || fail "calibrating on npy:X.npy gave another model"
expect_exit 2 "no labels.*training" -- "$PARE" train --model mlp:784-32-10 --data "npy:$work/x.npy" --epochs 1 \
  --out "$work/o0.onnx"
no_file "$work/o0.onnx"

# Bad input: exit 2, a message naming the problem, no output file.
"$PY" -c "import numpy as np; np.save('$work/small.npy', np.zeros((8, 1, 20, 20), np.float32)); np.save('$work/ys.npy', np.zeros(8, np.int64))"
expect_exit 2 "calib.*small.npy.*\[8, 1, 20, 20\].*model input" -- "$PARE" quantize "$work/cnn.onnx" \
  --calib "npy:$work/small.npy,$work/ys.npy" --out "$work/o1.onnx"
no_file "$work/o1.onnx"
expect_exit 2 "already quantized" -- "$PARE" quantize "$work/cnn.int8.onnx" --calib "$data" --out "$work/o2.onnx"
no_file "$work/o2.onnx"
expect_exit 2 "--include MaxPool.*cannot be quantized" -- "$PARE" quantize "$work/cnn.onnx" --calib "$data" \
  --include MaxPool --out "$work/o3.onnx"
no_file "$work/o3.onnx"
expect_exit 2 "--exclude nosuchnode.*no node" -- "$PARE" quantize "$work/cnn.onnx" --calib "$data" \
  --exclude nosuchnode --out "$work/o4.onnx"
no_file "$work/o4.onnx"
expect_exit 2 "minmax, percentile, entropy or mse" -- "$PARE" quantize "$work/cnn.onnx" --calib "$data" \
  --method kl --out "$work/o5.onnx"
no_file "$work/o5.onnx"
expect_exit 2 "calib" -- "$PARE" quantize "$work/cnn.onnx" --out "$work/o6.onnx"
no_file "$work/o6.onnx"
expect_exit 2 "--dynamic.*--qat|--qat.*--dynamic" -- "$PARE" quantize "$work/mlp.onnx" --calib "$data" --qat \
  --dynamic --out "$work/o7.onnx"
no_file "$work/o7.onnx"
expect_exit 2 "--teacher.*requires --qat" -- "$PARE" quantize "$work/mlp.onnx" --calib "$data" \
  --teacher "$work/cnn.onnx" --out "$work/o8.onnx"
no_file "$work/o8.onnx"
expect_exit 2 "weight bits must be in 2..8, got 9" -- "$PARE" quantize "$work/mlp.onnx" --calib "$data" \
  --weight-bits 9 --qat --max-steps 1 --out "$work/o9.onnx"
no_file "$work/o9.onnx"
expect_exit 2 "nosuch.onnx" -- "$PARE" quantize "$work/mlp.onnx" --calib "$data" --qat \
  --teacher "$work/nosuch.onnx" --max-steps 1 --out "$work/o10.onnx"
no_file "$work/o10.onnx"
expect_exit 2 "--dynamic.*no --calib" -- "$PARE" quantize "$work/mlp.onnx" --dynamic --calib "$data" \
  --out "$work/o11.onnx"
no_file "$work/o11.onnx"
expect_exit 2 "already quantized" -- "$PARE" quantize "$work/mlp.dyn.onnx" --dynamic --out "$work/o12.onnx"
no_file "$work/o12.onnx"
finish
