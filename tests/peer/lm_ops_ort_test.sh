#!/usr/bin/env bash
# Peer test: a decoder layer in ONNX opset 23 (RMSNormalization, RotaryEmbedding halves and
# interleaved, Attention with 4 query heads over 2 KV heads, causal, with past/present KV cache;
# made by lm_ops_model.py) run by ONNX Runtime and by `pare run`: the outputs and the present
# cache must agree. Then `pare inspect` reads it and `pare export --target onnx` writes it back,
# which ONNX Runtime must run to the same numbers. Finally a nudged output must be caught.
#
# Env: PARE, PARE_SOURCE_DIR, PARE_PYTHON (tests/peers.sh). Without onnxruntime and onnx the test
# fails under make test and CI, and skips otherwise.
source "$(dirname "${BASH_SOURCE[0]}")/ort_peer_lib.sh" lm-ops "numpy, onnx"

"$PY" "$here/lm_ops_model.py" "$tmp"
ins=(--input "x=$tmp/x.npy" --input "position_ids=$tmp/position_ids.npy" --input "past_key=$tmp/past_key.npy"
     --input "past_value=$tmp/past_value.npy")
outs=(--output "y=$tmp/pare_y.npy" --output "present_key=$tmp/pare_present_key.npy"
      --output "present_value=$tmp/pare_present_value.npy")
"$PARE" run "$tmp/layer.onnx" "${ins[@]}" "${outs[@]}"

compare() {  # compare PREFIX_A PREFIX_B: every output within 1e-4
  "$PY" - "$tmp" "$1" "$2" <<'PYEOF'
import sys, numpy as np
d, a, b = sys.argv[1:]
bad = 0
for o in ["y", "present_key", "present_value"]:
    x, y = np.load(f"{d}/{a}_{o}.npy"), np.load(f"{d}/{b}_{o}.npy")
    err = float(np.abs(x - y).max()) if x.shape == y.shape else float("inf")
    print(f"{o}: {a} vs {b} shape {list(x.shape)} max |diff| {err:.2e}")
    bad += not err <= 1e-4
sys.exit(1 if bad else 0)
PYEOF
}
compare pare ort

"$PARE" inspect "$tmp/layer.onnx" >"$tmp/inspect.txt"
for op in RMSNormalization RotaryEmbedding Attention; do
  grep -q "$op" "$tmp/inspect.txt" || { echo "FAIL: pare inspect does not list $op:"; cat "$tmp/inspect.txt"; exit 1; }
done
"$PARE" export "$tmp/layer.onnx" --target onnx --out "$tmp/exported.onnx" >/dev/null
"$PY" - "$tmp" <<'PYEOF'
import sys, numpy as np, onnx, onnxruntime as ort
d = sys.argv[1]
m = onnx.load(f"{d}/exported.onnx")
opset = [o.version for o in m.opset_import if o.domain in ("", "ai.onnx")]
assert opset == [23], f"pare export wrote opset {opset}, expected [23]"
s = ort.InferenceSession(f"{d}/exported.onnx", providers=["CPUExecutionProvider"])
feeds = {i.name: np.load(f"{d}/{i.name}.npy") for i in s.get_inputs()}
for o, v in zip([o.name for o in s.get_outputs()], s.run(None, feeds)):
    np.save(f"{d}/exported_{o}.npy", v)
PYEOF
compare exported ort

# The comparison can fail: a nudged present_value must be caught.
"$PY" -c '
import sys, numpy as np
t = np.load(sys.argv[1]); t.reshape(-1)[3] += 1e-3; np.save(sys.argv[1], t)' "$tmp/pare_present_value.npy"
if compare pare ort >/dev/null; then
  echo "FAIL: the comparison accepted a present_value nudged by 1e-3"
  exit 1
fi
echo "self-check: a present_value nudged by 1e-3 is caught"
