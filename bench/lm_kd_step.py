"""Language-model KD step throughput: pare distill against the same step in PyTorch + transformers.

    PARE=build/cli/pare bench/python bench/lm_kd_step.py [--threads 2] [--batch 8] [--seq 256]
                                                         [--steps 30] [--warmup 3] [--vocab 8192]
                                                         [--repeats 3]

A random Llama teacher (4 layers, hidden 256, 4 heads with 2 KV heads, MLP 688) and a random
Llama student (2 layers, hidden 128, 2 heads, 1 KV head, MLP 344), both with --vocab tokens and
transformers' initialization (seeded), are saved with save_pretrained; a byte-level BPE trained on
the fortunes goes beside the teacher. A KD step on --batch x --seq tokens: the teacher forward (no
grad), the student forward, loss = 0.5 * forward KL(p_t || p_s) per token (T = 1, summed over the
vocabulary, averaged over tokens: TRL's generalized_jsd_loss at beta 0) + 0.5 * next-token cross
entropy, backward, AdamW (lr 1e-3, no weight decay), the loss read back (loss.item()).
  - pare: `pare distill --teacher hf:T --student hf:S --data text:FORTUNES --loss fkl -T 1 --alpha 0.5
    --optimizer adamw --max-steps N --no-val`, run with WARMUP and WARMUP+STEPS steps; the steady
    figure is STEPS * tokens / the difference of their training seconds (the metrics file); once with
    the vocabulary in chunks (--chunk-tokens auto, the default) and once with the whole logits (0).
  - PyTorch (the .venv's, torch.set_num_threads(T)): the same two folders loaded by
    AutoModelForCausalLM (fp32, eager attention off: sdpa), the same step on random windows, WARMUP
    untimed steps then STEPS timed ones; in a fresh process with glibc malloc out of the box and
    again with the tuned malloc pare itself uses (bench_util.TUNED_MALLOC).
Each of the four runs is repeated --repeats times, alternating, and its best kept (the machine's noise
between runs of a minute is about 20%). Prints tokens/s and pare's ratio to each PyTorch run. Goal (issue 39): at least 1.5x the tuned peer.
"""
import argparse
import json
import os
import sys
import tempfile

from bench_util import find_pare, print_table, run_json, timed, torch_env

WHO = "lm_kd_step"
TEXT = "/usr/share/games/fortunes/fortunes"


def make_models(d, vocab):
    import torch
    import transformers as tf
    from lm_bench import write_tokenizer
    shapes = {"teacher": (4, 256, 4, 2, 688), "student": (2, 128, 2, 1, 344)}
    for i, (name, (layers, hidden, heads, kv, ff)) in enumerate(shapes.items()):
        cfg = tf.LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=ff, num_hidden_layers=layers,
                             num_attention_heads=heads, num_key_value_heads=kv, max_position_embeddings=1024,
                             bos_token_id=1, eos_token_id=2)
        torch.manual_seed(i)
        tf.LlamaForCausalLM(cfg).save_pretrained(os.path.join(d, name))
    write_tokenizer(os.path.join(d, "teacher"))


def torch_worker(args):
    import torch
    import torch.nn.functional as F
    import transformers as tf
    torch.set_num_threads(args.threads)
    teacher = tf.AutoModelForCausalLM.from_pretrained(os.path.join(args.dir, "teacher")).eval()
    student = tf.AutoModelForCausalLM.from_pretrained(os.path.join(args.dir, "student")).train()
    opt = torch.optim.AdamW(student.parameters(), lr=1e-3, weight_decay=0.0)
    gen = torch.Generator().manual_seed(0)
    vocab = teacher.config.vocab_size

    def step():
        ids = torch.randint(0, 4000, (args.batch, args.seq + 1), generator=gen)
        x, y = ids[:, :-1], ids[:, 1:]
        with torch.no_grad():
            t = teacher(x).logits
        s = student(x).logits
        log_ps, log_pt = F.log_softmax(s, -1), F.log_softmax(t, -1)
        kl = (log_pt.exp() * (log_pt - log_ps)).sum(-1).mean()
        ce = F.cross_entropy(s.reshape(-1, vocab), y.reshape(-1))
        loss = 0.5 * kl + 0.5 * ce
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.item()

    secs = timed(step, args.warmup, args.steps)
    print(json.dumps({"tokens_per_s": args.steps * args.batch * args.seq / secs}))


def pare_tokens_per_s(args, chunk):
    def run(steps):
        metrics = os.path.join(args.dir, "metrics.jsonl")
        if os.path.exists(metrics):
            os.remove(metrics)
        run_json([args.pare, "distill", "--teacher", "hf:" + os.path.join(args.dir, "teacher"), "--student",
                  "hf:" + os.path.join(args.dir, "student"), "--data", f"text:{TEXT}", "--seq-len", str(args.seq),
                  "--batch-size", str(args.batch), "--loss", "fkl", "-T", "1", "--alpha", "0.5", "--optimizer",
                  "adamw", "--lr", "1e-3", "--epochs", "100", "--max-steps", str(steps), "--no-val",
                  "--chunk-tokens", chunk, "--threads", str(args.threads), "--metrics", metrics, "--seed", "0",
                  "--json", "-q", "--out", os.path.join(args.dir, "out")],
                 env=dict(os.environ, PARE_CACHE_DIR=os.path.join(args.dir, "cache")), who=WHO)
        with open(metrics) as f:
            return sum(json.loads(l)["seconds"] for l in f if l.strip())
    dt = run(args.warmup + args.steps) - run(args.warmup)
    return args.steps * args.batch * args.seq / dt


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--torch-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--dir", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.torch_worker:
        return torch_worker(args)
    args.pare = find_pare(os.environ.get("PARE"), WHO)
    with tempfile.TemporaryDirectory(prefix="pare-lm-kd-step.") as d:
        args.dir = d
        make_models(d, args.vocab)
        worker = [sys.executable, os.path.abspath(__file__), "--torch-worker", "--dir", d] + \
            [f"--{k}={getattr(args, k)}" for k in ("threads", "batch", "seq", "steps", "warmup")]
        runs = [lambda: run_json(worker, env=torch_env(False), who=WHO)["tokens_per_s"],
                lambda: run_json(worker, env=torch_env(True), who=WHO)["tokens_per_s"],
                lambda: pare_tokens_per_s(args, "auto"), lambda: pare_tokens_per_s(args, "0")]
        best = [0.0] * len(runs)
        for _ in range(args.repeats):
            for i, r in enumerate(runs):
                best[i] = max(best[i], r())
        torch_default, torch_tuned, pare_chunked, pare_whole = best
    print(f"KD step, vocabulary {args.vocab:,}, {args.batch} x {args.seq} tokens, {args.threads} threads "
          f"({args.steps} timed steps after {args.warmup}, best of {args.repeats})")
    rows = [("PyTorch + transformers, glibc malloc", torch_default), ("PyTorch + transformers, tuned malloc", torch_tuned),
            ("pare, vocabulary in chunks (auto)", pare_chunked), ("pare, whole logits (--chunk-tokens 0)", pare_whole)]
    print_table(("run", "tokens/s", "vs PyTorch default", "vs PyTorch tuned"),
                [(n, f"{v:,.0f}", f"{v / torch_default:.2f}x", f"{v / torch_tuned:.2f}x") for n, v in rows])
    print(f"pare (chunked) / tuned PyTorch: {pare_chunked / torch_tuned:.2f}x (goal >= 1.5x)")


if __name__ == "__main__":
    sys.exit(main())
