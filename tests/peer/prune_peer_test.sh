#!/usr/bin/env bash
# Peer test: structured 50% channel pruning of torchvision resnet18 and mobilenet_v2 (exported by
# PyTorch) and of the zoo cnn and transformer (attention heads) gives models that onnx.checker
# accepts, that ONNX Runtime runs with the same outputs as `pare run`, and whose parameters and
# FLOPs drop (pare inspect --json before and after). Also freshly initialised resnet18 and
# mobilenet_v2 as torch.onnx.export writes them: their equal constants (zero biases after BatchNorm
# folding) de-duplicated into one tensor read through Identity nodes (issue 18, item 3).
#
# Env: PARE, PARE_SOURCE_DIR, PARE_PYTHON. Needs torch, torchvision, onnx and onnxruntime in the
# peers' Python (tests/peers.sh).
source "$(dirname "${BASH_SOURCE[0]}")/ort_peer_lib.sh" prune-peer "numpy, onnx, torch, torchvision"

"$PY" "$here/export_models.py" "$tmp" --only resnet18,mobilenet_v2 >/dev/null
"$PY" - "$tmp" <<'PYEOF'
import sys, numpy as np
d = sys.argv[1]
rng = np.random.default_rng(0)
np.save(f"{d}/img.x.npy", rng.random((4, 3, 224, 224), dtype=np.float32))
np.save(f"{d}/img.y.npy", rng.integers(0, 1000, 4).astype(np.int64))
np.save(f"{d}/small.x.npy", rng.random((8, 1, 28, 28), dtype=np.float32))
np.save(f"{d}/small.y.npy", rng.integers(0, 10, 8).astype(np.int64))
np.save(f"{d}/tok.x.npy", rng.integers(0, 50, (8, 8)).astype(np.int64))
np.save(f"{d}/tok.y.npy", rng.integers(0, 5, 8).astype(np.int64))
np.save(f"{d}/tok.b2.npy", rng.integers(0, 50, (2, 8)).astype(np.int64))
np.save(f"{d}/img64.x.npy", rng.random((4, 3, 64, 64), dtype=np.float32))
np.save(f"{d}/img64.b1.npy", rng.random((1, 3, 64, 64), dtype=np.float32))
import torch, torchvision, warnings
warnings.filterwarnings("ignore")
torch.manual_seed(0)
for name in ("resnet18", "mobilenet_v2"):
    m = getattr(torchvision.models, name)(num_classes=1000).eval()
    torch.onnx.export(m, torch.randn(2, 3, 64, 64), f"{d}/{name}.fresh.onnx", opset_version=13, dynamo=False,
                      input_names=["input"], output_names=["logits"],
                      dynamic_axes={"input": {0: "N"}, "logits": {0: "N"}})
    import onnx
    ids = sum(n.op_type == "Identity" for n in onnx.load(f"{d}/{name}.fresh.onnx").graph.node)
    assert ids > 0, f"{name}: the export has no Identity nodes; this case tests nothing"
PYEOF

failures=()
check() {  # NAME MODEL DATA INPUT
  local name=$1 model=$2 data=$3 input=$4 out="$tmp/$1.pruned.onnx" rc=0
  "$PARE" prune "$model" --data "$data" --no-val --quiet --method channel --sparsity 0.5 --out "$out" \
    2>"$tmp/err.txt" || rc=$?
  if ((rc != 0)); then echo "FAIL $name: pare prune (exit $rc)"; head -c 3000 "$tmp/err.txt"; failures+=("$name prune"); return; fi
  "$PY" "$here/peer_util.py" check-onnx "$out" || { failures+=("$name checker"); return; }
  "$PY" - "$PARE" "$model" "$out" "$name" <<'PYEOF' || failures+=("$name size")
import json, subprocess, sys
pare, before, after, name = sys.argv[1:]
b, a = (json.loads(subprocess.check_output([pare, "inspect", p, "--json"])) for p in (before, after))
pb, pa, fb, fa = b["parameters"], a["parameters"], b["flops_per_sample"], a["flops_per_sample"]
print(f"{name}: parameters {pb} -> {pa} ({pa / pb:.1%}), FLOPs/sample {fb} -> {fa} ({fa / fb:.1%})")
# Halving both the input and output channels of most layers leaves about a quarter; the layers
# next to the input and the classifier keep one side, so well under 60% must remain.
ok = pa < 0.6 * pb and fa < 0.6 * fb
if not ok:
    print(f"FAIL {name}: parameters or FLOPs did not drop as expected")
sys.exit(0 if ok else 1)
PYEOF
  ort_matches_pare "$out" "$input" "$name pruned" || failures+=("$name ort")
}

check resnet18 "$tmp/resnet18.onnx" "npy:$tmp/img.x.npy,$tmp/img.y.npy" "$tmp/resnet18.b1.input.npy"
check mobilenet_v2 "$tmp/mobilenet_v2.onnx" "npy:$tmp/img.x.npy,$tmp/img.y.npy" "$tmp/mobilenet_v2.b1.input.npy"
check resnet18.fresh "$tmp/resnet18.fresh.onnx" "npy:$tmp/img64.x.npy,$tmp/img.y.npy" "$tmp/img64.b1.npy"
check mobilenet_v2.fresh "$tmp/mobilenet_v2.fresh.onnx" "npy:$tmp/img64.x.npy,$tmp/img.y.npy" "$tmp/img64.b1.npy"
check cnn cnn "npy:$tmp/small.x.npy,$tmp/small.y.npy" "$tmp/small.x.npy"
check transformer "transformer:vocab=50,d=32,heads=4,layers=2,classes=5,seq=8" "npy:$tmp/tok.x.npy,$tmp/tok.y.npy" "$tmp/tok.b2.npy"

if ((${#failures[@]})); then echo "FAILED (${#failures[@]}): ${failures[*]}"; exit 1; fi
echo "PASSED: channel-pruned models pass onnx.checker, run in onnxruntime like in pare, and shrink"
