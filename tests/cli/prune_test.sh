#!/usr/bin/env bash
# pare prune end to end on a small slice: magnitude (per layer and global), N:M, a gradual
# schedule inside training with and without a teacher, channel pruning to a smaller valid ONNX
# model, the sensitivity scan, and impossible requests (exit 2, no output file).
source "$(dirname "$0")/lib.sh"
make_npy_data "$work" 256
data="npy:$work/x.npy,$work/y.npy"
q=(--data "$data" --batch-size 32 --quiet)
json_get() { "$PY" -c "import json,sys; print(json.loads(sys.stdin.read().splitlines()[-1])['$1'])"; }

# One-shot global magnitude: exactly the requested share of the weights is zero.
out=$("$PARE" prune mlp:784-64-32-10 "${q[@]}" --sparsity 0.9 --global --json --out "$work/mag.onnx")
s=$(json_get weight_sparsity <<<"$out")
"$PY" -c "import sys; s=float(sys.argv[1]); sys.exit(0 if abs(s-0.9) < 1e-3 else 1)" "$s" \
  && echo "ok: global sparsity $s" || fail "global sparsity $s, want 0.9"
expect_exit 0 "sparsity" -- "$PARE" inspect "$work/mag.onnx"

# N:M 2:4 along the input dimension of every Gemm weight (W is [out, in]: groups along axis 1).
expect_exit 0 "" -- "$PARE" prune mlp:784-64-32-10 "${q[@]}" --method nm --out "$work/nm.onnx"
"$PY" - "$work/nm.onnx" <<'PYEOF' && echo "ok: 2:4 pattern" || fail "2:4 pattern violated"
import sys, onnx, numpy as np
from onnx import numpy_helper
m = onnx.load(sys.argv[1])
inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
n = 0
for node in m.graph.node:
    if node.op_type != "Gemm":
        continue
    w = inits[node.input[1]]
    groups = (w.reshape(w.shape[0], -1, 4) != 0).sum(-1)
    assert groups.max() <= 2, (node.name, groups.max())
    n += 1
assert n == 3, n
PYEOF

# Gradual pruning during training: masks follow the cubic schedule and stay applied.
out=$("$PARE" prune mlp:784-64-32-10 "${q[@]}" --sparsity 0.8 --schedule gradual --epochs 2 --json --out "$work/grad.onnx")
s=$(json_get weight_sparsity <<<"$out")
"$PY" -c "import sys; s=float(sys.argv[1]); sys.exit(0 if abs(s-0.8) < 1e-3 else 1)" "$s" \
  && echo "ok: gradual sparsity $s" || fail "gradual sparsity $s, want 0.8"
# ... and with a teacher (distillation recovers).
expect_exit 0 '"accuracy_after"' -- "$PARE" prune mlp:784-64-32-10 "${q[@]}" --sparsity 0.5 --schedule iterative \
  --epochs 1 --teacher lenet5 --json --out "$work/kd.onnx"

# SIGKILL in the middle of gradual pruning, then --resume: the masks come back from the restored
# weights and the result is identical to an uninterrupted run.
make_npy_data "$work" 1024
big="npy:$work/x.npy,$work/y.npy"
expect_resume_identical prune 7 prune mlp:784-64-32-10 --data "$big" --batch-size 16 --sparsity 0.8 --schedule gradual \
  --epochs 2 --prune-every 5 --teacher lenet5 --seed 3 --no-val --quiet --threads 1
make_npy_data "$work" 256

# Channel pruning: a smaller model that onnx.checker accepts and pare runs.
out=$("$PARE" prune cnn "${q[@]}" --method channel --sparsity 0.5 --json --out "$work/cnn50.onnx")
pb=$(json_get params_before <<<"$out"); pa=$(json_get params_after <<<"$out")
fb=$(json_get flops_before <<<"$out"); fa=$(json_get flops_after <<<"$out")
[ "$pa" -lt $((pb / 2)) ] && [ "$fa" -lt $((fb / 2)) ] && echo "ok: cnn params $pb -> $pa, flops $fb -> $fa" \
  || fail "cnn params $pb -> $pa, flops $fb -> $fa"
"$PY" -c "import onnx,sys; onnx.checker.check_model(onnx.load(sys.argv[1]))" "$work/cnn50.onnx" \
  && echo "ok: checker" || fail "onnx checker rejected the pruned cnn"
expect_exit 0 "conv1" -- "$PARE" inspect "$work/cnn50.onnx"
expect_exit 0 "" -- "$PARE" prune cnn "${q[@]}" --method channel --importance taylor --taylor-batches 2 \
  --epochs 1 --out "$work/cnn_taylor.onnx"

# Sensitivity scan: a table and a JSON file with one row per layer and ratio.
expect_exit 0 "fc1" -- "$PARE" prune mlp:784-64-32-10 "${q[@]}" --analyze --ratios 0.5,0.9 --analyze-json "$work/sens.json"
"$PY" -c "import json,sys; r=json.load(open(sys.argv[1]))['rows']; sys.exit(0 if len(r)==6 else 1)" "$work/sens.json" \
  && echo "ok: sensitivity rows" || fail "sensitivity JSON"

# One-shot pruning needs no data (issue 12's papercuts); what trains or scores says it needs --data.
expect_exit 0 "weight sparsity" -- "$PARE" prune mlp:784-64-32-10 --sparsity 0.9 --global --out "$work/nodata.onnx"
[ -f "$work/nodata.onnx" ] && echo "ok: pruned without data" || fail "no output without --data"
expect_exit 0 "" -- "$PARE" prune cnn --method channel --sparsity 0.5 --quiet --out "$work/nodata_ch.onnx"
expect_exit 2 "give --data" -- "$PARE" prune mlp:784-64-32-10 --sparsity 0.5 --epochs 1 --out "$work/bad.onnx"
expect_exit 2 "give --data" -- "$PARE" prune mlp:784-64-32-10 --analyze

# Impossible requests: exit 2 naming the problem, no output file.
bad=(prune mlp:784-64-32-10 "${q[@]}" --out "$work/bad.onnx")
expect_exit 2 "--sparsity must lie in \[0, 1\]" -- "$PARE" "${bad[@]}" --sparsity 1.5
expect_exit 2 "--sparsity must lie in \[0, 1\]" -- "$PARE" "${bad[@]}" --sparsity -0.2
expect_exit 2 "--exclude 'fc9'.*no node" -- "$PARE" "${bad[@]}" --exclude fc1,fc9
expect_exit 2 "remove every one of the .* channels" -- "$PARE" "${bad[@]}" --method channel --sparsity 1
expect_exit 2 "give --epochs" -- "$PARE" "${bad[@]}" --schedule gradual
expect_exit 2 "use --schedule oneshot" -- "$PARE" "${bad[@]}" --method nm --schedule gradual --epochs 1
expect_exit 2 "n <= m" -- "$PARE" "${bad[@]}" --method nm --n 5 --m 4
expect_exit 2 "--method must be" -- "$PARE" "${bad[@]}" --method random
no_file "$work/bad.onnx"
finish
