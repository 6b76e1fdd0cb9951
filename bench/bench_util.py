"""Helpers shared by the benchmarks (train_throughput.py, kd_step.py): Fashion-MNIST loading, the
zoo models written out in torch.nn, running pare and reading its JSON, pare's steady-state
training throughput, the result table."""
import gzip
import json
import os
import subprocess
import sys
from collections import OrderedDict

FMNIST_DIR = "/usr/share/datasets/fashion-mnist"
TUNED_MALLOC = {
    "MALLOC_MMAP_THRESHOLD_": "33554432",
    "MALLOC_TRIM_THRESHOLD_": "4294967296",
    "MALLOC_TOP_PAD_": "268435456",
}


def load_idx(path):
    import numpy as np
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load_fmnist_torch(split="train"):
    """(x [N,1,28,28] float32 in [0,1], y [N] int64) as torch tensors, like pare's IDX loader."""
    import numpy as np
    import torch
    prefix = "train" if split == "train" else "t10k"
    x = torch.from_numpy(
        load_idx(os.path.join(FMNIST_DIR, f"{prefix}-images-idx3-ubyte.gz")).astype(np.float32) / 255.0
    ).unsqueeze(1).contiguous()
    y = torch.from_numpy(load_idx(os.path.join(FMNIST_DIR, f"{prefix}-labels-idx1-ubyte.gz")).astype(np.int64))
    return x, y


def batch_sampler(x_all, y_all, batch, seed=0):
    """A function giving the next shuffled batch (x, y), a new permutation each epoch (its tail
    batch is dropped here; pare keeps it), the same sequence for the same seed."""
    import torch
    gen = torch.Generator().manual_seed(seed)
    n = x_all.shape[0]
    perm, pos = torch.randperm(n, generator=gen), 0

    def next_batch():
        nonlocal perm, pos
        if pos + batch > n:
            perm, pos = torch.randperm(n, generator=gen), 0
        idx = perm[pos:pos + batch]
        pos += batch
        return x_all.index_select(0, idx), y_all.index_select(0, idx)
    return next_batch


def torch_model(spec, who="bench"):
    """The zoo model `spec` (core/zoo.cpp) as torch.nn, with PyTorch's default initialisation.
    Layers are named after the zoo's nodes, so state_dict keys are the ONNX initializer names of
    pare's export (conv1.weight, bn1.running_mean, fc2.bias, ...)."""
    import torch.nn as nn
    if spec.startswith("mlp:"):
        sizes = [int(s) for s in spec[4:].split(",")[0].split("-")]
        layers = [("flatten", nn.Flatten())]
        for i in range(1, len(sizes)):
            layers.append((f"fc{i}", nn.Linear(sizes[i - 1], sizes[i])))
            if i + 1 < len(sizes):
                layers.append((f"relu{i}", nn.ReLU()))
        return nn.Sequential(OrderedDict(layers))
    if spec == "cnn":
        # Three Conv3x3(no bias)-BN-Relu-MaxPool2 stages 32/64/64 (28 -> 14 -> 7 -> 3), Gemm 256,
        # Dropout 0.3, Gemm 10.
        def stage(n, cin, cout):
            return [(f"conv{n}", nn.Conv2d(cin, cout, 3, padding=1, bias=False)),
                    (f"bn{n}", nn.BatchNorm2d(cout)), (f"relu{n}", nn.ReLU()),
                    (f"pool{n}", nn.MaxPool2d(2))]
        return nn.Sequential(OrderedDict(
            stage(1, 1, 32) + stage(2, 32, 64) + stage(3, 64, 64) +
            [("flatten", nn.Flatten()), ("fc1", nn.Linear(64 * 3 * 3, 256)), ("relu4", nn.ReLU()),
             ("dropout", nn.Dropout(0.3)), ("fc2", nn.Linear(256, 10))]))
    if spec == "lenet5":
        return nn.Sequential(OrderedDict([
            ("conv1", nn.Conv2d(1, 6, 5, padding=2)), ("relu1", nn.ReLU()), ("pool1", nn.MaxPool2d(2)),
            ("conv2", nn.Conv2d(6, 16, 5)), ("relu2", nn.ReLU()), ("pool2", nn.MaxPool2d(2)),
            ("flatten", nn.Flatten()),
            ("fc1", nn.Linear(16 * 5 * 5, 120)), ("relu3", nn.ReLU()),
            ("fc2", nn.Linear(120, 84)), ("relu4", nn.ReLU()), ("fc3", nn.Linear(84, 10))]))
    raise SystemExit(f"{who}: no torch.nn equivalent written for zoo model '{spec}'")


def run_json(cmd, env=None, who="bench"):
    """Runs cmd and returns the last JSON object line it printed on stdout."""
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"{who}: command failed (exit {p.returncode}): {' '.join(cmd)}\n"
                 f"{p.stderr[-3000:]}")
    lines = [l for l in p.stdout.splitlines() if l.strip().startswith("{")]
    if not lines:
        sys.exit(f"{who}: no JSON line on stdout from: {' '.join(cmd)}\n{p.stdout[-2000:]}")
    return json.loads(lines[-1])


def torch_env(tuned):
    """The environment for a PyTorch child: glibc malloc out of the box, or TUNED_MALLOC."""
    env = dict(os.environ)
    for k in TUNED_MALLOC:
        env.pop(k, None)
    if tuned:
        env.update(TUNED_MALLOC)
    return env


def find_pare(pare, who="bench"):
    """`pare` if given, else build-peer/cli/pare or build/cli/pare under the repository root."""
    if not pare:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        for cand in ("build-peer/cli/pare", "build/cli/pare"):
            if os.access(os.path.join(root, cand), os.X_OK):
                pare = os.path.join(root, cand)
                break
    if not pare or not os.access(pare, os.X_OK):
        sys.exit(f"{who}: pare binary not found; pass --pare PATH or set PARE")
    return pare


def measure_pare_train(pare, spec, batch, warmup, steps, threads, tmp, who="bench", extra=()):
    """Steady-state `pare train` samples/s of zoo model `spec`: pare's samples_per_s counts from
    the first step, so pare runs WARMUP and WARMUP+STEPS steps and the figure is
    STEPS*BATCH / (seconds(WARMUP+STEPS) - seconds(WARMUP)). `extra`: more train flags."""
    def train(n):
        per_epoch = -(-60000 // batch)
        epochs = -(-n // per_epoch)
        return run_json([pare, "train", "--model", spec, "--data", "fashion-mnist",
                         "--epochs", str(epochs), "--batch-size", str(batch), "--lr", "1e-3",
                         "--optimizer", "adam", "--seed", "0", "--max-steps", str(n),
                         "--no-val", "--quiet", "--json", "--threads", str(threads),
                         "--out", os.path.join(tmp, "model.onnx")] + list(extra), who=who)
    short = train(warmup)
    full = train(warmup + steps)
    dt = full["seconds"] - short["seconds"]
    steady = steps * batch / dt if dt > 0 else float("nan")
    return {"steady_samples_per_s": steady, "reported_samples_per_s": full["samples_per_s"],
            "seconds": full["seconds"], "warmup_seconds": short["seconds"]}


def timed(step, warmup, steps):
    """Seconds of `steps` calls of step() after `warmup` untimed ones."""
    import time
    for _ in range(warmup):
        step()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    return time.perf_counter() - t0


def best(results, key):
    return max(r[key] for r in results)


def print_table(head, rows):
    """A Markdown table of strings: head is a tuple of column titles, rows tuples of cells."""
    table = [tuple(head)] + [tuple(r) for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    for i, row in enumerate(table):
        print("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |")
        if i == 0:
            print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
