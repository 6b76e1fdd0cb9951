#!/usr/bin/env python3
"""KD step throughput on the GPU: `pare distill --device cuda` vs the same loop in PyTorch on the same GPU.

    python3 bench/kd_step_gpu.py --data-dir DIR [--pare PATH] [--teacher T.onnx] [--student SPEC]
        [--batches 128,1024] [--precisions fp32,bf16] [--steps 300] [--warmup 50] [--repeats 1]
        [--device cuda] [--json FILE]

Run with the python3 that holds the GPU machine's PyTorch (python3 from PATH, not /usr/bin/python3);
scripts/device-check runs it as its step e. DIR holds the Fashion-MNIST IDX files
(train-images-idx3-ubyte.gz, ...; scripts/device-deps packs them as .device-deps/fashion-mnist).

The KD step is bench/kd_step.py's (whose PyTorch pieces this imports): teacher forward (eval, no
grad), student forward, loss = alpha * KL(batchmean, T) * T^2 + (1 - alpha) * CE with T = 4 and
alpha = 0.9, backward, Adam (lr 1e-3), plus loss.item() and the train-accuracy count each step like
pare's Trainer (two host syncs per step on both sides). For each precision and batch size:
  - pare: `pare distill --teacher T --student S --data fashion-mnist:DIR --batch-size B --max-steps N
    --no-val --quiet --json --metrics FILE --device cuda --precision P`, run with WARMUP and with
    WARMUP+STEPS steps; steady state = STEPS*B / (seconds(WARMUP+STEPS) - seconds(WARMUP)), the
    seconds summed over the metrics lines (kd_step.py's measure_pare_kd, with these flags). pare
    copies each batch from pinned host memory to the GPU without blocking.
  - PyTorch (one child process for all rows, this python3): the teacher in torch.nn with the
    weights of the same ONNX file (kd_step.torch_teacher), the student bench_util.torch_model(S)
    seeded with 0, on the GPU; bf16 is torch.autocast('cuda', dtype=torch.bfloat16) around the
    teacher forward, the student forward and the loss (backward and Adam outside, weights fp32),
    as pare's --precision bf16. WARMUP untimed steps, then STEPS steps timed between two
    torch.cuda.synchronize(). Two data paths, both timed: "resident", the whole training set on the
    GPU and each batch gathered there by index_select (PyTorch's fastest case: the ratio is taken
    against it), and "pinned", each batch gathered on the CPU into pinned memory and copied with
    non_blocking=True (what pare does). The batch order is bench_util.batch_sampler's seeded
    permutation in both.
TF32 stays at PyTorch's defaults on both sides (cuDNN convolutions may use TF32, cuBLAS matmuls do
not), since pare's libtorch is the same library. Before timing, the PyTorch teacher's logits on 16
test images are checked against `pare run` (max abs difference < 1e-4, on the CPU).
The goal (issue 15) is pare >= 1.2x PyTorch; the table says per row whether it is met.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import bench_util
from bench_util import batch_sampler, find_pare, load_idx, print_table, run_json, torch_model
from kd_step import ALPHA, LR, TEMPERATURE, measure_pare_kd, torch_teacher

WHO = "kd_step_gpu"
GOAL = 1.2


def load_fmnist(data_dir, split):
    """(x [N,1,28,28] float32 in [0,1], y [N] int64) from the IDX files in data_dir, like pare's loader."""
    import numpy as np
    import torch
    prefix = "train" if split == "train" else "t10k"
    x = load_idx(os.path.join(data_dir, f"{prefix}-images-idx3-ubyte.gz")).astype(np.float32) / 255.0
    y = load_idx(os.path.join(data_dir, f"{prefix}-labels-idx1-ubyte.gz")).astype(np.int64)
    return torch.from_numpy(x).unsqueeze(1).contiguous(), torch.from_numpy(y)


# ---- PyTorch side (a child process: `kd_step_gpu.py --torch-worker ...`) ----------------------

def kd_step(teacher, student, opt, scaler, x, y, dtype, device_type):
    """One KD step, the per-step work of pare's Trainer; dtype None is fp32, else autocast to it
    (fp16 with a grad scaler, as pare)."""
    import contextlib
    import torch
    import torch.nn.functional as F
    T, alpha = TEMPERATURE, ALPHA
    with torch.autocast(device_type, dtype=dtype) if dtype is not None else contextlib.nullcontext():
        with torch.no_grad():
            t = teacher(x)
        s = student(x)
        kd = F.kl_div(F.log_softmax(s / T, 1), F.softmax(t / T, 1), reduction="batchmean") * T * T
        loss = alpha * kd + (1 - alpha) * F.cross_entropy(s, y)
    loss.item()
    opt.zero_grad()
    if scaler is None:
        loss.backward()
        opt.step()
    else:
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    (s.detach().argmax(1) == y).sum().item()


def torch_worker(args):
    import torch
    dev = torch.device(args.device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    x_cpu, y_cpu = load_fmnist(args.data_dir, "train")
    teacher = torch_teacher(args.teacher).to(dev)
    paths = ["resident", "pinned"] if dev.type == "cuda" else ["resident"]
    x_dev, y_dev = x_cpu.to(dev), y_cpu.to(dev)
    rows = []
    for prec in args.precisions.split(","):
        dtype = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[prec]
        for batch in [int(b) for b in args.batches.split(",")]:
            row = {"precision": prec, "batch": batch}
            for path in paths:
                torch.manual_seed(0)
                student = torch_model(args.student, WHO).to(dev).train()
                opt = torch.optim.Adam(student.parameters(), lr=LR)
                scaler = torch.amp.GradScaler(dev.type) if dtype == torch.float16 else None
                if path == "resident":
                    order = batch_sampler(torch.arange(x_cpu.shape[0]), torch.arange(x_cpu.shape[0]), batch)

                    def next_batch():
                        idx = order()[0].to(dev, non_blocking=True)
                        return x_dev.index_select(0, idx), y_dev.index_select(0, idx)
                else:
                    sample = batch_sampler(x_cpu, y_cpu, batch)

                    def next_batch():
                        x, y = sample()
                        return (x.pin_memory().to(dev, non_blocking=True),
                                y.pin_memory().to(dev, non_blocking=True))
                for _ in range(args.warmup):
                    kd_step(teacher, student, opt, scaler, *next_batch(), dtype, dev.type)
                sync()
                t0 = time.perf_counter()
                for _ in range(args.steps):
                    kd_step(teacher, student, opt, scaler, *next_batch(), dtype, dev.type)
                sync()
                row[path] = args.steps * batch / (time.perf_counter() - t0)
            rows.append(row)
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    print(json.dumps({"rows": rows, "torch": torch.__version__, "device": name,
                      "cudnn_tf32": torch.backends.cudnn.allow_tf32,
                      "matmul_tf32": torch.backends.cuda.matmul.allow_tf32}))


# ---- driver -------------------------------------------------------------------------------------

def check_teacher(args, tmp):
    """Max abs difference between the torch teacher's logits and `pare run` on 16 test images (CPU)."""
    import numpy as np
    import torch
    x, _ = load_fmnist(args.data_dir, "test")
    x = x[:16].contiguous()
    with torch.no_grad():
        ref = torch_teacher(args.teacher)(x).numpy()
    np.save(os.path.join(tmp, "x.npy"), x.numpy())
    out = os.path.join(tmp, "pare_logits.npy")
    p = subprocess.run([args.pare, "run", args.teacher, "--input", os.path.join(tmp, "x.npy"), "--output", out,
                        "--device", "cpu"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.exit(f"{WHO}: pare run failed (exit {p.returncode}):\n{p.stderr[-3000:]}")
    got = np.load(out)
    diff = float(np.abs(ref - got).max()) if ref.shape == got.shape else float("inf")
    if not diff < 1e-4:
        sys.exit(f"{WHO}: the torch teacher does not match pare's: logits {ref.shape} vs {got.shape}, "
                 f"max abs diff {diff:g}")
    return diff


def measure_pare(args, prec, batch, tmp):
    """Steady-state samples/s of `pare distill` on the device (kd_step.measure_pare_kd, with this
    data folder, device and precision; libtorch's default thread count)."""
    r = measure_pare_kd(args, batch, tmp, threads=0, data=f"fashion-mnist:{args.data_dir}",
                        extra=["--device", args.device, "--precision", prec])
    return {"steady": r["steady_samples_per_s"], "reported": r["reported_samples_per_s"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pare", default=os.environ.get("PARE", ""),
                    help="the pare binary (default: $PARE, else build-peer/cli/pare or build/cli/pare)")
    ap.add_argument("--data-dir", default=bench_util.FMNIST_DIR, help="folder of the Fashion-MNIST IDX .gz files")
    ap.add_argument("--teacher", default="",
                    help="teacher ONNX exported by pare from a zoo model (default: the zoo cnn after one step)")
    ap.add_argument("--student", default="mlp:784-300-100-10", help="student zoo spec")
    ap.add_argument("--batches", default="128,1024", help="comma-separated batch sizes")
    ap.add_argument("--precisions", default="fp32,bf16", help="comma-separated: fp32, bf16, fp16")
    ap.add_argument("--steps", type=int, default=300, help="timed steps")
    ap.add_argument("--warmup", type=int, default=50, help="untimed steps before")
    ap.add_argument("--repeats", type=int, default=1, help="runs of each measurement; best is shown")
    ap.add_argument("--device", default="cuda", help="cuda, cuda:N, or cpu (to try the plumbing without a GPU)")
    ap.add_argument("--json", default="", help="also write the results to this file")
    ap.add_argument("--torch-worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.data_dir = os.path.abspath(args.data_dir)
    for p in args.precisions.split(","):
        if p not in ("fp32", "bf16", "fp16"):
            sys.exit(f"{WHO}: --precisions takes fp32, bf16 and fp16, got {p}")
    if args.torch_worker:
        return torch_worker(args)

    args.pare = find_pare(args.pare, WHO)
    torch_model(args.student, WHO)  # fail early on a student without a torch equivalent
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="pare-bench-gpu-") as tmp:
        teacher_desc = args.teacher or "zoo cnn after 1 step"
        if not args.teacher:
            args.teacher = os.path.join(tmp, "teacher.onnx")
            run_json([args.pare, "train", "--model", "cnn", "--data", f"fashion-mnist:{args.data_dir}",
                      "--max-steps", "1", "--seed", "0", "--no-val", "--quiet", "--json", "--out", args.teacher],
                     who=WHO)
        args.teacher = os.path.abspath(args.teacher)
        diff = check_teacher(args, tmp)
        print(f"# KD step on {args.device}: teacher {teacher_desc} ({args.teacher}), student {args.student}, "
              f"T={TEMPERATURE:g} alpha={ALPHA:g}, Adam lr {LR:g}; {args.warmup} warm-up + {args.steps} timed "
              f"steps; teacher check vs `pare run`: max abs diff {diff:.2e}", flush=True)
        worker = [sys.executable, os.path.abspath(__file__), "--torch-worker", "--teacher", args.teacher,
                  "--student", args.student, "--data-dir", args.data_dir, "--batches", args.batches,
                  "--precisions", args.precisions, "--steps", str(args.steps), "--warmup", str(args.warmup),
                  "--device", args.device]
        torch_runs = [run_json(worker, who=WHO) for _ in range(args.repeats)]
        info = torch_runs[0]
        print(f"# PyTorch {info['torch']} on {info['device']} (cuDNN TF32 {info['cudnn_tf32']}, "
              f"matmul TF32 {info['matmul_tf32']})", flush=True)
        rows = []
        for i, trow in enumerate(info["rows"]):
            prec, batch = trow["precision"], trow["batch"]
            pares = [measure_pare(args, prec, batch, tmp) for _ in range(args.repeats)]
            row = {"precision": prec, "batch": batch, "steps": args.steps, "warmup": args.warmup,
                   "student": args.student, "device": info["device"], "torch_version": info["torch"],
                   "pare": max(p["steady"] for p in pares), "pare_reported": max(p["reported"] for p in pares),
                   "torch_resident": max(r["rows"][i]["resident"] for r in torch_runs)}
            if "pinned" in trow:
                row["torch_pinned"] = max(r["rows"][i]["pinned"] for r in torch_runs)
            row["ratio"] = row["pare"] / row["torch_resident"]
            rows.append(row)
            print(f"# {prec} batch {batch}: pare {row['pare']:.0f} samples/s, PyTorch {row['torch_resident']:.0f} "
                  f"(resident data), ratio {row['ratio']:.2f}x", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    print(f"\nKD step on {info['device']}, samples/s (steady state; PyTorch {info['torch']}; ratio vs "
          f"PyTorch with the data resident on the device; goal >= {GOAL:g}x), {time.perf_counter() - t_start:.0f} s:")
    print_table(("precision", "batch", "pare samples/s", "(pare reported)", "PyTorch samples/s",
                 "PyTorch pinned copy", "pare/PyTorch", "goal"),
                [(r["precision"], str(r["batch"]), f"{r['pare']:.0f}", f"{r['pare_reported']:.0f}",
                  f"{r['torch_resident']:.0f}", f"{r['torch_pinned']:.0f}" if "torch_pinned" in r else "-",
                  f"{r['ratio']:.2f}x", "met" if r["ratio"] >= GOAL else "not met") for r in rows])
    return 0


if __name__ == "__main__":
    sys.exit(main())
