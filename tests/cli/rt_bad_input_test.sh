#!/usr/bin/env bash
# pare run --engine rt on hostile files and wrong inputs: exit 2 with a message naming the file,
# node or input, and no output file left behind.
source "$(dirname "$0")/lib.sh"

# good.onnx: x [N, 4] -> Gemm (w [3, 4], b [3]) 'fc' -> Relu 'act' -> y [N, 3]; then one hostile
# variant of it per case, and the inputs.
"$PY" - "$work" <<'PYEOF'
import sys, copy
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
d = sys.argv[1]
rng = np.random.default_rng(0)
w = numpy_helper.from_array(rng.standard_normal((3, 4)).astype(np.float32), "w")
b = numpy_helper.from_array(rng.standard_normal(3).astype(np.float32), "b")
g = helper.make_graph(
    [helper.make_node("Gemm", ["x", "w", "b"], ["h"], name="fc", transB=1),
     helper.make_node("Relu", ["h"], ["y"], name="act")],
    "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])], [w, b])
good = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
good.ir_version = 8
onnx.checker.check_model(good)
onnx.save(good, f"{d}/good.onnx")

def variant(name, edit):
    m = copy.deepcopy(good)
    edit(m)
    with open(f"{d}/{name}.onnx", "wb") as f:
        f.write(m.SerializeToString())

def init(m, name):
    return next(t for t in m.graph.initializer if t.name == name)

def neg_dims(m):
    init(m, "w").dims[0] = -3
variant("neg_dims", neg_dims)

def huge_dims(m):
    t = init(m, "w")
    t.dims[:] = [1 << 40, 1 << 30]
    t.raw_data = b"abcd"
variant("huge_dims", huge_dims)

def huge_external(m):
    t = init(m, "w")
    t.ClearField("raw_data")
    t.dims[:] = [1 << 38, 4]
    t.data_location = TensorProto.EXTERNAL
    t.external_data.add(key="location", value="weights.bin")
    t.external_data.add(key="length", value=str(1 << 40))
variant("huge_external", huge_external)

def outside(m):
    t = init(m, "w")
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    t.external_data.add(key="location", value="../outside.bin")
variant("outside", outside)

def unknown_op(m):
    m.graph.node[1].op_type = "Frobnicate"
variant("unknown_op", unknown_op)

def undefined(m):
    m.graph.node[1].input[0] = "nowhere"
variant("undefined", undefined)

np.save(f"{d}/x.npy", rng.standard_normal((2, 4)).astype(np.float32))
np.save(f"{d}/x_int.npy", np.arange(8, dtype=np.int64).reshape(2, 4))
np.save(f"{d}/x_rank.npy", rng.standard_normal(8).astype(np.float32))
np.save(f"{d}/x_dims.npy", rng.standard_normal((2, 5)).astype(np.float32))
PYEOF
echo "0123456789" > "$work/outside.bin"
run_rt() { "$PARE" run "$1" --engine rt --input "$work/$2" --output "$work/$3"; }
# refuses PATTERN MODEL INPUT OUTPUT: exit 2 with PATTERN in the message, and no output file.
refuses() { expect_exit 2 "$1" -- run_rt "$2" "$3" "$4"; no_file "$work/$4"; }

# The good model runs.
expect_exit 0 "" -- run_rt "$work/good.onnx" x.npy ok.npy
[ -f "$work/ok.npy" ] && echo "ok: good model wrote its output" || fail "good model wrote no output"

# A truncated file, and a file that is no ONNX model at all.
head -c 100 "$work/good.onnx" > "$work/trunc.onnx"
refuses "trunc.onnx" "$work/trunc.onnx" x.npy o1.npy
echo "not a model" > "$work/junk.onnx"
refuses "junk.onnx" "$work/junk.onnx" x.npy o2.npy

# Negative dims; huge declared dims whose data is missing (inline or external).
refuses "neg_dims.onnx.*'w'.*negative" "$work/neg_dims.onnx" x.npy o3.npy
refuses "huge_dims.onnx.*'w'" "$work/huge_dims.onnx" x.npy o4.npy
refuses "huge_external.onnx.*'w'.*weights.bin" "$work/huge_external.onnx" x.npy o5.npy

# External data outside the model's folder.
refuses "outside.onnx.*'w'.*\.\./outside.bin" "$work/outside.onnx" x.npy o6.npy

# An op pare_rt does not know; a node reading a value nobody defines.
refuses "unknown_op.onnx.*'act'.*Frobnicate" "$work/unknown_op.onnx" x.npy o7.npy
refuses "undefined.onnx.*'act'.*'nowhere'" "$work/undefined.onnx" x.npy o8.npy

# Inputs of the wrong dtype, rank and dims.
refuses "input 'x'.*float32.*int64" "$work/good.onnx" x_int.npy o9.npy
refuses "input 'x'.*rank 2" "$work/good.onnx" x_rank.npy o10.npy
refuses "input 'x'.*dim 1 = 4" "$work/good.onnx" x_dims.npy o11.npy
finish
