#!/usr/bin/env bash
# pare quantize: writes a QDQ model that pare eval/run execute and onnx.checker accepts, prints
# and writes the per-layer report, and refuses bad input with exit 2 and no output file.
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

# --exclude by op type, --per-tensor and --json.
expect_exit 0 '"skipped"' -- "$PARE" quantize "$work/cnn.onnx" --calib "$data" --calib-samples 16 \
  --exclude Gemm --per-tensor --json --quiet --out "$work/cnn.conv.onnx"

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
finish
