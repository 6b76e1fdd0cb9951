#!/usr/bin/env python3
"""Data-parallel KD throughput: 2 processes vs 1, pare vs PyTorch DDP, on this machine.

    bench/python bench/kd_ddp.py [--pare PATH] [--batch 128] [--steps 200] [--warmup 20]
        [--nproc 2] [--teacher FILE.onnx] [--student mlp:784-300-100-10] [--teacher-parallel tp,pp]
        [--json FILE]

The KD step is kd_step.py's (teacher cnn forward, student forward/backward, T=4 alpha=0.9, Adam)
with global batch --batch. Measured side by side in one run:
  - pare, 1 process with NPROC threads: `pare distill ...` (steady state from --metrics, as kd_step);
  - pare, NPROC processes with 1 thread each: `pare launch --nproc-per-node NPROC --no-prefix --
    pare distill ... --threads 1` (each rank batch / NPROC samples, gradients all-reduced over Gloo;
    rank 0's metrics);
  - PyTorch, 1 process with NPROC threads (kd_step.py's torch loop), and NPROC processes under
    PyTorch's torchrun with DistributedDataParallel over Gloo, 1 thread each, each rank taking its
    slice of every global batch (what pare's sampler does).
  - with --teacher-parallel: pare's NPROC processes again with the teacher sharded over them
    (tensor parallel, pipeline); PyTorch has no C++-free equivalent to race, so pare only.
It prints samples/s, the 2-process/1-process scaling of each, and pare/PyTorch ratios.
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

import kd_step
from bench_util import find_pare, load_fmnist_torch, print_table, torch_model

WHO = "kd_ddp"


def torch_ddp_worker(args):
    import torch
    import torch.distributed as td
    td.init_process_group("gloo")
    rank, world = td.get_rank(), td.get_world_size()
    torch.set_num_threads(args.threads)
    x_all, y_all = load_fmnist_torch("train")
    teacher = kd_step.torch_teacher(args.teacher)
    torch.manual_seed(0)
    student = torch.nn.parallel.DistributedDataParallel(torch_model(args.student, WHO))
    opt = torch.optim.Adam(student.parameters(), lr=kd_step.LR)
    per = args.batch // world
    gen = torch.Generator().manual_seed(0)
    perm, pos = torch.randperm(x_all.shape[0], generator=gen), 0

    def step():
        nonlocal perm, pos
        if pos + args.batch > x_all.shape[0]:
            perm, pos = torch.randperm(x_all.shape[0], generator=gen), 0
        idx = perm[pos + rank * per:pos + (rank + 1) * per]
        pos += args.batch
        x, y = x_all.index_select(0, idx), y_all.index_select(0, idx)
        kd_step.torch_kd_step(teacher, student, opt, x, y)

    for _ in range(args.warmup):
        step()
    td.barrier()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        step()
    td.barrier()
    dt = time.perf_counter() - t0
    if rank == 0:
        with open(args.out_json, "w") as f:
            json.dump({"kd": args.steps * args.batch / dt}, f)
    td.destroy_process_group()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pare", default=os.environ.get("PARE", ""))
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--teacher", default="")
    ap.add_argument("--student", default="mlp:784-300-100-10")
    ap.add_argument("--teacher-parallel", default="", help="also measure these sharded teachers (tp,pp)")
    ap.add_argument("--json", default="")
    ap.add_argument("--torch-ddp-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--out-json", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.torch_ddp_worker:
        return torch_ddp_worker(args)
    args.pare = find_pare(args.pare, WHO)
    n = args.nproc
    if args.batch % n:
        sys.exit(f"{WHO}: --batch {args.batch} must be a multiple of --nproc {n}")
    with tempfile.TemporaryDirectory(prefix="pare-kd-ddp.") as tmp:
        # kd_step's helpers read these fields.
        args.threads, args.student_steps, args.teacher_split, args.precision = n, args.steps, "test", "fp32"
        if not args.teacher:
            args.teacher = kd_step.make_teacher(args, tmp)
        kd_step.check_teacher(args, tmp)
        r = {"batch": args.batch, "nproc": n}
        r["pare_1p"] = kd_step.measure_pare_kd(args, args.batch, tmp, threads=n)["steady_samples_per_s"]
        launcher = [args.pare, "launch", "--nproc-per-node", str(n), "--no-prefix", "--"]
        r["pare_np"] = kd_step.measure_pare_kd(args, args.batch, tmp, launcher, threads=1)["steady_samples_per_s"]
        for mode in filter(None, args.teacher_parallel.split(",")):
            r["pare_np_" + mode] = kd_step.measure_pare_kd(args, args.batch, tmp, launcher, threads=1,
                                                           extra=["--teacher-parallel", mode])["steady_samples_per_s"]
        r["torch_1p"] = kd_step.measure_torch(args, args.batch, tuned=False)["kd"]
        out = os.path.join(tmp, "torch_ddp.json")
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(n), "--redirects=1",
               "--tee=1", "--master_port", str(free_port()), os.path.abspath(__file__), "--torch-ddp-worker",
               "--teacher", args.teacher, "--student", args.student, "--batch", str(args.batch),
               "--steps", str(args.steps), "--warmup", str(args.warmup), "--threads", "1", "--out-json", out]
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if p.returncode != 0:
            sys.exit(f"{WHO}: torchrun failed (exit {p.returncode}):\n{p.stdout[-3000:]}")
        with open(out) as f:
            r["torch_np"] = json.load(f)["kd"]
    print(f"KD step, global batch {args.batch}, teacher {args.teacher}, student {args.student}, samples/s:")
    print_table(("processes", "pare", "PyTorch", "pare/PyTorch"),
                [("1 (x%d threads)" % n, f"{r['pare_1p']:.0f}", f"{r['torch_1p']:.0f}", f"{r['pare_1p'] / r['torch_1p']:.2f}x"),
                 (f"{n} (x1 thread, Gloo)", f"{r['pare_np']:.0f}", f"{r['torch_np']:.0f}", f"{r['pare_np'] / r['torch_np']:.2f}x"),
                 (f"scaling {n}p/1p", f"{r['pare_np'] / r['pare_1p']:.2f}x", f"{r['torch_np'] / r['torch_1p']:.2f}x", "")] +
                [(f"{n}, teacher {k[8:]} over the ranks", f"{r[k]:.0f}", "-", "") for k in r if k.startswith("pare_np_")])
    if args.json:
        with open(args.json, "w") as f:
            json.dump(r, f, indent=1)


if __name__ == "__main__":
    main()
