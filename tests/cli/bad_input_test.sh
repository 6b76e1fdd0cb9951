#!/usr/bin/env bash
# Bad input exits 2 with a message naming the problem, and leaves no output file behind.
source "$(dirname "$0")/lib.sh"
make_npy_data "$work" 32
"$PARE" train --model mlp:784-32-10 --data "npy:$work/x.npy,$work/y.npy" --epochs 1 --no-val --quiet \
  --out "$work/good.onnx"

# A truncated ONNX file.
head -c 300 "$work/good.onnx" > "$work/trunc.onnx"
expect_exit 2 "trunc.onnx" -- "$PARE" inspect "$work/trunc.onnx"
expect_exit 2 "trunc.onnx" -- "$PARE" run "$work/trunc.onnx" --input "$work/x.npy" --output "$work/o1.npy"
no_file "$work/o1.npy"

# A node with an op pare does not know.
"$PY" - "$work/good.onnx" "$work/unknown.onnx" <<'PYEOF'
import sys, onnx
m = onnx.load(sys.argv[1])
m.graph.node[-1].op_type = "Frobnicate"
onnx.save(m, sys.argv[2])
PYEOF
expect_exit 2 "unknown op 'Frobnicate'" -- "$PARE" inspect "$work/unknown.onnx"

# What a model declares: an opset from the future (ONNX Runtime refuses it too), one too old, an
# unknown domain, and a tensor of too many dimensions; both engines read models the same way.
"$PY" - "$work/good.onnx" "$work" <<'PYEOF'
import sys, onnx
from onnx import helper
src, d = sys.argv[1:3]
def variant(name, edit):
    m = onnx.load(src)
    edit(m)
    onnx.save(m, f"{d}/{name}.onnx")
def opset(v):
    def edit(m):
        m.opset_import[0].version = v
    return edit
variant("opset99", opset(99))
variant("opset5", opset(5))
variant("domain", lambda m: m.opset_import.append(helper.make_opsetid("com.example.secret", 1)))
def rank33(m):
    t = m.graph.initializer[0]
    n = 1
    for x in t.dims: n *= x
    del t.dims[:]
    t.dims.extend([n] + [1] * 32)
variant("rank33", rank33)
PYEOF
for engine in torch rt; do
  expect_exit 2 "opset99.onnx.*imports opset 99 of the default ONNX domain; pare implements opsets 6 to 23" -- \
    "$PARE" run "$work/opset99.onnx" --engine $engine --input "$work/x.npy" --output "$work/o0.npy"
  expect_exit 2 "opset5.onnx.*opset 5 .*opsets 6 to 23" -- \
    "$PARE" run "$work/opset5.onnx" --engine $engine --input "$work/x.npy" --output "$work/o0.npy"
  expect_exit 2 "domain.onnx.*domain 'com.example.secret', which pare does not implement" -- \
    "$PARE" run "$work/domain.onnx" --engine $engine --input "$work/x.npy" --output "$work/o0.npy"
  expect_exit 2 "rank33.onnx.*has 33 dimensions; pare takes at most 32" -- \
    "$PARE" run "$work/rank33.onnx" --engine $engine --input "$work/x.npy" --output "$work/o0.npy"
done
no_file "$work/o0.npy"
expect_exit 2 "opset99.onnx" -- "$PARE" inspect "$work/opset99.onnx"
expect_exit 2 "opset99.onnx" -- "$PARE" distill --teacher "$work/opset99.onnx" --student mlp:784-16-10 \
  --data "npy:$work/x.npy,$work/y.npy" --max-steps 1 --quiet --out "$work/o5.onnx"
no_file "$work/o5.onnx"

# An input of the wrong shape.
"$PY" -c "import numpy as np; np.save('$work/bad_x.npy', np.zeros((2, 3, 28, 28), np.float32))"
expect_exit 2 "input 'input' must have shape" -- "$PARE" run "$work/good.onnx" --input "$work/bad_x.npy" --output "$work/o2.npy"
no_file "$work/o2.npy"
# ... and an input that is not a .npy file at all.
echo "not numpy" > "$work/junk.npy"
expect_exit 2 "junk.npy" -- "$PARE" run "$work/good.onnx" --input "$work/junk.npy" --output "$work/o3.npy"
no_file "$work/o3.npy"

# A missing data file.
expect_exit 2 "missing.npy" -- "$PARE" train --model mlp:784-32-10 --data "npy:$work/missing.npy,$work/y.npy" \
  --epochs 1 --quiet --out "$work/o4.onnx"
no_file "$work/o4.onnx"
expect_exit 2 "fashion-mnist" -- "$PARE" eval "$work/good.onnx" --data "fashion-mnist:$work/nowhere"

# A safetensors header that lies about sizes.
"$PY" - "$work/lie.safetensors" <<'PYEOF'
import sys, json, struct
header = json.dumps({"w": {"dtype": "F32", "shape": [4, 4], "data_offsets": [0, 64]}}).encode()
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<Q", len(header)) + header + b"\0" * 16)  # 16 bytes, not 64
PYEOF
expect_exit 2 "lie.safetensors" -- "$PARE" inspect "$work/lie.safetensors"

# Bad options.
# Library errors name options by their library names; the command line prints its flags.
expect_exit 2 "error: --epochs must be at least 1, got 0" -- "$PARE" train --model mlp:784-32-10 --data "npy:$work/x.npy,$work/y.npy" --epochs 0 --out "$work/o5.onnx"
expect_exit 2 "error: --resume needs --checkpoint \(the file to resume from\)" -- "$PARE" train --model mlp:784-32-10 --data "npy:$work/x.npy,$work/y.npy" --resume --out "$work/o5.onnx"
expect_exit 2 "error: --grace-period must be >= 0" -- "$PARE" launch --grace-period -1 -- true
no_file "$work/o5.onnx"
expect_exit 2 "nosuchmodel" -- "$PARE" inspect nosuchmodel
expect_exit 2 "" -- "$PARE" train --no-such-flag
expect_exit 2 "" -- "$PARE"
finish
