#!/usr/bin/env python3
"""Inference latency: pare_rt int8 and fp32 against ONNX Runtime int8 and fp32 and pare's libtorch
interpreter, on the same ONNX files, in one run.

    .venv/bin/python bench/rt_bench.py [--pare PATH] [--models cnn,mlp,resnet18] [--batches 1,64]
        [--threads 1,2] [--seconds 2] [--repeats 1] [--model NAME=FP32.onnx,INT8.onnx ...] [--json FILE]

For each model it makes (or takes, with --model) an fp32 ONNX file and its QDQ int8 twin from
`pare quantize` (minmax calibration, per-channel int8 weights, uint8 activations):
  - cnn: the zoo `cnn` teacher (206k parameters, 11.8 MFLOP per image) after one training step
    (`pare train --model cnn --max-steps 1`: latency does not depend on the weights' values),
    calibrated on 512 Fashion-MNIST training images;
  - mlp: the student `mlp:784-300-100-10` after one training step, calibrated the same way;
  - resnet18: torchvision's resnet18 exported by torch.onnx (tests/peer/export_models.py, random
    weights, 3x224x224), calibrated on 32 random images.
Then, at every batch size and thread count, with the same random inputs:
  - pare_rt int8 and fp32: `pare bench FILE --engine rt --batch B --threads T --json` (the int8 run
    with --profile: the largest convolution's multiply-accumulates per second);
  - pare's libtorch interpreter (fp32): `pare bench FP32 --engine torch`;
  - ONNX Runtime int8 and fp32: bench/ort_bench.py (PyPI onnxruntime, pinned in
    scripts/python-requirements.txt; intra-op threads T, one inter-op thread, all graph optimizations).
Every configuration runs in a fresh process, warm-up runs first, then at least --seconds of timed
runs; the table shows p50 latency in ms, the ratios pare_rt int8 / ONNX Runtime int8 (below 1:
pare_rt is faster) and libtorch fp32 / pare_rt int8 (the int8 speed-up), and the largest
convolution's rate as a fraction of this CPU's int8 peak (`pare bench --peak`: the dot-product
instructions int8 kernels are built of, no memory traffic). --repeats N keeps each configuration's
best p50 of N runs. Run on an otherwise idle machine.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_util import find_pare, print_table, run_json  # noqa: E402

WHO = "rt_bench"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(cmd, env=None):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"{WHO}: command failed (exit {p.returncode}): {' '.join(cmd)}\n{p.stderr[-3000:]}")
    return p.stdout


def pare_json(cmd):
    """`pare ... --json` prints one (multi-line) JSON document."""
    out = run(cmd)
    return json.loads(out[out.index("{"):])


def make_models(args, tmp):
    """name -> (fp32 path, int8 path, input shape without batch, description)."""
    import numpy as np
    models = {}
    rng = np.random.default_rng(0)
    for spec in args.model:
        name, files = spec.split("=", 1)
        fp32, int8 = files.split(",")
        shape = tuple(pare_json([args.pare, "inspect", fp32, "--json"])["inputs"][0]["shape"][1:])
        models[name] = (fp32, int8, shape, f"given: {fp32}, {int8}")
    for name in [m for m in args.models.split(",") if m and m not in models]:
        fp32, int8 = os.path.join(tmp, f"{name}.onnx"), os.path.join(tmp, f"{name}.int8.onnx")
        if name in ("cnn", "mlp"):
            spec = "cnn" if name == "cnn" else "mlp:784-300-100-10"
            run_json([args.pare, "train", "--model", spec, "--data", "fashion-mnist", "--batch-size", "32",
                      "--max-steps", "1", "--seed", "0", "--no-val", "--quiet", "--json", "--out", fp32], who=WHO)
            run([args.pare, "quantize", fp32, "--calib", "fashion-mnist", "--calib-samples", "512", "--quiet",
                 "--out", int8])
            models[name] = (fp32, int8, (1, 28, 28), f"zoo {spec} after one training step, int8 calibrated on "
                            "512 Fashion-MNIST images")
        elif name == "resnet18":
            run([sys.executable, os.path.join(ROOT, "tests", "peer", "export_models.py"), tmp, "--only", "resnet18"])
            x = rng.random((32, 3, 224, 224), dtype=np.float32)
            np.save(os.path.join(tmp, "calib_x.npy"), x)
            np.save(os.path.join(tmp, "calib_y.npy"), np.zeros(32, np.int64))
            run([args.pare, "quantize", fp32, "--calib",
                 f"npy:{os.path.join(tmp, 'calib_x.npy')},{os.path.join(tmp, 'calib_y.npy')}", "--quiet", "--out",
                 int8])
            models[name] = (fp32, int8, (3, 224, 224), "torchvision resnet18 (random weights), int8 calibrated on "
                            "32 random images")
        else:
            sys.exit(f"{WHO}: unknown model {name} (cnn, mlp, resnet18, or --model NAME=FP32,INT8)")
    return models


def ort_bench(args, model, x_path, threads):
    out = run([sys.executable, os.path.join(ROOT, "bench", "ort_bench.py"), model, "--input", x_path, "--threads",
               str(threads), "--seconds", str(args.seconds)])
    return json.loads(out.strip().splitlines()[-1])


def pare_bench(args, model, engine, batches, threads, profile=False):
    cmd = [args.pare, "bench", model, "--engine", engine, "--batch", ",".join(map(str, batches)), "--threads",
           ",".join(map(str, threads)), "--seconds", str(args.seconds), "--json"]
    if profile:
        cmd.append("--profile")
    rows = pare_json(cmd)["rows"]
    return {(r["batch"], r["threads"]): r for r in rows}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pare", default=os.environ.get("PARE", ""), help="the pare binary (default: $PARE, else build/cli/pare)")
    ap.add_argument("--models", default="cnn,mlp,resnet18", help="cnn, mlp, resnet18 (comma-separated)")
    ap.add_argument("--model", action="append", default=[], help="NAME=FP32.onnx,INT8.onnx: a model of your own")
    ap.add_argument("--batches", default="1,64")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--seconds", type=float, default=2.0, help="timed seconds per configuration (at least)")
    ap.add_argument("--repeats", type=int, default=1, help="runs of each configuration; the best p50 is kept")
    ap.add_argument("--json", default="", help="also write the rows to this file")
    args = ap.parse_args()
    args.pare = find_pare(args.pare, WHO)
    batches = [int(b) for b in args.batches.split(",") if b]
    threads = [int(t) for t in args.threads.split(",") if t]
    import numpy as np
    tmp = tempfile.mkdtemp(prefix="pare-rt-bench-")
    rows = []
    try:
        models = make_models(args, tmp)
        peak = pare_json([args.pare, "bench", "mlp:4-2", "--engine", "rt", "--batch", "1", "--threads",
                          ",".join(map(str, threads)), "--seconds", "0", "--iters", "1", "--peak", "--json"])["peak"]
        print(f"# int8 peak per configuration ({peak['int8_instructions']}): " +
              ", ".join(f"{t} thread(s) {peak[f'threads_{t}']['int8_gmacs_per_s']:.1f} GMAC/s" for t in threads),
              flush=True)
        rng = np.random.default_rng(1)
        for name, (fp32, int8, shape, desc) in models.items():
            print(f"# {name}: {desc}", flush=True)
            inputs = {}
            for b in batches:
                inputs[b] = os.path.join(tmp, f"{name}.x{b}.npy")
                np.save(inputs[b], rng.random((b,) + tuple(shape), dtype=np.float32))
            best = {}

            def keep(key, ms, extra=None):
                if key not in best or ms < best[key][0]:
                    best[key] = (ms, extra)

            for _ in range(args.repeats):
                r_int8 = pare_bench(args, int8, "rt", batches, threads, profile=True)
                for b in batches:
                    for t in threads:
                        keep(("rt_int8", b, t), r_int8[(b, t)]["p50_ms"], r_int8[(b, t)].get("profile"))
                        oi = ort_bench(args, int8, inputs[b], t)
                        keep(("ort_int8", b, t), oi["p50_ms"])
                        of = ort_bench(args, fp32, inputs[b], t)
                        keep(("ort_fp32", b, t), of["p50_ms"])
                torch_rows = pare_bench(args, fp32, "torch", batches, threads)
                rt_rows = pare_bench(args, fp32, "rt", batches, threads)
                for b in batches:
                    for t in threads:
                        keep(("torch_fp32", b, t), torch_rows[(b, t)]["p50_ms"])
                        keep(("rt_fp32", b, t), rt_rows[(b, t)]["p50_ms"])
            for b in batches:
                for t in threads:
                    g = {k: best[(k, b, t)][0] for k in ("rt_int8", "rt_fp32", "ort_int8", "ort_fp32", "torch_fp32")}
                    prof = best[("rt_int8", b, t)][1] or {}
                    conv = prof.get("largest_conv")
                    row = {"model": name, "batch": b, "threads": t, **{f"{k}_p50_ms": v for k, v in g.items()},
                           "rt_int8_vs_ort_int8": g["rt_int8"] / g["ort_int8"],
                           "torch_fp32_vs_rt_int8": g["torch_fp32"] / g["rt_int8"],
                           "rt_fp32_vs_ort_fp32": g["rt_fp32"] / g["ort_fp32"]}
                    if conv:
                        p = peak[f"threads_{t}"]["int8_gmacs_per_s"]
                        row["largest_conv"] = conv["node"]
                        row["largest_conv_gmacs"] = conv["gmacs_per_s"]
                        row["largest_conv_peak_fraction"] = conv["gmacs_per_s"] / p
                    rows.append(row)
                    print(f"# {name} batch {b} threads {t}: rt int8 {g['rt_int8']:.3f} ms, ort int8 "
                          f"{g['ort_int8']:.3f} ms ({row['rt_int8_vs_ort_int8']:.2f}x)", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    print("\np50 latency (ms) per batch; ratios below 1 mean pare_rt int8 is faster than the other:")
    print_table(("model", "batch", "thr", "rt int8", "rt fp32", "ORT int8", "ORT fp32", "torch fp32",
                 "rt int8/ORT int8", "torch fp32/rt int8", "rt fp32/ORT fp32", "largest conv"),
                [(r["model"], str(r["batch"]), str(r["threads"]), f"{r['rt_int8_p50_ms']:.3f}",
                  f"{r['rt_fp32_p50_ms']:.3f}", f"{r['ort_int8_p50_ms']:.3f}", f"{r['ort_fp32_p50_ms']:.3f}",
                  f"{r['torch_fp32_p50_ms']:.3f}", f"{r['rt_int8_vs_ort_int8']:.2f}x",
                  f"{r['torch_fp32_vs_rt_int8']:.1f}x", f"{r['rt_fp32_vs_ort_fp32']:.2f}x",
                  (f"{r['largest_conv_gmacs']:.0f} GMAC/s ({r['largest_conv_peak_fraction']:.0%} of peak)"
                   if "largest_conv" in r else "-")) for r in rows])
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"peak": peak, "rows": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
