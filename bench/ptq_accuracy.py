#!/usr/bin/env python3
"""Post-training static int8 accuracy on Fashion-MNIST: pare quantize vs PyTorch's torch.ao PTQ.

    bench/python bench/ptq_accuracy.py MODEL.onnx [MODEL.onnx ...] [--pare PATH]
        [--calib-samples 512] [--seed 0] [--methods minmax,entropy] [--per-tensor] [--threads 2]
        [--json FILE]

For each pare-exported zoo model (its `pare.zoo_spec` metadata names the torch.nn twin in
bench_util.torch_model), side by side in one run:
  - the calibration set: CALIB_SAMPLES images drawn from the train split with numpy's
    default_rng(SEED), written to .npy, so that both sides calibrate on the very same images;
  - pare: `pare eval MODEL --data fashion-mnist --json` (fp32), then for each method
    `pare quantize MODEL --calib npy:X,Y --calib-samples N --method M --out int8.onnx` and
    `pare eval int8.onnx` (the QDQ graph simulated exactly as ONNX defines it);
  - PyTorch: the twin with the same weights (read from the ONNX file), evaluated in fp32, then
    quantized with torch.ao FX graph mode post-training static quantization
    (get_default_qconfig_mapping(ENGINE), prepare_fx, calibration on the same images, convert_fx)
    on the quantized engine this PyTorch has (Debian's build has onednn and qnnpack, no fbgemm:
    onednn is the x86 one), then evaluated on the test split.
Prints one table row per model and method: fp32 and int8 top-1 of both, and the int8 - fp32 drops.
"""
import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_util import find_pare, load_fmnist_torch, print_table, run_json  # noqa: E402
from kd_step import torch_teacher  # noqa: E402  (the ONNX zoo model as torch.nn with its weights)

WHO = "ptq_accuracy"


def torch_accuracy(model, x, y, batch=1000):
    import torch
    correct = 0
    with torch.no_grad():
        for i in range(0, x.shape[0], batch):
            correct += int((model(x[i:i + batch]).argmax(1) == y[i:i + batch]).sum())
    return correct / x.shape[0]


def torch_ptq(path, calib_x, x_test, y_test):
    import copy
    import torch
    from torch.ao.quantization import get_default_qconfig_mapping
    from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx
    engines = torch.backends.quantized.supported_engines
    engine = next((e for e in ("x86", "fbgemm", "onednn", "qnnpack") if e in engines), None)
    if engine is None:
        sys.exit(f"{WHO}: this PyTorch has no quantized engine ({engines})")
    torch.backends.quantized.engine = engine
    fp32 = torch_teacher(path)
    fp32_acc = torch_accuracy(fp32, x_test, y_test)
    prepared = prepare_fx(copy.deepcopy(fp32), get_default_qconfig_mapping(engine), (calib_x[:1],))
    with torch.no_grad():
        for i in range(0, calib_x.shape[0], 256):
            prepared(calib_x[i:i + 256])
    int8 = convert_fx(prepared)
    return engine, fp32_acc, torch_accuracy(int8, x_test, y_test)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--pare", default=os.environ.get("PARE"))
    ap.add_argument("--calib-samples", type=int, default=512)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--methods", default="minmax,entropy")
    ap.add_argument("--per-tensor", action="store_true")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json")
    args = ap.parse_args()
    pare = find_pare(args.pare, WHO)
    import numpy as np
    import torch
    torch.set_num_threads(args.threads)
    x_train, y_train = load_fmnist_torch("train")
    x_test, y_test = load_fmnist_torch("test")
    idx = np.random.default_rng(args.seed).choice(x_train.shape[0], args.calib_samples, replace=False)
    calib_x = x_train[torch.from_numpy(idx)].contiguous()
    results, rows = [], []
    with tempfile.TemporaryDirectory() as tmp:
        cx, cy = os.path.join(tmp, "calib_x.npy"), os.path.join(tmp, "calib_y.npy")
        np.save(cx, calib_x.numpy())
        np.save(cy, y_train[torch.from_numpy(idx)].numpy())
        for path in args.models:
            name = os.path.basename(path)
            engine, t_fp32, t_int8 = torch_ptq(path, calib_x, x_test, y_test)
            p_fp32 = run_json([pare, "eval", path, "--data", "fashion-mnist", "--json",
                               "--threads", str(args.threads)], who=WHO)["accuracy"]
            for method in args.methods.split(","):
                out = os.path.join(tmp, f"{name}.{method}.int8.onnx")
                cmd = [pare, "quantize", path, "--calib", f"npy:{cx},{cy}", "--calib-samples",
                       str(args.calib_samples), "--method", method, "--quiet", "--json",
                       "--threads", str(args.threads), "--out", out]
                if args.per_tensor:
                    cmd.append("--per-tensor")
                rep = run_json(cmd, who=WHO)
                p_int8 = run_json([pare, "eval", out, "--data", "fashion-mnist", "--json",
                                   "--threads", str(args.threads)], who=WHO)["accuracy"]
                r = {"model": name, "method": method, "pare_fp32": p_fp32, "pare_int8": p_int8,
                     "torch_engine": engine, "torch_fp32": t_fp32, "torch_int8": t_int8,
                     "pare_output_sqnr_db": rep["output_sqnr_db"],
                     "fp32_bytes": rep["fp32_bytes"], "int8_bytes": os.path.getsize(out)}
                results.append(r)
                rows.append((name, method, f"{100 * p_fp32:.2f}", f"{100 * p_int8:.2f}",
                             f"{100 * (p_int8 - p_fp32):+.2f}", f"{100 * t_fp32:.2f}",
                             f"{100 * t_int8:.2f} ({engine})", f"{100 * (t_int8 - t_fp32):+.2f}",
                             f"{os.path.getsize(path)} -> {os.path.getsize(out)}"))
    print_table(("model", "pare method", "pare fp32 %", "pare int8 %", "pare drop", "torch fp32 %",
                 "torch.ao int8 %", "torch drop", "ONNX bytes"), rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
