#!/usr/bin/env python3
"""KD step throughput: pare distill vs the same loop in PyTorch, on Fashion-MNIST.

    bench/python bench/kd_step.py [--pare PATH] [--batches 32,128] [--steps 200] [--warmup 20]
        [--student-steps 3*STEPS] [--threads 2] [--repeats 1] [--teacher FILE.onnx]
        [--student mlp:784-300-100-10] [--teacher-split test] [--teacher-engines torch,rt,rt-int8]
        [--precision fp32|bf16] [--json FILE]

A KD step is: teacher forward (eval mode, no grad), student forward, loss = alpha * KL(batchmean,
T) * T^2 + (1 - alpha) * cross-entropy (T = 4, alpha = 0.9: pare's defaults), backward, Adam step
(lr 1e-3). For each batch size it measures, side by side in one run:
  - pare: `pare distill --teacher TEACHER.onnx --student SPEC --data fashion-mnist --batch-size B
    --max-steps N --no-val --quiet --json --threads T --metrics FILE`, run with WARMUP and
    WARMUP+STEPS steps; the steady-state figure is STEPS*B / (seconds(WARMUP+STEPS) -
    seconds(WARMUP)), the seconds summed over the per-epoch lines of the metrics file. Once per
    --teacher-engines entry: `torch` (the teacher in pare's libtorch interpreter), `rt` (the same
    teacher file on pare_rt, `--teacher-engine rt`) and `rt-int8` (the teacher quantized by `pare
    quantize TEACHER --calib fashion-mnist`, on pare_rt's int8 kernels: not the same numbers, so
    its row measures speed only).
  - PyTorch (the .venv's, torch.set_num_threads(T)): the teacher and student written in
    torch.nn (bench_util.torch_model), the teacher's weights read from the same ONNX file with
    onnx.numpy_helper, the same loop with the same per-step work as pare's Trainer (loss.item(),
    train-accuracy count), batches gathered from the in-memory dataset by a seeded permutation;
    WARMUP untimed steps then STEPS timed ones. Run in a fresh process with glibc malloc out of
    the box and again with the tuned malloc pare itself uses (bench_util.TUNED_MALLOC).
--precision bf16 runs both sides' forward passes under bf16 autocast (pare: `--precision bf16`;
PyTorch: `torch.autocast("cpu", dtype=torch.bfloat16)` around the teacher and student forward and
the loss), the weights and Adam in fp32 on both; the pare teacher-alone row below stays fp32
(`pare eval` has no --precision).
Where the time goes, for both sides, at each batch size:
  - the teacher forward alone: pare `pare eval TEACHER --split SPLIT --batch-size B` (its
    samples_per_s: forward, plus a cross-entropy and argmax per batch), PyTorch the no_grad
    forward of the same batches;
  - the student step alone: pare `pare train --model SPEC` (steady state, as train_throughput.py),
    PyTorch the same loop without the teacher and the KD term; STUDENT_STEPS timed steps (default
    3 * STEPS: the step is several times cheaper than the KD step, and the difference of two short
    pare runs is dominated by the noise of their first steps);
  - the share of the KD step's time spent in each, i.e. KD samples/s over the part's samples/s;
    the rest is the KD loss, its backward, and whatever the two parts cost more when interleaved.
Before measuring, the PyTorch teacher's logits are checked against `pare run` on the same file
(max abs difference < 1e-4), so both loops really run the same teacher.
The teacher: by default the zoo `cnn` after one training step (`pare train --model cnn
--max-steps 1`), written to a temporary ONNX file: an untrained teacher costs the same per step as
a trained one, and the step makes its BatchNorm running statistics non-trivial for the check.
--teacher FILE uses a pare-exported zoo model instead (its `pare.zoo_spec` metadata names the
torch.nn equivalent). OPENBLAS_* and other environment variables are passed through unchanged.
"""
import argparse
import json
import os
import shutil
import sys
import tempfile
import time

from bench_util import (batch_sampler, best, find_pare, load_fmnist_torch, measure_pare_train, print_table,
                        run_json, torch_env, torch_model)

WHO = "kd_step"
TEMPERATURE, ALPHA, LR = 4.0, 0.9, 1e-3


# ---- PyTorch side (runs in a child process: `kd_step.py --torch-worker ...`) --------------------

def onnx_zoo_spec(path):
    import onnx
    m = onnx.load(path, load_external_data=False)
    meta = {p.key: p.value for p in m.metadata_props}
    if meta.get("pare.normalize"):
        sys.exit(f"{WHO}: {path} records input normalization ({meta['pare.normalize']}); "
                 "use a teacher trained without --normalize")
    spec = meta.get("pare.zoo_spec", "")
    if not spec:
        sys.exit(f"{WHO}: {path} has no pare.zoo_spec metadata: pass a zoo model exported by pare")
    return spec


def torch_teacher(path):
    """The ONNX zoo model at `path` as torch.nn, with its initializers loaded, in eval mode."""
    import onnx
    import torch
    from onnx import numpy_helper
    model = torch_model(onnx_zoo_spec(path), WHO)
    inits = {i.name: numpy_helper.to_array(i) for i in onnx.load(path).graph.initializer}
    with torch.no_grad():
        for name, t in model.state_dict().items():
            if name.endswith("num_batches_tracked"):
                continue
            if name not in inits:
                sys.exit(f"{WHO}: {path} has no initializer '{name}' for the torch.nn model")
            a = inits[name]
            if tuple(a.shape) != tuple(t.shape):
                sys.exit(f"{WHO}: initializer '{name}' has shape {a.shape}, torch expects {tuple(t.shape)}")
            t.copy_(torch.from_numpy(a.copy()))
    return model.eval()


def autocast(precision):
    """bf16 autocast on the CPU, or nothing for fp32."""
    import contextlib
    import torch
    if precision == "bf16":
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def torch_kd_step(teacher, student, opt, x, y, precision="fp32"):
    """One PyTorch KD step with the same per-step work as pare's Trainer: teacher forward without
    grad, alpha * KL(batchmean, T) * T^2 + (1 - alpha) * CE, loss.item(), backward, optimizer
    step, train-accuracy count."""
    import torch
    import torch.nn.functional as F
    T, alpha = TEMPERATURE, ALPHA
    with autocast(precision):
        with torch.no_grad():
            t = teacher(x).float()
        s = student(x).float()
        kd = F.kl_div(F.log_softmax(s / T, 1), F.softmax(t / T, 1), reduction="batchmean") * T * T
        loss = alpha * kd + (1 - alpha) * F.cross_entropy(s, y)
    loss.item()
    opt.zero_grad()
    loss.backward()
    opt.step()
    (s.detach().argmax(1) == y).sum().item()


def torch_check(args):
    """Writes x.npy (the first rows of the test split) and the torch teacher's logits on them."""
    import numpy as np
    import torch
    torch.set_num_threads(args.threads)
    x, _ = load_fmnist_torch("test")
    x = x[:16].contiguous()
    with torch.no_grad():
        logits = torch_teacher(args.teacher)(x)
    np.save(os.path.join(args.check_dir, "x.npy"), x.numpy())
    np.save(os.path.join(args.check_dir, "torch_logits.npy"), logits.numpy())


def torch_worker(args):
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(args.threads)
    x_all, y_all = load_fmnist_torch("train")
    teacher = torch_teacher(args.teacher)
    def timed(step, steps):
        batch = batch_sampler(x_all, y_all, args.batch)
        for _ in range(args.warmup):
            step(*batch())
        t0 = time.perf_counter()
        for _ in range(steps):
            step(*batch())
        return steps * args.batch / (time.perf_counter() - t0)

    def student_and_opt():
        torch.manual_seed(0)
        student = torch_model(args.student, WHO)
        student.train()
        return student, torch.optim.Adam(student.parameters(), lr=LR)

    def kd_phase():
        student, opt = student_and_opt()

        def step(x, y):
            torch_kd_step(teacher, student, opt, x, y, args.precision)
        return timed(step, args.steps)

    def teacher_phase():
        def step(x, y):
            with torch.no_grad(), autocast(args.precision):
                teacher(x)
        return timed(step, args.steps)

    def student_phase():
        student, opt = student_and_opt()

        def step(x, y):
            with autocast(args.precision):
                s = student(x).float()
                loss = F.cross_entropy(s, y)
            loss.item()
            opt.zero_grad()
            loss.backward()
            opt.step()
            (s.detach().argmax(1) == y).sum().item()
        return timed(step, args.student_steps)

    # The KD loop first, so that the headline figure runs in a fresh process.
    out = {"kd": kd_phase(), "teacher": teacher_phase(), "student": student_phase(),
           "torch": torch.__version__, "threads": torch.get_num_threads()}
    print(json.dumps(out))


# ---- driver -------------------------------------------------------------------------------------

def make_teacher(args, tmp):
    path = os.path.join(tmp, "teacher.onnx")
    run_json([args.pare, "train", "--model", "cnn", "--data", "fashion-mnist", "--batch-size", "32",
              "--max-steps", "1", "--seed", "0", "--no-val", "--quiet", "--json", "--threads",
              str(args.threads), "--out", path], who=WHO)
    return path


def check_teacher(args, tmp):
    import subprocess
    import numpy as np
    subprocess.run([sys.executable, os.path.abspath(__file__), "--torch-check", "--teacher",
                    args.teacher, "--threads", str(args.threads), "--check-dir", tmp], check=True)
    p = subprocess.run([args.pare, "run", args.teacher, "--input", os.path.join(tmp, "x.npy"),
                        "--output", os.path.join(tmp, "pare_logits.npy"), "--threads",
                        str(args.threads)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.exit(f"{WHO}: pare run failed (exit {p.returncode}):\n{p.stderr[-3000:]}")
    a = np.load(os.path.join(tmp, "torch_logits.npy"))
    b = np.load(os.path.join(tmp, "pare_logits.npy"))
    diff = float(np.abs(a - b).max()) if a.shape == b.shape else float("inf")
    if not diff < 1e-4:
        sys.exit(f"{WHO}: the torch teacher does not match pare's: logits {a.shape} vs {b.shape}, "
                 f"max abs diff {diff:g}")
    return diff


def measure_pare_kd(args, batch, tmp, launcher=(), threads=None, extra=(), teacher=None, data="fashion-mnist"):
    """Steady-state samples/s of `pare distill`; `launcher` (e.g. pare launch ... --) runs it on
    several ranks, `threads` overrides args.threads per process, `extra` are more distill flags,
    `teacher` another teacher file than args.teacher, `data` the --data spec."""
    threads = args.threads if threads is None else threads
    teacher = teacher or args.teacher

    def distill(steps):
        metrics = os.path.join(tmp, "metrics.jsonl")
        if os.path.exists(metrics):
            os.remove(metrics)
        run_json(list(launcher) + [args.pare, "distill", "--teacher", teacher, "--student", args.student,
                  "--data", data, "--temperature", str(TEMPERATURE), "--alpha", str(ALPHA),
                  "--epochs", "100", "--batch-size", str(batch), "--lr", str(LR), "--optimizer", "adam",
                  "--seed", "0", "--max-steps", str(steps), "--no-val", "--quiet", "--json",
                  "--threads", str(threads), "--metrics", metrics,
                  "--out", os.path.join(tmp, "student.onnx")] + list(extra), who=WHO)
        with open(metrics) as f:
            lines = [json.loads(l) for l in f if l.strip()]
        return {"seconds": sum(l["seconds"] for l in lines), "steps": lines[-1]["steps"],
                "samples_per_s": lines[-1]["samples_per_s"]}
    short = distill(args.warmup)
    full = distill(args.warmup + args.steps)
    if full["steps"] != args.warmup + args.steps:
        sys.exit(f"{WHO}: pare distill ran {full['steps']} steps, expected {args.warmup + args.steps}")
    dt = full["seconds"] - short["seconds"]
    return {"steady_samples_per_s": args.steps * batch / dt if dt > 0 else float("nan"),
            "reported_samples_per_s": full["samples_per_s"]}


def measure_pare_teacher(args, batch):
    r = run_json([args.pare, "eval", args.teacher, "--data", "fashion-mnist", "--split",
                  args.teacher_split, "--batch-size", str(batch), "--threads", str(args.threads),
                  "--json"], who=WHO)
    return {"samples_per_s": r["samples_per_s"]}


def measure_torch(args, batch, tuned):
    return run_json([sys.executable, os.path.abspath(__file__), "--torch-worker", "--teacher",
                     args.teacher, "--student", args.student, "--batch", str(batch), "--steps",
                     str(args.steps), "--student-steps", str(args.student_steps), "--warmup",
                     str(args.warmup), "--threads", str(args.threads), "--precision", args.precision],
                    env=torch_env(tuned), who=WHO)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pare", default=os.environ.get("PARE", ""),
                    help="the pare binary (default: $PARE, else build-peer/cli/pare or build/cli/pare)")
    ap.add_argument("--batches", default="32,128", help="comma-separated batch sizes")
    ap.add_argument("--steps", type=int, default=200, help="timed steps")
    ap.add_argument("--student-steps", type=int, default=0,
                    help="timed steps of the student step alone (default: 3 * --steps)")
    ap.add_argument("--warmup", type=int, default=20, help="untimed steps before")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=1, help="runs of each measurement; best is shown")
    ap.add_argument("--teacher", default="",
                    help="teacher ONNX exported by pare from a zoo model (default: the zoo cnn after one step)")
    ap.add_argument("--student", default="mlp:784-300-100-10", help="student zoo spec")
    ap.add_argument("--teacher-split", default="test",
                    help="split `pare eval` times the teacher forward on (train: 60000 samples, test: 10000)")
    ap.add_argument("--teacher-engines", default="torch,rt,rt-int8",
                    help="pare teacher engines to time: torch, rt (pare_rt, same teacher), rt-int8 (pare_rt, "
                         "the teacher quantized); the first is the one the detailed tables use")
    ap.add_argument("--precision", default="fp32", choices=("fp32", "bf16"),
                    help="forward passes of both sides in fp32 or under bf16 autocast")
    ap.add_argument("--json", default="", help="also write the results to this file")
    ap.add_argument("--torch-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--torch-check", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--check-dir", default="", help=argparse.SUPPRESS)
    ap.add_argument("--batch", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.student_steps <= 0:
        args.student_steps = 3 * args.steps
    if args.torch_worker:
        return torch_worker(args)
    if args.torch_check:
        return torch_check(args)

    args.pare = find_pare(args.pare, WHO)
    batches = [int(b) for b in args.batches.split(",") if b]
    engines = [e for e in args.teacher_engines.split(",") if e]
    for e in engines:
        if e not in ("torch", "rt", "rt-int8"):
            sys.exit(f"{WHO}: --teacher-engines takes torch, rt and rt-int8, got {e}")
    torch_model(args.student, WHO)  # fail early on a student without a torch equivalent
    tmp = tempfile.mkdtemp(prefix="pare-bench-")
    rows = []
    try:
        teacher_desc = args.teacher or "zoo cnn after 1 step (pare train --model cnn --max-steps 1)"
        if not args.teacher:
            args.teacher = make_teacher(args, tmp)
        diff = check_teacher(args, tmp)
        int8_teacher = None
        if "rt-int8" in engines:
            int8_teacher = os.path.join(tmp, "teacher.int8.onnx")
            import subprocess
            p = subprocess.run([args.pare, "quantize", args.teacher, "--calib", "fashion-mnist", "--quiet", "--out",
                                int8_teacher], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            if p.returncode != 0:
                sys.exit(f"{WHO}: pare quantize failed (exit {p.returncode}):\n{p.stderr[-3000:]}")

        def engine_kd(e, batch):
            precision = ["--precision", args.precision]
            if e == "torch":
                return measure_pare_kd(args, batch, tmp, extra=precision)
            return measure_pare_kd(args, batch, tmp, extra=["--teacher-engine", "rt"] + precision,
                                   teacher=int8_teacher if e == "rt-int8" else None)
        print(f"# KD step: teacher {teacher_desc}, student {args.student}, T={TEMPERATURE:g} "
              f"alpha={ALPHA:g}, Adam lr {LR:g}, precision {args.precision}; {args.warmup} warm-up + {args.steps} timed steps "
              f"({args.student_steps} for the student alone), "
              f"{args.threads} threads, Fashion-MNIST; pare: {args.pare}", flush=True)
        print(f"# teacher check: torch logits vs `pare run` on 16 test images, max abs diff {diff:.2e}",
              flush=True)
        for batch in batches:
            pk, pt, ps, d, t = [], [], [], [], []
            pe = {e: [] for e in engines[1:]}
            for _ in range(args.repeats):
                pk.append(engine_kd(engines[0], batch))
                for e in engines[1:]:
                    pe[e].append(engine_kd(e, batch))
                pt.append(measure_pare_teacher(args, batch))
                ps.append(measure_pare_train(args.pare, args.student, batch, args.warmup,
                                             args.student_steps, args.threads, tmp, WHO,
                                             extra=["--precision", args.precision]))
                d.append(measure_torch(args, batch, tuned=False))
                t.append(measure_torch(args, batch, tuned=True))
            row = {"batch": batch, "steps": args.steps, "student_steps": args.student_steps,
                   "warmup": args.warmup, "threads": args.threads,
                   "student": args.student,
                   "pare": best(pk, "steady_samples_per_s"),
                   "pare_reported": best(pk, "reported_samples_per_s"),
                   "pare_teacher": best(pt, "samples_per_s"),
                   "pare_student": best(ps, "steady_samples_per_s"),
                   "torch_default_malloc": best(d, "kd"),
                   "torch_default_teacher": best(d, "teacher"),
                   "torch_default_student": best(d, "student"),
                   "torch_tuned_malloc": best(t, "kd"),
                   "torch_tuned_teacher": best(t, "teacher"),
                   "torch_tuned_student": best(t, "student"),
                   "torch_version": d[0].get("torch", ""), "engine": engines[0]}
            row["ratio_vs_default"] = row["pare"] / row["torch_default_malloc"]
            row["ratio_vs_tuned"] = row["pare"] / row["torch_tuned_malloc"]
            for e in engines[1:]:
                key = "pare_" + e.replace("-", "_")
                row[key] = best(pe[e], "steady_samples_per_s")
                row[key + "_vs_tuned"] = row[key] / row["torch_tuned_malloc"]
            rows.append(row)
            print(f"# batch {batch}: pare {row['pare']:.0f} samples/s (reported "
                  f"{row['pare_reported']:.0f}), torch {row['torch_default_malloc']:.0f}, torch tuned "
                  f"malloc {row['torch_tuned_malloc']:.0f}", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    if len(engines) > 1:
        print(f"\nKD step by pare teacher engine (--teacher-engine), samples/s and ratio to PyTorch with the "
              f"tuned malloc:")
        print_table(("batch",) + tuple(f"pare {e}" for e in engines) + ("torch tuned malloc",) +
                    tuple(f"{e}/torch tuned" for e in engines),
                    [(str(r["batch"]), f"{r['pare']:.0f}") +
                     tuple(f"{r['pare_' + e.replace('-', '_')]:.0f}" for e in engines[1:]) +
                     (f"{r['torch_tuned_malloc']:.0f}", f"{r['ratio_vs_tuned']:.2f}x") +
                     tuple(f"{r['pare_' + e.replace('-', '_') + '_vs_tuned']:.2f}x" for e in engines[1:])
                     for r in rows])

    print(f"\nKD step (teacher forward + student forward/backward/Adam; pare teacher engine {engines[0]}), samples/s:")
    print_table(("batch", "pare samples/s", "(pare reported)", "torch samples/s", "torch tuned malloc",
                 "pare/torch", "pare/torch tuned"),
                [(str(r["batch"]), f"{r['pare']:.0f}", f"{r['pare_reported']:.0f}",
                  f"{r['torch_default_malloc']:.0f}", f"{r['torch_tuned_malloc']:.0f}",
                  f"{r['ratio_vs_default']:.2f}x", f"{r['ratio_vs_tuned']:.2f}x") for r in rows])

    print("\nWhere the time goes: each part alone (samples/s) and its share of the KD step's time "
          "(KD samples/s / part samples/s); rest = KD loss and its backward, interleaving:")
    table = []
    for r in rows:
        for side, kd, te, st in (("pare", r["pare"], r["pare_teacher"], r["pare_student"]),
                                 ("torch", r["torch_default_malloc"], r["torch_default_teacher"],
                                  r["torch_default_student"]),
                                 ("torch tuned", r["torch_tuned_malloc"], r["torch_tuned_teacher"],
                                  r["torch_tuned_student"])):
            key = side.replace(" ", "_")
            r[f"{key}_teacher_share"] = kd / te
            r[f"{key}_student_share"] = kd / st
            table.append((str(r["batch"]), side, f"{kd:.0f}", f"{te:.0f}", f"{st:.0f}",
                          f"{kd / te:.0%}", f"{kd / st:.0%}", f"{1 - kd / te - kd / st:.0%}"))
    print_table(("batch", "side", "KD step", "teacher fwd", "student step", "teacher share",
                 "student share", "rest"), table)
    for r in rows:
        print(f"# batch {r['batch']}: teacher forward pare/torch {r['pare_teacher'] / r['torch_default_teacher']:.2f}x"
              f" (tuned {r['pare_teacher'] / r['torch_tuned_teacher']:.2f}x), student step pare/torch "
              f"{r['pare_student'] / r['torch_default_student']:.2f}x (tuned "
              f"{r['pare_student'] / r['torch_tuned_student']:.2f}x)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
