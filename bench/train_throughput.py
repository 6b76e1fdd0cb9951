#!/usr/bin/env python3
"""Training throughput: pare vs the same loop in PyTorch, on Fashion-MNIST.

    bench/python bench/train_throughput.py [--pare PATH] [--models cnn,mlp:784-300-100-10]
        [--batch 128] [--steps 300] [--warmup 20] [--threads 2] [--repeats 1] [--json FILE]

For each model it measures, side by side in one run:
  - pare: `pare train --model SPEC --data fashion-mnist --max-steps N --no-val --quiet --json
    --threads T`. pare's samples_per_s counts every step from the first, so pare is run twice,
    with WARMUP and WARMUP+STEPS steps, and the steady-state figure is the difference
    STEPS*BATCH / (seconds(WARMUP+STEPS) - seconds(WARMUP)); the figure pare itself reports for
    the long run is shown too.
  - PyTorch (the .venv's, torch.set_num_threads(T)): the equivalent torch.nn model
    (bench_util.torch_model, written out by hand after core/zoo.cpp), Adam(lr=1e-3), cross-entropy, the same per-step work as
    pare's Trainer (loss.item() every step, train-accuracy count), batches gathered from the
    in-memory dataset by a shuffled permutation; WARMUP untimed steps then STEPS timed ones. Run
    in a fresh process twice: with glibc malloc out of the box, and with
    MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=4294967296 MALLOC_TOP_PAD_=268435456
    (pare sets the same with mallopt at start-up: cli/main.cpp, tune_malloc).
OPENBLAS_* and other environment variables are passed through unchanged.
"""
import argparse
import json
import os
import shutil
import sys

from bench_util import (batch_sampler, best, find_pare, load_fmnist_torch, measure_pare_train, print_table,
                        run_json, timed, torch_env, torch_model)


# ---- PyTorch side (runs in a child process: `train_throughput.py --torch-worker ...`) ----------

def torch_worker(args):
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    x_all, y_all = load_fmnist_torch("train")
    model = torch_model(args.model, "train_throughput")
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    next_batch = batch_sampler(x_all, y_all, args.batch)

    def step():
        x, y = next_batch()
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        loss.item()
        opt.zero_grad()
        loss.backward()
        opt.step()
        (logits.detach().argmax(1) == y).sum().item()

    secs = timed(step, args.warmup, args.steps)
    print(json.dumps({"samples_per_s": args.steps * args.batch / secs, "seconds": secs,
                      "torch": torch.__version__, "threads": torch.get_num_threads()}))


# ---- driver -------------------------------------------------------------------------------------

def measure_pare(args, spec, tmp):
    return measure_pare_train(args.pare, spec, args.batch, args.warmup, args.steps, args.threads, tmp,
                              "train_throughput")


def measure_torch(args, spec, tuned):
    return run_json([sys.executable, os.path.abspath(__file__), "--torch-worker", "--model", spec,
                     "--batch", str(args.batch), "--steps", str(args.steps),
                     "--warmup", str(args.warmup), "--threads", str(args.threads)],
                    env=torch_env(tuned), who="train_throughput")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pare", default=os.environ.get("PARE", ""),
                    help="the pare binary (default: $PARE, else build-peer/cli/pare or build/cli/pare)")
    ap.add_argument("--models", default="cnn,mlp:784-300-100-10",
                    help="comma-separated zoo specs among cnn, lenet5, mlp:...")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--steps", type=int, default=300, help="timed steps")
    ap.add_argument("--warmup", type=int, default=20, help="untimed steps before")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=1, help="runs of each measurement; best is shown")
    ap.add_argument("--json", default="", help="also write the results to this file")
    ap.add_argument("--torch-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--model", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.torch_worker:
        return torch_worker(args)

    args.pare = find_pare(args.pare, "train_throughput")
    models = [m for m in args.models.split(",") if m]
    # ',' separates models, so mlp options (mlp:784-300-100-10,in=1) are not supported here.
    import tempfile
    tmp = tempfile.mkdtemp(prefix="pare-bench-")
    rows = []
    try:
        print(f"# batch {args.batch}, {args.warmup} warm-up + {args.steps} timed steps, "
              f"{args.threads} threads, Adam lr 1e-3, Fashion-MNIST; pare: {args.pare}",
              flush=True)
        for spec in models:
            torch_model(spec, "train_throughput")  # fail early on a model without a torch equivalent
            p, d, t = [], [], []
            for _ in range(args.repeats):
                p.append(measure_pare(args, spec, tmp))
                d.append(measure_torch(args, spec, tuned=False))
                t.append(measure_torch(args, spec, tuned=True))
            row = {"model": spec, "batch": args.batch, "steps": args.steps, "warmup": args.warmup,
                   "threads": args.threads,
                   "pare": best(p, "steady_samples_per_s"),
                   "pare_reported": best(p, "reported_samples_per_s"),
                   "torch_default_malloc": best(d, "samples_per_s"),
                   "torch_tuned_malloc": best(t, "samples_per_s"),
                   "torch_version": d[0].get("torch", "")}
            row["ratio_vs_default"] = row["pare"] / row["torch_default_malloc"]
            row["ratio_vs_tuned"] = row["pare"] / row["torch_tuned_malloc"]
            rows.append(row)
            print(f"# {spec}: pare {row['pare']:.0f} samples/s (reported {row['pare_reported']:.0f}),"
                  f" torch {row['torch_default_malloc']:.0f}, torch tuned malloc"
                  f" {row['torch_tuned_malloc']:.0f}", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    head = ("model", "batch", "pare samples/s", "(pare reported)", "torch samples/s",
            "torch tuned malloc", "pare/torch", "pare/torch tuned")
    print_table(head, [(r["model"], str(r["batch"]), f"{r['pare']:.0f}", f"{r['pare_reported']:.0f}",
                        f"{r['torch_default_malloc']:.0f}", f"{r['torch_tuned_malloc']:.0f}",
                        f"{r['ratio_vs_default']:.2f}x", f"{r['ratio_vs_tuned']:.2f}x")
                       for r in rows])
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
