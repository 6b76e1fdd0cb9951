"""Runs an ONNX model in ONNX Runtime (PyPI onnxruntime, pinned in scripts/python-requirements.txt)
on .npy inputs and writes the outputs as .npy.

  python ort_run.py MODEL.onnx --input [NAME=]X.npy ... --output [NAME=]Y.npy ...
                    [--threads T] [--opt-level disabled|basic|extended|all] [--list]

Inputs without NAME bind to the model's inputs in order; an output without NAME is the first
model output. --list prints the model's input and output names as JSON and exits.
Exit 2 on bad usage, 1 when ONNX Runtime cannot load or run the model.
"""
import argparse
import json
import sys

import numpy as np


def die(msg, code=2):
    sys.stderr.write(f"ort_run: {msg}\n")
    sys.exit(code)


def binding(spec):
    name, eq, path = spec.partition("=")
    return (name, path) if eq else ("", spec)


def main():
    p = argparse.ArgumentParser(prog="ort_run.py", description=__doc__.split("\n")[0])
    p.add_argument("model")
    p.add_argument("--input", "-i", action="append", default=[])
    p.add_argument("--output", "-o", action="append", default=[])
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--opt-level", default="all", choices=["disabled", "basic", "extended", "all"])
    p.add_argument("--list", action="store_true")
    a = p.parse_args()
    try:
        import onnxruntime as ort
    except ImportError as e:
        die(f"cannot import onnxruntime (scripts/install-deps installs it into .venv): {e}", 1)
    so = ort.SessionOptions()
    so.graph_optimization_level = {
        "disabled": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    }[a.opt_level]
    if a.threads > 0:
        so.intra_op_num_threads = a.threads
        so.inter_op_num_threads = 1
    try:
        session = ort.InferenceSession(a.model, so, providers=["CPUExecutionProvider"])
    except Exception as e:  # ORT raises its own exception types
        die(f"cannot load {a.model}: {e}", 1)
    inputs = [i.name for i in session.get_inputs()]
    outputs = [o.name for o in session.get_outputs()]
    if a.list:
        print(json.dumps({"inputs": inputs, "outputs": outputs}))
        return
    feeds, nxt = {}, 0
    for spec in a.input:
        name, path = binding(spec)
        if not name:
            if nxt >= len(inputs):
                die(f"--input {spec}: the model takes only {len(inputs)} input(s)")
            name = inputs[nxt]
        elif name not in inputs:
            die(f"--input {spec}: the model has no input '{name}' (inputs: {' '.join(inputs)})")
        nxt = inputs.index(name) + 1
        feeds[name] = np.load(path)
    for name in inputs:
        if name not in feeds:
            die(f"no --input given for model input '{name}'")
    outs = [(binding(s)[0] or outputs[0], binding(s)[1]) for s in a.output]
    for name, _ in outs:
        if name not in outputs:
            die(f"--output: the model has no output '{name}' (outputs: {' '.join(outputs)})")
    try:
        results = session.run([n for n, _ in outs], feeds)
    except Exception as e:
        die(f"cannot run {a.model}: {e}", 1)
    for (_, path), value in zip(outs, results):
        with open(path, "wb") as f:  # np.save(path) would append .npy to any other name
            np.save(f, value)


if __name__ == "__main__":
    main()
