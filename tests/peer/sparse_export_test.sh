#!/usr/bin/env bash
# Peer test (issue 11): the 90%-sparse mlp:784-300-100-10 (pare prune --global --sparsity 0.9, after
# a short training on a Fashion-MNIST slice) exported with `pare export --sparse auto` is at least 3x
# smaller than its dense fp32 file; onnx.checker accepts it; ONNX Runtime and pare_rt (`pare run
# --engine rt`) both load it and match the dense model (pare's libtorch interpreter) on 256 test
# images, and ONNX Runtime gives the same logits for the sparse and the dense file.
#
# onnx 1.12's full check (shape inference) cannot type sparse initializers (it reports "Input
# tensors of wrong rank (0)" for any model that has them), so the plain checker is used here.
#
# Env: PARE, PARE_SOURCE_DIR, PARE_PYTHON. Without the dataset, numpy, onnx or onnxruntime the test
# fails under make test and CI, and skips otherwise (tests/peers.sh).
source "$(dirname "${BASH_SOURCE[0]}")/ort_peer_lib.sh" sparse-export "numpy, onnx"
need "Fashion-MNIST (dataset-fashion-mnist)" test -e /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz

# 2048 training images and 256 test images as .npy.
"$PY" - "$tmp" <<'PYEOF'
import gzip, sys
import numpy as np
d = sys.argv[1]
def idx(path, n):
    data = gzip.open(path).read()
    nd = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(nd)]
    return np.frombuffer(data, np.uint8, offset=4 + 4 * nd).reshape(dims)[:n]
root = "/usr/share/datasets/fashion-mnist/"
np.save(f"{d}/x.npy", idx(root + "train-images-idx3-ubyte.gz", 2048).astype(np.float32)[:, None] / 255)
np.save(f"{d}/y.npy", idx(root + "train-labels-idx1-ubyte.gz", 2048).astype(np.int64))
np.save(f"{d}/test.npy", idx(root + "t10k-images-idx3-ubyte.gz", 256).astype(np.float32)[:, None] / 255)
PYEOF
data="npy:$tmp/x.npy,$tmp/y.npy"

"$PARE" train --model mlp:784-300-100-10 --data "$data" --epochs 1 --lr 2e-3 --seed 1 --no-val --quiet \
  --out "$tmp/mlp.onnx"
"$PARE" prune "$tmp/mlp.onnx" --data "$data" --global --sparsity 0.9 --no-val --quiet --out "$tmp/dense.onnx"
"$PARE" export "$tmp/dense.onnx" --target rt --sparse auto --out "$tmp/sparse.onnx"

failures=()
"$PY" - "$tmp/dense.onnx" "$tmp/sparse.onnx" <<'PYEOF' || failures+=("size or checker")
import os, sys
import numpy as np
import onnx
from onnx import numpy_helper
dense, sparse = sys.argv[1:]
d, s = os.path.getsize(dense), os.path.getsize(sparse)
m = onnx.load(sparse)
onnx.checker.check_model(m)
nnz = sum(int(t.values.dims[0]) for t in m.graph.sparse_initializer)
print(f"dense {d} bytes, sparse {s} bytes: {d / s:.2f}x smaller; {len(m.graph.sparse_initializer)} sparse "
      f"initializers holding {nnz} values")
w = {t.name: numpy_helper.to_array(t) for t in onnx.load(dense).graph.initializer}
print("weight sparsity " + ", ".join(f"{k} {np.mean(v == 0):.3f}" for k, v in sorted(w.items()) if v.ndim == 2))
if d < 3 * s:
    print(f"FAIL: the sparse file is only {d / s:.2f}x smaller (want >= 3x)")
    sys.exit(1)
PYEOF

# The dense model in pare's libtorch interpreter is the reference.
"$PARE" run "$tmp/dense.onnx" --input "$tmp/test.npy" --output "$tmp/ref.npy"
rc=0
"$PY" "$here/ort_run.py" "$tmp/sparse.onnx" --input "$tmp/test.npy" --output "$tmp/ort.npy" 2>"$tmp/err.txt" || rc=$?
if ((rc != 0)); then
  echo "FAIL: onnxruntime cannot run the sparse model (exit $rc):"; head -c 2000 "$tmp/err.txt"; echo
  failures+=("ort load")
else
  "$PY" "$here/peer_util.py" compare "$tmp/ort.npy" "$tmp/ref.npy" --atol 1e-4 --scale-floor 1 \
    --label "sparse model in onnxruntime vs dense model in pare" || failures+=("ort values")
  "$PY" "$here/ort_run.py" "$tmp/dense.onnx" --input "$tmp/test.npy" --output "$tmp/ort_dense.npy"
  "$PY" "$here/peer_util.py" compare "$tmp/ort.npy" "$tmp/ort_dense.npy" --atol 0 \
    --label "onnxruntime: sparse vs dense file" || failures+=("ort sparse vs dense")
fi
if "$PARE" run "$tmp/sparse.onnx" --engine rt --input "$tmp/test.npy" --output "$tmp/rt.npy" 2>"$tmp/err.txt"; then
  "$PY" "$here/peer_util.py" compare "$tmp/rt.npy" "$tmp/ref.npy" --atol 1e-4 --scale-floor 1 \
    --label "sparse model in pare_rt vs dense model in pare" || failures+=("rt values")
else
  echo "FAIL: pare run --engine rt cannot run the sparse model:"; head -c 2000 "$tmp/err.txt"; echo
  failures+=("rt load")
fi

if ((${#failures[@]})); then echo "FAILED (${#failures[@]}): ${failures[*]}"; exit 1; fi
echo "PASSED: the 90%-sparse MLP exports >= 3x smaller and runs in onnxruntime and pare_rt like the dense model"
