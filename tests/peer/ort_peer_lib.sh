# Shared start of the peer tests that run pare's output in ONNX Runtime (PyPI onnxruntime, in the
# project's .venv): sourced, not run. Usage: source ort_peer_lib.sh NAME "PYTHON MODULES"
# (comma-separated, for one import; onnxruntime is always added). Sets here (the test's folder),
# src, PARE, PY and tmp (removed on exit); a missing module fails the test under make test and CI,
# and skips it (77) otherwise (tests/peers.sh).
# Env: PARE (the binary), PARE_SOURCE_DIR, PARE_PYTHON (tests/peers.sh).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[1]}")" && pwd)
src=${PARE_SOURCE_DIR:-$(cd "$here/../.." && pwd)}
PARE=${PARE:?set PARE to the pare binary}
source "$src/tests/peers.sh"
need_python "$2, onnxruntime"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/pare-$1.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# More arguments for every `pare run` below (e.g. pare_run_args=(--engine rt)).
pare_run_args=()

# Weight bits at which ONNX Runtime's int8 kernels are exact here. Without VNNI (AVX2 only), x86
# int8 dot products multiply pairs of u8 x s8 into int16 (vpmaddubsw), which saturates when two
# large 8-bit weights meet two large activations: ORT's MLAS does this (its documentation says so
# and suggests reduce_range), so its outputs then stray from the QDQ definition by tens of steps.
# 7-bit weights never saturate. With VNNI (vpdpbusd) there is no int16 step and 8 bits are exact.
if grep -qE 'avx512_vnni|avx_vnni' /proc/cpuinfo; then ORT_WEIGHT_BITS=8; else ORT_WEIGHT_BITS=7; fi

# run_codes_probe QDQ_MODEL INPUT.npy PREFIX: runs the model in ONNX Runtime and in `pare run` on
# INPUT, with the codes of its last QuantizeLinear exposed as a second output (PREFIX.probe.onnx).
# Writes PREFIX.ort.npy / PREFIX.pare.npy (output 0) and PREFIX.ort_codes.npy /
# PREFIX.pare_codes.npy. Returns 1, after printing ORT's error, when ORT cannot run the model.
run_codes_probe() {
  local q=$1 x=$2 p=$3 last rc=0
  last=$("$PY" - "$q" "$p.probe.onnx" <<'PYEOF'
import sys, onnx
m = onnx.load(sys.argv[1])
node = [n for n in m.graph.node if n.op_type == "QuantizeLinear"][-1]
zp = {i.name: i.data_type for i in m.graph.initializer}[node.input[2]]
m.graph.output.append(onnx.helper.make_value_info(node.output[0], onnx.helper.make_tensor_type_proto(zp, None)))
onnx.save(m, sys.argv[2])
print(node.output[0])
PYEOF
)
  "$PY" "$here/ort_run.py" "$p.probe.onnx" --input "$x" --output "$p.ort.npy" \
    --output "$last=$p.ort_codes.npy" 2>"$p.err" || rc=$?
  if ((rc != 0)); then
    echo "FAIL: onnxruntime cannot run $q (exit $rc):"; head -c 2000 "$p.err"; echo
    return 1
  fi
  "$PARE" run "$q" --input "$x" --output "$p.pare.npy" --output "$last=$p.pare_codes.npy" ${pare_run_args[@]+"${pare_run_args[@]}"}
}

# check_codes LABEL PREFIX: after run_codes_probe, the last quantized activation's codes are at most
# one step apart and the logits' argmax agrees on >= 99.9% of the rows whose class is decided: ONNX
# Runtime's top two logits further apart than twice the two runtimes' largest logit difference on
# that row. (A row closer than that is a tie one step of rounding may break either way: torchvision
# models with random weights on 5 random images have top-two gaps of 0.002-0.07 against logit
# differences of 0.02-0.03 on both runtimes, measured on AVX-512 VNNI with 8-bit weights, where
# each of pare_rt and ORT is one step from the exact QDQ simulation on ~18-20% of the codes.)
# Returns 1 otherwise.
check_codes() {
  "$PY" - "$1" "$2" <<'PYEOF'
import sys
import numpy as np
label, p = sys.argv[1], sys.argv[2]
pc, oc = np.load(f"{p}.pare_codes.npy").astype(int), np.load(f"{p}.ort_codes.npy").astype(int)
pl, ol = np.load(f"{p}.pare.npy"), np.load(f"{p}.ort.npy")
steps = np.abs(pc - oc)
top2 = np.sort(ol, 1)[:, -2:]
decided = (top2[:, 1] - top2[:, 0]) > 2 * np.abs(pl - ol).max(1)
same = pl.argmax(1) == ol.argmax(1)
agree = float(same[decided].mean()) if decided.any() else 1.0
print(f"{label}: last quantized activation {list(pc.shape)}: max |pare - ort| = {steps.max()} step(s), "
      f"{(steps > 0).mean() * 100:.3f}% of codes differ; logits max abs diff {np.abs(pl - ol).max():.4g}; "
      f"argmax agreement {agree * 100:.2f}% of the {int(decided.sum())} decided rows of {pl.shape[0]} "
      f"({same.mean() * 100:.2f}% of all)")
ok = steps.max() <= 1 and agree >= 0.999
print("ok" if ok else "FAIL")
sys.exit(0 if ok else 1)
PYEOF
}

# ort_matches_pare MODEL INPUT.npy LABEL: runs MODEL on INPUT in ONNX Runtime and in `pare run` and
# compares the first outputs (atol 1e-4 on a scale of at least 1). Returns 1, after saying why,
# when ORT cannot run the model or the outputs differ.
ort_matches_pare() {
  local model=$1 x=$2 label=$3 rc=0
  "$PY" "$here/ort_run.py" "$model" --input "$x" --output "$tmp/ort.npy" 2>"$tmp/err.txt" || rc=$?
  if ((rc != 0)); then
    echo "FAIL $label: onnxruntime cannot run $model (exit $rc):"; head -c 2000 "$tmp/err.txt"; echo
    return 1
  fi
  "$PARE" run "$model" --input "$x" --output "$tmp/pare.npy" ${pare_run_args[@]+"${pare_run_args[@]}"}
  "$PY" "$here/peer_util.py" compare "$tmp/pare.npy" "$tmp/ort.npy" --atol 1e-4 --scale-floor 1 \
    --label "$label (pare vs onnxruntime)"
}
