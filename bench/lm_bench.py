"""Language-model inference, pare against transformers on the same PyTorch and threads.

    PARE=build/cli/pare bench/python bench/lm_bench.py [--threads 2] [--layers 10] [--repeats 2]

A random Llama of about 100M parameters (hidden 768, --layers 10, 12 heads with 4 KV heads, MLP
2048, vocabulary 32000; transformers' own initialization, seeded) is saved once with
save_pretrained; then both sides run it:
  prefill: batch 4 x 512 tokens, the logits and their log-softmax gathered at the next tokens
           (what perplexity needs): pare through `pare eval hf:DIR --data text:FORTUNES... --seq-len 512
           --batch-size 4 --max-windows W` (tokens through the model per second, measured inside, so
           no start-up or load; a byte-level BPE trained on the fortunes cuts the text), transformers
           the same forward + log_softmax + gather on W random windows of the same shape, no_grad;
  decode:  batch 1, a 16-token prompt, 64 new tokens greedy with the KV cache: pare `pare generate
           --json` (its decode_tokens_per_second: the steps after the first token), transformers
           generate() timed at 1 and at 65 new tokens (the difference is 64 steps).
Prints one table with tokens/s on each side and the ratios (goals: prefill >= 1.2x, decode >= 2x).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import transformers as tf


def make_model(d, layers):
    cfg = tf.LlamaConfig(vocab_size=32000, hidden_size=768, intermediate_size=2048, num_hidden_layers=layers,
                         num_attention_heads=12, num_key_value_heads=4, max_position_embeddings=1024,
                         bos_token_id=1, eos_token_id=2)
    torch.manual_seed(0)
    m = tf.LlamaForCausalLM(cfg).eval()
    m.save_pretrained(d)
    return m


TEXT = "/usr/share/games/fortunes/fortunes"
# pare eval reads the held-out tenth of every fortunes file: enough for the windows asked for.
ALL_TEXT = ",".join(sorted(os.path.join("/usr/share/games/fortunes", f) for f in os.listdir("/usr/share/games/fortunes")
                           if "." not in f))


def write_tokenizer(d):
    """A byte-level BPE trained on the fortunes (pare eval needs one to cut the text into windows)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train([TEXT], trainers.BpeTrainer(vocab_size=4000, show_progress=False,
                                          initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.save(os.path.join(d, "tokenizer.json"))


def hf_prefill(m, windows, batch):
    t0 = time.perf_counter()
    with torch.no_grad():
        for i in range(0, len(windows), batch):
            x = torch.from_numpy(windows[i:i + batch])
            logp = m(input_ids=x).logits[:, :-1].float().log_softmax(-1)
            logp.gather(-1, x[:, 1:, None]).sum().item()
    return windows.size / (time.perf_counter() - t0)


def hf_decode(m, prompt, new):
    def run(n):
        t0 = time.perf_counter()
        with torch.no_grad():
            m.generate(prompt, max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=0,
                       attention_mask=torch.ones_like(prompt))
        return time.perf_counter() - t0
    run(2)  # warm-up
    return (new - 1) / (run(new) - run(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--layers", type=int, default=10)
    ap.add_argument("--windows", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=2, help="best of N for each measurement")
    a = ap.parse_args()
    pare = os.environ.get("PARE", "build/cli/pare")
    torch.set_num_threads(a.threads)
    with tempfile.TemporaryDirectory() as d:
        m = make_model(d, a.layers)
        params = sum(p.numel() for p in m.parameters())
        write_tokenizer(d)
        g = np.random.default_rng(1)
        # Speed does not depend on which tokens: transformers gets random windows of pare's shape.
        windows = g.integers(3, 32000, size=(a.windows, 512)).astype(np.int64)
        rows = []
        hf = max(hf_prefill(m, windows, 4) for _ in range(a.repeats))
        pr = 0.0
        for _ in range(a.repeats):
            r = subprocess.run([pare, "eval", "hf:" + d, "--data", "text:" + ALL_TEXT, "--seq-len", "512", "--batch-size", "4",
                                "--max-windows", str(a.windows), "--threads", str(a.threads), "--json", "-q"],
                               capture_output=True, text=True, check=True)
            out = json.loads(r.stdout)
            if out["windows"] != a.windows:
                sys.exit(f"lm_bench: pare eval read {out['windows']} windows of the text, not {a.windows}")
            pr = max(pr, out["tokens_per_s"])
        rows.append((f"prefill 4 x 512 ({a.windows} windows)", pr, hf))
        # Decoding takes token ids: without the tokenizer (3,159 tokens for 32,000 logits) pare does not
        # turn the random model's ids back into text, which it refuses for ids past the tokenizer's.
        os.remove(os.path.join(d, "tokenizer.json"))
        prompt = torch.from_numpy(g.integers(3, 32000, size=(1, 16)).astype(np.int64))
        hd = max(hf_decode(m, prompt, a.new_tokens + 1) for _ in range(a.repeats))
        pd = 0.0
        for _ in range(a.repeats):
            r = subprocess.run([pare, "generate", "hf:" + d, "--prompt-ids", ",".join(map(str, prompt[0].tolist())),
                                "-n", str(a.new_tokens + 1), "--temperature", "0", "--ignore-eos", "--json", "-q",
                                "--threads", str(a.threads)], capture_output=True, text=True, check=True)
            pd = max(pd, json.loads(r.stdout)["decode_tokens_per_second"])
        rows.append((f"decode batch 1, {a.new_tokens} tokens", pd, hd))
    print(f"random Llama, {params / 1e6:.1f}M parameters, fp32, {a.threads} threads, torch {torch.__version__}, "
          f"transformers {tf.__version__}")
    print(f"{'':32} {'pare tok/s':>11} {'transformers':>13} {'ratio':>6}")
    for name, p, h in rows:
        print(f"{name:32} {p:11.1f} {h:13.1f} {p / h:6.2f}")


if __name__ == "__main__":
    sys.exit(main())
