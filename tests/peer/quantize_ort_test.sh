#!/usr/bin/env bash
# Peer test: the QDQ models `pare quantize` writes pass onnx.checker (full check) and run in ONNX
# Runtime (ONNX Runtime, all graph optimizations on, so ORT fuses the QDQ pairs into its int8
# kernels), and ORT agrees with pare's simulation of the same graph:
#   - the last quantized activation (uint8 codes) differs by at most one quantization step;
#   - the logits' argmax agrees on >= 99.9% of the Fashion-MNIST test images used;
# and the weight-only int4 MLP (MatMulNBits) gives the same logits in both (float rounding); the
# same checks for a QAT model (4-bit per-tensor weights, a few steps distilled from the cnn) and
# the dynamically quantized MLP (DynamicQuantizeLinear + MatMulInteger, which ORT fuses).
# Models: zoo cnn and mlp briefly trained on Fashion-MNIST (so logits have real margins). On CPUs
# without VNNI the static models use 7-bit weights (ort_peer_lib.sh, ORT_WEIGHT_BITS: ORT's 8-bit
# int8 kernels saturate there), and the dynamic model (whose int8 weights use all 8 bits) is held to
# the argmax agreement, not to float rounding.
#
# Env: PARE, PARE_SOURCE_DIR, PARE_BUILD_DIR as in ort_roundtrip_test.sh; PARE_QPEER_N test images
# (default 2000). Without ONNX Runtime, numpy/onnx or the dataset.
source "$(dirname "${BASH_SOURCE[0]}")/ort_peer_lib.sh" quant-ort "numpy, onnx"
need "Fashion-MNIST (dataset-fashion-mnist)" test -e /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz
N=${PARE_QPEER_N:-2000}

# Test images as .npy (the first N of the test split), and calibration images from the train split.
"$PY" "$here/peer_util.py" fmnist "$tmp" --test "$N" --calib 256

failures=()
for spec in "mlp:784-128-10" cnn qat; do
  steps=200
  [[ $spec == cnn ]] && steps=40
  fp32="$tmp/${spec%%:*}.onnx"
  q="$tmp/${spec%%:*}.int8.onnx"
  if [[ $spec == qat ]]; then
    "$PARE" quantize "$tmp/mlp.onnx" --calib "npy:$tmp/cx.npy,$tmp/cy.npy" --qat --teacher "$tmp/cnn.onnx" \
      --data fashion-mnist --max-steps 30 --no-val --weight-bits 4 --per-tensor --quiet --out "$q" >/dev/null
  else
    "$PARE" train --model "$spec" --data fashion-mnist --epochs 1 --max-steps "$steps" --lr 2e-3 --seed 1 \
      --no-val --quiet --out "$fp32"
    "$PARE" quantize "$fp32" --calib "npy:$tmp/cx.npy,$tmp/cy.npy" --method entropy --weight-bits "$ORT_WEIGHT_BITS" \
      --quiet --out "$q" >/dev/null
  fi
  if ! "$PY" "$here/peer_util.py" check-onnx "$q"; then
    failures+=("$spec onnx.checker"); continue
  fi
  if ! run_codes_probe "$q" "$tmp/x.npy" "$tmp/${spec%%:*}"; then failures+=("$spec ort"); continue; fi
  check_codes "$spec" "$tmp/${spec%%:*}" || failures+=("$spec values")
done

# Weight-only int4 (com.microsoft MatMulNBits): ORT runs the packed 4-bit weights and both
# dequantize them to the same floats, so the logits agree to float rounding.
q4="$tmp/mlp.int4.onnx"
"$PARE" quantize "$tmp/mlp.onnx" --weight-only int4 --group 32 --quiet --out "$q4" >/dev/null
ort_matches_pare "$q4" "$tmp/x.npy" "mlp int4 weight-only" || failures+=("int4")

# Dynamic quantization: ORT computes the activation scale of each batch the same way and the
# integer MatMul is exact, so the logits agree to float rounding.
qd="$tmp/mlp.dyn.onnx"
"$PARE" quantize "$tmp/mlp.onnx" --dynamic --quiet --out "$qd" >/dev/null
"$PY" "$here/peer_util.py" check-onnx "$qd" || failures+=("dynamic onnx.checker")
if ((ORT_WEIGHT_BITS == 8)); then
  ort_matches_pare "$qd" "$tmp/x.npy" "mlp dynamic int8" || failures+=("dynamic")
else
  "$PY" "$here/ort_run.py" "$qd" --input "$tmp/x.npy" --output "$tmp/dyn.ort.npy"
  "$PARE" run "$qd" --input "$tmp/x.npy" --output "$tmp/dyn.pare.npy"
  "$PY" - "$tmp" <<'PYEOF' || failures+=("dynamic")
import sys
import numpy as np
d = sys.argv[1]
o, p = np.load(f"{d}/dyn.ort.npy"), np.load(f"{d}/dyn.pare.npy")
agree = float((o.argmax(1) == p.argmax(1)).mean())
print(f"mlp dynamic int8 (no VNNI: ORT's int8 MatMul saturates): logits max abs diff {np.abs(o - p).max():.4g}, "
      f"argmax agreement {agree * 100:.2f}% of {o.shape[0]}")
print("ok" if agree >= 0.995 else "FAIL")
sys.exit(0 if agree >= 0.995 else 1)
PYEOF
fi

if ((${#failures[@]})); then
  echo "FAILED (${#failures[@]}): ${failures[*]}"; exit 1
fi
echo "PASSED: pare's QDQ models pass onnx.checker and ONNX Runtime agrees with pare's simulation"
