#!/usr/bin/env bash
# pare run --engine rt -v says how pare_rt lowered the model: the passes that changed the graph, and
# for each node that did not get its fast form, why (a kernel's refusal naming the attribute, a QDQ
# pattern left in float naming the dtype). pare export --target rt names the node and pare_rt's
# reason when it refuses a model (exit 2).
source "$(dirname "$0")/lib.sh"

# gemm.onnx: Gemm 'fc' (alpha 2, C a graph input): oneDNN adds the bias before scaling, so pare_rt
# runs it on the reference kernel. qdq.onnx: x -> Q -> DQ -> MatMul 'mm' with a uint8 weight: int8
# kernels take int8 weights, so the pattern runs as float. half.onnx: Cast 'to_half' to float16, which
# pare_rt does not compute in.
"$PY" - "$work" <<'PYEOF'
import sys
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
d = sys.argv[1]
rng = np.random.default_rng(0)

def save(name, nodes, inputs, outputs, inits, opsets=(("", 13),)):
    g = helper.make_graph(nodes, "g", inputs, outputs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid(dom, v) for dom, v in opsets])
    m.ir_version = 8
    onnx.save(m, f"{d}/{name}.onnx")

f = lambda name, dims: helper.make_tensor_value_info(name, TensorProto.FLOAT, dims)
w = numpy_helper.from_array(rng.standard_normal((3, 4)).astype(np.float32), "w")
save("gemm", [helper.make_node("Gemm", ["x", "w", "c"], ["y"], name="fc", transB=1, alpha=2.0)],
     [f("x", ["N", 4]), f("c", ["N", 3])], [f("y", ["N", 3])], [w])

inits = [numpy_helper.from_array(np.array(0.1, np.float32), "xs"),
         numpy_helper.from_array(np.array(128, np.uint8), "xz"),
         numpy_helper.from_array(rng.integers(0, 255, (4, 3)).astype(np.uint8), "wq"),
         numpy_helper.from_array(np.array(0.05, np.float32), "ws"),
         numpy_helper.from_array(np.array(0, np.uint8), "wz")]
save("qdq", [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"], name="q"),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"], name="dq"),
             helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], name="wdq"),
             helper.make_node("MatMul", ["xd", "wd"], ["y"], name="mm")],
     [f("x", ["N", 4])], [f("y", ["N", 3])], inits)

save("half", [helper.make_node("Cast", ["x"], ["h"], name="to_half", to=TensorProto.FLOAT16),
              helper.make_node("Cast", ["h"], ["y"], name="back", to=TensorProto.FLOAT)],
     [f("x", ["N", 4])], [f("y", ["N", 4])], [])

np.save(f"{d}/x.npy", rng.standard_normal((2, 4)).astype(np.float32))
np.save(f"{d}/c.npy", rng.standard_normal((2, 3)).astype(np.float32))
PYEOF

expect_exit 0 "fallback: Gemm 'fc': reference kernel: alpha=2 beta=1 with C computed at run time" -- \
  "$PARE" run "$work/gemm.onnx" --engine rt -v --input "x=$work/x.npy" --input "c=$work/c.npy" --output "$work/y.npy"
expect_exit 0 "fallback: MatMul 'mm': stays float, QDQ simulated: the weight is uint8" -- \
  "$PARE" run "$work/qdq.onnx" --engine rt -v --input "$work/x.npy" --output "$work/y2.npy"
expect_exit 0 "passes that changed the graph: fold_constants sort_nodes" -- \
  "$PARE" run "$work/qdq.onnx" --engine rt -v --input "$work/x.npy" --output "$work/y2.npy"
# Without -v, nothing of it.
out=$("$PARE" run "$work/gemm.onnx" --engine rt --input "x=$work/x.npy" --input "c=$work/c.npy" --output "$work/y.npy" 2>&1)
if grep -q "fallback" <<<"$out"; then fail "pare run without -v printed the lowering report: $out"; else echo "ok: quiet without -v"; fi

expect_exit 2 "pare_rt refuses the model: .*Cast 'to_half': Cast to float16 is not supported" -- \
  "$PARE" export "$work/half.onnx" --target rt --out "$work/out.onnx"
no_file "$work/out.onnx"

finish
