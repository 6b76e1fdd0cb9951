"""Times an ONNX model in ONNX Runtime (PyPI onnxruntime, pinned in scripts/python-requirements.txt):
the ONNX Runtime side of bench/rt_bench.py.

  python bench/ort_bench.py MODEL.onnx --input X.npy [--threads T] [--seconds S] [--warmup W] [--iters N]

One session (intra-op threads T, one inter-op thread, sequential execution, all graph
optimizations), `--warmup` untimed runs, then runs until both `--iters` runs and `--seconds` have
passed. Prints one JSON line: p50/p90/p99/mean latency in ms, iterations, samples/s (the input's
first dim over the mean latency) and the process's peak resident memory in KB.
"""
import argparse
import json
import resource
import sys
import time

import numpy as np


def main():
    p = argparse.ArgumentParser(prog="ort_bench.py", description=__doc__.split("\n")[0])
    p.add_argument("model")
    p.add_argument("--input", required=True)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seconds", type=float, default=2)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iters", type=int, default=10)
    a = p.parse_args()
    try:
        import onnxruntime as ort
    except ImportError as e:
        sys.exit(f"ort_bench: cannot import onnxruntime (scripts/install-deps installs it into .venv): {e}")
    so = ort.SessionOptions()
    so.intra_op_num_threads = a.threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = ort.InferenceSession(a.model, so, providers=["CPUExecutionProvider"])
    x = np.load(a.input)
    feeds = {session.get_inputs()[0].name: x}
    for _ in range(a.warmup):
        session.run(None, feeds)
    ms = []
    start = time.perf_counter()
    while True:
        t0 = time.perf_counter()
        session.run(None, feeds)
        t1 = time.perf_counter()
        ms.append((t1 - t0) * 1e3)
        if len(ms) >= a.iters and t1 - start >= a.seconds:
            break
    s = sorted(ms)

    def pct(q):
        return s[min(len(s) - 1, round(q * (len(s) - 1)))]

    mean = sum(ms) / len(ms)
    print(json.dumps({
        "engine": "ort", "batch": int(x.shape[0]), "threads": a.threads, "iters": len(ms), "p50_ms": pct(0.5),
        "p90_ms": pct(0.9), "p99_ms": pct(0.99), "mean_ms": mean, "samples_per_s": x.shape[0] * 1000 / mean,
        "peak_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
    }))


if __name__ == "__main__":
    main()
