#!/usr/bin/env bash
# pare export end to end: a 90%-pruned MLP (per layer) exported with --sparse auto|on|off for
# ONNX and for pare_rt (smaller file, same outputs in pare run and pare run --engine rt, --json sizes
# that are the files'), pare inspect on the sparse file and on the int8 model of the pruned MLP (its
# sparsity kept, the fp32 model's FLOPs), and bad input (exit 2 naming the file or node, no output
# file).
source "$(dirname "$0")/lib.sh"
make_npy_data "$work" 64
data="npy:$work/x.npy,$work/y.npy"
json_get() { "$PY" -c "import json,sys; print(json.loads(sys.stdin.read())$1)"; }
size() { stat -c %s "$1"; }

"$PARE" prune mlp:784-128-64-10 --data "$data" --sparsity 0.9 --no-val --quiet --out "$work/p.onnx"
"$PY" -c "import numpy as np; np.save('$work/x8.npy', np.load('$work/x.npy')[:8])"

# --sparse auto (the default): the three weight matrices go sparse, the biases stay dense.
expect_exit 0 "3 of 6 initializers as COO" -- "$PARE" export "$work/p.onnx" --target onnx --out "$work/auto.onnx"
out=$("$PARE" export "$work/p.onnx" --target onnx --out "$work/auto.onnx" --json)
written=$(json_get "['bytes_written']" <<<"$out")
[ "$written" -eq "$(size "$work/auto.onnx")" ] && echo "ok: bytes_written is the file's size" \
  || fail "bytes_written $written, file $(size "$work/auto.onnx")"
"$PY" - "$out" "$(size "$work/p.onnx")" <<'PYEOF' && echo "ok: --json sizes and decisions" || fail "--json: $out"
import json, sys
r, dense_file = json.loads(sys.argv[1]), int(sys.argv[2])
assert r["sparse_initializers"] == 3 and r["sparse_mode"] == "auto" and r["target"] == "onnx", r
sparse = {d["name"] for d in r["initializers"] if d["sparse"]}
assert sparse == {"fc1.weight", "fc2.weight", "fc3.weight"}, sparse
assert abs(r["sparse_density"] - 0.1) < 0.01, r["sparse_density"]
# bytes_dense is the dense file with the export's metadata: the pruned file plus ~100 bytes.
assert 0 < r["bytes_dense"] - dense_file < 300, (r["bytes_dense"], dense_file)
assert r["ratio"] > 3, r["ratio"]
print(f"sparse export: {dense_file} -> {r['bytes_written']} bytes ({dense_file / r['bytes_written']:.2f}x)")
PYEOF

# The sparse file computes what the dense one does, in pare (bit for bit) and in pare_rt.
"$PARE" run "$work/p.onnx" --input "$work/x8.npy" --output "$work/dense.npy"
"$PARE" run "$work/auto.onnx" --input "$work/x8.npy" --output "$work/sparse.npy"
cmp -s "$work/dense.npy" "$work/sparse.npy" && echo "ok: same logits in pare" || fail "sparse logits differ in pare"
expect_exit 0 "3 of 6 initializers stored sparse" -- "$PARE" inspect "$work/auto.onnx"
"$PARE" inspect "$work/auto.onnx" --json | "$PY" -c "
import json, sys
s = json.load(sys.stdin)
assert len(s['sparse_initializers']) == 3 and s['file_bytes'] == $(size "$work/auto.onnx"), s
assert abs(s['sparsity'] - 0.9) < 1e-3, s['sparsity']" && echo "ok: inspect of the sparse file" || fail "inspect --json"

# --target rt: pare_rt loads it and agrees with the dense model.
expect_exit 0 "pare_rt loads it" -- "$PARE" export --metadata owner=tests --metadata stage=edge "$work/p.onnx" \
  --target rt --out "$work/rt.onnx"
"$PARE" run "$work/rt.onnx" --engine rt --input "$work/x8.npy" --output "$work/rt.npy"
"$PY" -c "
import numpy as np
d = np.abs(np.load('$work/rt.npy') - np.load('$work/dense.npy')).max()
assert d < 1e-4, d" && echo "ok: pare_rt runs the sparse file like the dense one" || fail "pare_rt differs"
"$PY" -c "
import onnx
m = onnx.load('$work/rt.onnx')
meta = {p.key: p.value for p in m.metadata_props}
assert meta['owner'] == 'tests' and meta['stage'] == 'edge' and 'pare.version' in meta and '(target rt, sparse auto)' in meta['pare.export'], meta
assert len(m.graph.sparse_initializer) == 3 and len(m.graph.initializer) == 3
onnx.checker.check_model(m)" && echo "ok: metadata and onnx.checker" || fail "metadata or checker"

# --sparse on: every initializer with a zero; off: none (the file is the dense one plus metadata).
expect_exit 0 "3 of 6 initializers as COO \(sparse on\)" -- "$PARE" export "$work/p.onnx" --target onnx --sparse on --out "$work/on.onnx"
expect_exit 0 "0 of 6 initializers as COO \(sparse off\)" -- "$PARE" export "$work/p.onnx" --target onnx --sparse off --out "$work/off.onnx"
[ "$(size "$work/off.onnx")" -gt "$(size "$work/auto.onnx")" ] && echo "ok: off is larger" || fail "off is not larger"

# The int8 model of the pruned MLP keeps its sparsity and has the fp32 model's FLOPs.
"$PARE" quantize "$work/p.onnx" --calib "$data" --calib-samples 64 --quiet --out "$work/q.onnx" >/dev/null
"$PY" - "$PARE" "$work/p.onnx" "$work/q.onnx" <<'PYEOF' && echo "ok: int8 inspect" || fail "int8 inspect"
import json, subprocess, sys
pare, f, q = sys.argv[1:]
sf, sq = (json.loads(subprocess.check_output([pare, "inspect", p, "--json"])) for p in (f, q))
print(f"fp32: sparsity {sf['sparsity']:.4f}, FLOPs {sf['flops_per_sample']}; int8: sparsity {sq['sparsity']:.4f}, FLOPs {sq['flops_per_sample']}")
assert abs(sq["sparsity"] - sf["sparsity"]) < 0.01, "int8 sparsity"
assert sq["flops_per_sample"] == sf["flops_per_sample"], "int8 FLOPs"
gemms = [l for l in sq["layers"] if l["op"] == "Gemm"]
assert [l["weight_shape"] for l in gemms] == [[128, 784], [64, 128], [10, 64]], gemms
assert all(l["sparsity"] > 0.5 for l in gemms), gemms
PYEOF
expect_exit 0 "pare_rt loads it" -- "$PARE" export "$work/q.onnx" --target rt --out "$work/q.rt.onnx"
"$PARE" run "$work/q.onnx" --engine rt --input "$work/x8.npy" --output "$work/q.npy"
"$PARE" run "$work/q.rt.onnx" --engine rt --input "$work/x8.npy" --output "$work/q.rt.npy"
cmp -s "$work/q.npy" "$work/q.rt.npy" && echo "ok: int8 export runs the same in pare_rt" || fail "int8 export differs"

# Bad input: exit 2 naming the file, option or node; nothing written.
bad="$work/bad.onnx"
expect_exit 2 "missing.onnx" -- "$PARE" export "$work/missing.onnx" --target onnx --out "$bad"
expect_exit 2 "--target" -- "$PARE" export "$work/p.onnx" --target tflite --out "$bad"
expect_exit 2 "--target is required" -- "$PARE" export "$work/p.onnx" --out "$bad"
expect_exit 2 "--sparse" -- "$PARE" export "$work/p.onnx" --target onnx --sparse maybe --out "$bad"
expect_exit 2 "KEY=VALUE" -- "$PARE" export "$work/p.onnx" --target onnx --metadata novalue --out "$bad"
expect_exit 2 "pare.version.*pare's own" -- "$PARE" export "$work/p.onnx" --target onnx --metadata pare.version=9 --out "$bad"
printf 'not a model' >"$work/garbage.onnx"
expect_exit 2 "garbage.onnx" -- "$PARE" export "$work/garbage.onnx" --target rt --out "$bad"
# A node pare runs and pare_rt does not (FakeQuantize, pare's QAT op): --target rt refuses it.
"$PY" - "$work/p.onnx" "$work/fq.onnx" <<'PYEOF'
import sys, onnx
from onnx import helper, numpy_helper
import numpy as np
m = onnx.load(sys.argv[1])
g = m.graph
last = g.node[-1]
last.output[0] = "raw_logits"
g.initializer.extend([numpy_helper.from_array(np.array(0.05, np.float32), "fq.scale"),
                      numpy_helper.from_array(np.array(0.0, np.float32), "fq.zp")])
g.node.append(helper.make_node("FakeQuantize", ["raw_logits", "fq.scale", "fq.zp"], [g.output[0].name],
                               name="logits_fq", domain="pare", qmin=-128, qmax=127))
m.opset_import.append(helper.make_opsetid("pare", 1))
onnx.save(m, sys.argv[2])
PYEOF
expect_exit 2 "logits_fq.*pare_rt|pare_rt.*logits_fq" -- "$PARE" export "$work/fq.onnx" --target rt --out "$bad"
no_file "$bad"
expect_exit 0 "" -- "$PARE" export "$work/fq.onnx" --target onnx --out "$work/fq.out.onnx"

finish
