"""Peak memory of one language-model KD step, the vocabulary in chunks against the whole logits.

    PARE=build/cli/pare bench/python bench/lm_kd_memory.py [--vocab 128256] [--batch 4] [--seq 1024]
                                                           [--chunks auto,512] [--threads 2]

A random Llama teacher (2 layers, hidden 256, 4 heads with 2 KV heads, MLP 512, vocabulary 128,256
as Llama 3's; transformers' initialization, seeded) is saved with save_pretrained beside a byte-level
BPE trained on the fortunes (its ids are a small part of the vocabulary: what matters here is the
logits' width). `pare distill` then makes a student from a spec (1 layer, hidden 128, the teacher's
vocabulary) and takes one KD step (--max-steps 1, no validation) on the fortunes at --batch x --seq
tokens, forward KL + cross entropy, once with --chunk-tokens 0 (the whole [tokens, vocabulary]
logits of both models) and once for each --chunks value (auto: 2^22 logits a chunk, 32 tokens here). Each run is its own process, and the peak
resident memory is the kernel's (wait4's ru_maxrss): it holds the weights, Adam's state and libtorch
too, so it is printed beside a run of the same set-up with 1 window of 16 tokens (the floor the
logits add to). Goal (issue 39): chunked at most 30% of plain.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from bench_util import find_pare

TEXT = "/usr/share/games/fortunes/fortunes"


def make_teacher(d, vocab):
    import torch
    import transformers as tf
    from lm_bench import write_tokenizer
    cfg = tf.LlamaConfig(vocab_size=vocab, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                         bos_token_id=1, eos_token_id=2)
    torch.manual_seed(0)
    tf.LlamaForCausalLM(cfg).save_pretrained(d)
    write_tokenizer(d)  # 4,000 tokens, on the fortunes


def run(pare, teacher, work, batch, seq, chunk, threads):
    """One KD step in its own process: (peak resident MB from wait4, seconds, its JSON)."""
    cmd = [pare, "distill", "--teacher", f"hf:{teacher}", "--student",
           "llama:layers=1,dim=128,heads=2,kv-heads=1,ff=256,ctx=2048", "--data", f"text:{TEXT}",
           "--seq-len", str(seq), "--batch-size", str(batch), "--max-steps", "1", "--no-val", "--loss", "fkl",
           "--chunk-tokens", str(chunk), "--threads", str(threads), "--out", os.path.join(work, f"student-{chunk}"),
           "--json", "-q"]
    env = dict(os.environ, PARE_CACHE_DIR=os.path.join(work, "cache"))
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(p.pid, 0)
    secs = time.perf_counter() - t0
    out, err = p.stdout.read(), p.stderr.read()
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{err}")
    return usage.ru_maxrss / 1024.0, secs, json.loads(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vocab", type=int, default=128256)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--chunks", default="auto,512", help="comma-separated --chunk-tokens values to compare with 0")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    pare = find_pare(os.environ.get("PARE"), "lm_kd_memory")
    with tempfile.TemporaryDirectory(prefix="pare-lm-kd-memory.") as work:
        teacher = os.path.join(work, "teacher")
        make_teacher(teacher, args.vocab)
        rows = []
        floor, _, _ = run(pare, teacher, work, 1, 16, "0", args.threads)
        print(f"vocabulary {args.vocab:,}, {args.batch} x {args.seq} tokens, {args.threads} threads; "
              f"the same set-up with 1 x 16 tokens peaks at {floor:,.0f} MB")
        for chunk in ["0"] + args.chunks.split(","):
            peak, secs, j = run(pare, teacher, work, args.batch, args.seq, chunk, args.threads)
            rows.append((chunk, peak, secs, j["train_loss"]))
        plain = rows[0][1]
        print(f"{'--chunk-tokens':>14} {'peak MB':>10} {'above floor':>12} {'of plain':>9} {'seconds':>8} {'loss':>10}")
        for chunk, peak, secs, loss in rows:
            print(f"{chunk:>14} {peak:>10,.0f} {peak - floor:>12,.0f} {peak / plain:>8.1%} {secs:>8.1f} {loss:>10.6f}")
        worst = max(r[1] for r in rows[1:]) / plain
        print(f"chunked peak / plain peak: {worst:.1%} (goal <= 30%)")


if __name__ == "__main__":
    main()
