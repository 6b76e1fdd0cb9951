#!/usr/bin/env python3
"""Does distillation help? Student trained alone vs distilled from a teacher, in pare and in PyTorch.

    bench/python bench/kd_accuracy.py [--pare PATH] [--teacher FILE.onnx]
        [--students mlp:784-300-100-10,lenet5] [--epochs 30] [--augment none|flip|flip,shift=2]
        [--temperature 2] [--alpha 0.5] [--lr 1e-3] [--batch 128] [--seed 1] [--threads 2]
        [--skip-torch] [--pare-cache] [--json FILE]

For every student zoo spec, on Fashion-MNIST, with the same epochs, optimizer (Adam), cosine
learning-rate schedule, batch, augmentation and seed:
  - pare alone:   pare train --model S --data fashion-mnist ... --out alone.onnx
  - pare KD:      pare distill --teacher T --student S -T TEMP --alpha A ... --out kd.onnx
  - PyTorch alone and KD: the same loops in torch.nn (bench_util.torch_model), the teacher's
    weights read from the same ONNX file (kd_step.torch_teacher), the loss
    alpha * KL(batchmean, T) * T^2 + (1 - alpha) * cross-entropy, the same per-sample
    augmentation (mirror with probability 1/2, shift by up to +-N pixels filled with 0) drawn from
    torch's own generator, and the teacher run on the augmented batch as in pare.
It prints test accuracies and the KD gain (KD minus alone) for both implementations.
The teacher: --teacher FILE (a pare-exported zoo model, e.g. `pare train --model cnn ...`), or by
default the zoo `cnn` trained here with `pare train --model cnn --epochs 4 --lr 2e-3 --schedule
cosine --seed 1` (about 3.5 minutes; 92.40% test accuracy).
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

from bench_util import find_pare, load_fmnist_torch, print_table, run_json, torch_model

WHO = "kd_accuracy"


def parse_augment(spec):
    flip, shift = False, 0
    for item in [i for i in (spec or "").split(",") if i and i != "none"]:
        if item == "flip":
            flip = True
        elif item.startswith("shift="):
            shift = int(item[6:])
        else:
            sys.exit(f"{WHO}: unknown augmentation '{item}'")
    return flip, shift


def torch_run(args, student_spec, kd):
    """Test accuracy of `student_spec` trained alone (kd False) or distilled, in PyTorch."""
    import torch
    import torch.nn.functional as F
    from kd_step import torch_teacher

    torch.set_num_threads(args.threads)
    x, y = load_fmnist_torch("train")
    xt, yt = load_fmnist_torch("test")
    teacher = torch_teacher(args.teacher) if kd else None
    flip, shift = parse_augment(args.augment)
    cache = None
    if kd and not (flip or shift):
        # Without augmentation the teacher's logits per sample never change: compute them once.
        with torch.no_grad():
            cache = torch.cat([teacher(x[i:i + 1000]) for i in range(0, x.shape[0], 1000)])
    torch.manual_seed(args.seed)
    student = torch_model(student_spec, WHO)
    opt = torch.optim.Adam(student.parameters(), lr=args.lr)
    n, B = x.shape[0], args.batch
    total = args.epochs * ((n + B - 1) // B)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda k: 0.5 * (1 + math.cos(math.pi * k / total)))
    gen = torch.Generator().manual_seed(args.seed)
    H, W = x.shape[2], x.shape[3]
    rows, cols = torch.arange(H), torch.arange(W)

    def augment(xb):
        # out[n, :, r, c] = in[n, :, r - dy, (flip ? W-1-c : c) - dx], 0 outside: pare's core::Augment.
        m = xb.shape[0]
        dy = torch.randint(-shift, shift + 1, (m,), generator=gen)
        dx = torch.randint(-shift, shift + 1, (m,), generator=gen)
        fl = torch.rand(m, generator=gen) < 0.5 if flip else torch.zeros(m, dtype=torch.bool)
        p = F.pad(xb, (shift, shift, shift, shift))
        r = (rows[None, :] - dy[:, None] + shift)                                  # [m, H]
        c = torch.where(fl[:, None], W - 1 - cols[None, :], cols[None, :]) - dx[:, None] + shift
        p = p.gather(2, r[:, None, :, None].expand(m, xb.shape[1], H, p.shape[3]))
        return p.gather(3, c[:, None, None, :].expand(m, xb.shape[1], H, W)).contiguous()

    T, alpha = args.temperature, args.alpha
    for _ in range(args.epochs):
        student.train()
        perm = torch.randperm(n, generator=gen)
        for i in range(0, n, B):
            idx = perm[i:i + B]
            xb, yb = x[idx], y[idx]
            if flip or shift:
                xb = augment(xb)
            out = student(xb)
            loss = F.cross_entropy(out, yb)
            if kd:
                with torch.no_grad():
                    t = cache[idx] if cache is not None else teacher(xb)
                kl = F.kl_div(F.log_softmax(out / T, 1), F.softmax(t / T, 1), reduction="batchmean") * T * T
                loss = alpha * kl + (1 - alpha) * loss
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
    student.eval()
    with torch.no_grad():
        return float((student(xt).argmax(1) == yt).float().mean())


def pare_run(args, student_spec, kd, tmp):
    """(test accuracy, teacher accuracy or None) of pare train / pare distill; with --pare-cache
    the teacher runs once through `pare teacher-cache` (no augmentation only)."""
    common = ["--data", "fashion-mnist", "--epochs", str(args.epochs), "--batch-size", str(args.batch),
              "--lr", str(args.lr), "--optimizer", "adam", "--schedule", "cosine", "--seed", str(args.seed),
              "--threads", str(args.threads), "--quiet", "--json"]
    if args.augment:
        common += ["--augment", args.augment]
    out = os.path.join(tmp, "student.onnx")
    if kd:
        teacher = args.teacher
        if args.pare_cache:
            cache = os.path.join(tmp, f"cache-T{args.temperature:g}")
            if not os.path.exists(os.path.join(cache, "index.json")):
                run_json([args.pare, "teacher-cache", "--teacher", args.teacher, "--data", "fashion-mnist",
                          "--top-k", "10", "-T", str(args.temperature), "--quiet", "--json", "--out", cache], who=WHO)
            teacher = "cache:" + cache
        j = run_json([args.pare, "distill", "--teacher", teacher, "--student", student_spec,
                      "-T", str(args.temperature), "--alpha", str(args.alpha), "--out", out] + common, who=WHO)
        return j["student_accuracy"], j.get("teacher_accuracy")
    j = run_json([args.pare, "train", "--model", student_spec, "--out", out] + common, who=WHO)
    return j["val_accuracy"], None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pare", default=os.environ.get("PARE"))
    ap.add_argument("--teacher")
    ap.add_argument("--students", default="mlp:784-300-100-10,lenet5")
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--augment", default="none")
    ap.add_argument("--temperature", type=float, default=2.0)
    ap.add_argument("--alpha", type=float, default=0.5)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--skip-torch", action="store_true")
    ap.add_argument("--pare-cache", action="store_true",
                    help="pare distills from `pare teacher-cache` (top-10) instead of running the teacher per step")
    ap.add_argument("--json")
    ap.add_argument("--torch-worker", nargs=2, metavar=("STUDENT", "KD"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.torch_worker:
        print(json.dumps({"accuracy": torch_run(args, args.torch_worker[0], args.torch_worker[1] == "1")}))
        return
    args.pare = find_pare(args.pare, WHO)
    if args.pare_cache and any(parse_augment(args.augment)):
        sys.exit(f"{WHO}: --pare-cache needs --augment none: a cache holds the teacher's outputs on the original images")
    with tempfile.TemporaryDirectory(prefix="pare-kd-accuracy.") as tmp:
        if not args.teacher:
            args.teacher = os.path.join(tmp, "cnn.onnx")
            print(f"{WHO}: training the cnn teacher (about 3.5 minutes)", file=sys.stderr)
            run_json([args.pare, "train", "--model", "cnn", "--data", "fashion-mnist", "--epochs", "4",
                      "--batch-size", "128", "--lr", "2e-3", "--schedule", "cosine", "--seed", "1",
                      "--threads", str(args.threads), "--quiet", "--json", "--out", args.teacher], who=WHO)
        rows, results = [], []
        for spec in [s for s in args.students.split(",") if s]:
            r = {"student": spec}
            print(f"{WHO}: {spec}: pare alone, pare KD" + ("" if args.skip_torch else ", PyTorch alone, PyTorch KD"),
                  file=sys.stderr)
            r["pare_alone"], _ = pare_run(args, spec, False, tmp)
            r["pare_kd"], r["teacher"] = pare_run(args, spec, True, tmp)
            if not args.skip_torch:
                for kd in (0, 1):
                    cmd = [sys.executable, os.path.abspath(__file__), "--torch-worker", spec, str(kd)]
                    for k in ("teacher", "epochs", "augment", "temperature", "alpha", "lr", "batch", "seed", "threads"):
                        cmd += [f"--{k}", str(getattr(args, k))]
                    r["torch_kd" if kd else "torch_alone"] = run_json(cmd, who=WHO)["accuracy"]
            results.append(r)
            pct = lambda v: "-" if v is None else f"{100 * v:.2f}%"
            gain = lambda a, b: "-" if a is None or b is None else f"{100 * (b - a):+.2f}"
            rows.append((spec, pct(r["teacher"]), pct(r["pare_alone"]), pct(r["pare_kd"]),
                         gain(r["pare_alone"], r["pare_kd"]), pct(r.get("torch_alone")),
                         pct(r.get("torch_kd")), gain(r.get("torch_alone"), r.get("torch_kd"))))
        print(f"Fashion-MNIST test accuracy, {args.epochs} epochs, Adam lr {args.lr} cosine, batch {args.batch}, "
              f"seed {args.seed}, augment '{args.augment}', KD T={args.temperature} alpha={args.alpha}")
        print_table(("student", "teacher", "pare alone", "pare KD", "pare gain", "torch alone", "torch KD",
                     "torch gain"), rows)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
