"""Writes a small decoder layer in ONNX opset 23 (RMSNormalization, RotaryEmbedding, Attention with
grouped KV heads, the causal mask and a KV cache) with inputs, and ONNX Runtime's outputs, for
tests/peer/lm_ops_ort_test.sh. Usage: lm_ops_model.py DIR (writes DIR/layer.onnx, DIR/*.npy)."""
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

out = sys.argv[1]
rng = np.random.default_rng(38)
batch, seq, past, hidden, q_heads, kv_heads = 2, 5, 3, 32, 4, 2
head = hidden // q_heads
positions = 16


def init(name, a):
    return numpy_helper.from_array(np.asarray(a, dtype=np.float32), name)


inv = 10000.0 ** (-np.arange(0, head, 2) / head)
angle = np.outer(np.arange(positions), inv)
inits = [
    init("norm1.scale", rng.uniform(0.5, 1.5, hidden)),
    init("wq", rng.normal(0, 0.2, (hidden, q_heads * head))),
    init("wk", rng.normal(0, 0.2, (hidden, kv_heads * head))),
    init("wv", rng.normal(0, 0.2, (hidden, kv_heads * head))),
    init("wo", rng.normal(0, 0.2, (q_heads * head, hidden))),
    init("norm2.scale", rng.uniform(0.5, 1.5, hidden)),
    init("cos", np.cos(angle)),
    init("sin", np.sin(angle)),
]
nodes = [
    helper.make_node("RMSNormalization", ["x", "norm1.scale"], ["h"], epsilon=1e-6),
    helper.make_node("MatMul", ["h", "wq"], ["q"]),
    helper.make_node("MatMul", ["h", "wk"], ["k"]),
    helper.make_node("MatMul", ["h", "wv"], ["v"]),
    helper.make_node("RotaryEmbedding", ["q", "cos", "sin", "position_ids"], ["q_rot"], num_heads=q_heads),
    helper.make_node("RotaryEmbedding", ["k", "cos", "sin", "position_ids"], ["k_rot"], num_heads=kv_heads,
                     interleaved=1),
    helper.make_node("Attention", ["q_rot", "k_rot", "v", "", "past_key", "past_value"],
                     ["attn", "present_key", "present_value"], is_causal=1, q_num_heads=q_heads,
                     kv_num_heads=kv_heads),
    helper.make_node("MatMul", ["attn", "wo"], ["o"]),
    helper.make_node("Add", ["x", "o"], ["r"]),
    helper.make_node("RMSNormalization", ["r", "norm2.scale"], ["y"], axis=-1),
]
f = TensorProto.FLOAT
graph = helper.make_graph(
    nodes, "lm_layer",
    [helper.make_tensor_value_info("x", f, ["N", seq, hidden]),
     helper.make_tensor_value_info("position_ids", TensorProto.INT64, ["N", seq]),
     helper.make_tensor_value_info("past_key", f, ["N", kv_heads, past, head]),
     helper.make_tensor_value_info("past_value", f, ["N", kv_heads, past, head])],
    [helper.make_tensor_value_info("y", f, ["N", seq, hidden]),
     helper.make_tensor_value_info("present_key", f, ["N", kv_heads, past + seq, head]),
     helper.make_tensor_value_info("present_value", f, ["N", kv_heads, past + seq, head])],
    inits)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
model.ir_version = 10
onnx.checker.check_model(model, full_check=True)
onnx.save(model, f"{out}/layer.onnx")

feeds = {
    "x": rng.normal(0, 1, (batch, seq, hidden)).astype(np.float32),
    "position_ids": np.tile(np.arange(past, past + seq), (batch, 1)).astype(np.int64),
    "past_key": rng.normal(0, 1, (batch, kv_heads, past, head)).astype(np.float32),
    "past_value": rng.normal(0, 1, (batch, kv_heads, past, head)).astype(np.float32),
}
for k, v in feeds.items():
    np.save(f"{out}/{k}.npy", v)
sess = ort.InferenceSession(f"{out}/layer.onnx", providers=["CPUExecutionProvider"])
for o, v in zip(["y", "present_key", "present_value"], sess.run(None, feeds)):
    np.save(f"{out}/ort_{o}.npy", v)
