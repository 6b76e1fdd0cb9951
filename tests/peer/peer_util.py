#!/usr/bin/env python3
"""Small numpy/onnx helpers for the peer tests (run with the peers' Python, tests/peers.sh).

    peer_util.py compare ACTUAL.npy EXPECTED.npy --atol A [--rtol R | --scale-floor F] [--label TEXT]
        Passes when max|actual - expected| <= atol + rtol * max|expected| (with --scale-floor:
        <= atol * max(F, max|expected|)); prints the max abs
        and max relative difference either way; exit 1 on a mismatch in shape, dtype class or value.
    peer_util.py make-data OUTDIR --kind image|tokens [--n 64] [--vocab V --seq S --classes C]
        Writes OUTDIR/x.npy (float32 [n,1,28,28] in [0,1], or int64 ids [n,S]) and OUTDIR/y.npy
        (int64 labels).
    peer_util.py make-input OUT.npy --kind image|tokens [--batch B] [--vocab V --seq S] [--seed S]
    peer_util.py check-onnx MODEL.onnx
        onnx.checker.check_model on the file (full check, with shape inference).
    peer_util.py bpe OUT.json --text FILE --vocab N
        A byte-level BPE of N tokens (GPT-2 style, <|endoftext|> its one special token) trained by
        `tokenizers` on FILE, saved as tokenizer.json.
    peer_util.py fmnist OUTDIR [--test N] [--calib M]
        From the Debian package dataset-fashion-mnist: OUTDIR/x.npy, the first N test images
        (float32 [N,1,28,28] in [0,1]), and OUTDIR/cx.npy, cy.npy, the last M training images and
        their labels (calibration data).
"""
import argparse
import sys

import numpy as np


def compare(args):
    a = np.load(args.actual)
    e = np.load(args.expected)
    label = args.label or args.actual
    if a.shape != e.shape:
        print(f"FAIL {label}: shape {list(a.shape)}, expected {list(e.shape)}")
        return 1
    if np.issubdtype(e.dtype, np.floating) != np.issubdtype(a.dtype, np.floating):
        print(f"FAIL {label}: dtype {a.dtype}, expected {e.dtype}")
        return 1
    a64 = a.astype(np.float64)
    e64 = e.astype(np.float64)
    if not np.all(np.isfinite(a64)):
        print(f"FAIL {label}: {int(np.sum(~np.isfinite(a64)))} non-finite values")
        return 1
    diff = np.abs(a64 - e64)
    max_abs = float(diff.max()) if diff.size else 0.0
    scale = float(np.abs(e64).max()) if e64.size else 0.0
    max_rel = float((diff / np.maximum(np.abs(e64), 1e-6)).max()) if diff.size else 0.0
    tol = args.atol * max(args.scale_floor, scale) if args.scale_floor else args.atol + args.rtol * scale
    ok = max_abs <= tol
    where = ""
    if diff.size:
        idx = np.unravel_index(int(diff.argmax()), diff.shape)
        where = f" at {list(map(int, idx))} ({a64[idx]:.7g} vs {e64[idx]:.7g})"
    print(f"{'ok  ' if ok else 'FAIL'} {label}: shape {list(a.shape)}, max abs diff {max_abs:.3g}"
          f"{where}, max rel diff {max_rel:.3g}, max |expected| {scale:.3g}, tolerance {tol:.3g}")
    return 0 if ok else 1


def make_x(kind, n, rng, vocab, seq):
    if kind == "image":
        return rng.random((n, 1, 28, 28), dtype=np.float32)
    return rng.integers(0, vocab, size=(n, seq), dtype=np.int64)


def make_data(args):
    import os
    rng = np.random.default_rng(args.seed)
    os.makedirs(args.outdir, exist_ok=True)
    np.save(os.path.join(args.outdir, "x.npy"), make_x(args.kind, args.n, rng, args.vocab, args.seq))
    np.save(os.path.join(args.outdir, "y.npy"),
            rng.integers(0, args.classes, size=(args.n,), dtype=np.int64))
    return 0


def make_input(args):
    rng = np.random.default_rng(args.seed)
    np.save(args.out, make_x(args.kind, args.batch, rng, args.vocab, args.seq))
    return 0


def check_onnx(args):
    import onnx
    model = onnx.load(args.model)
    onnx.checker.check_model(model, full_check=True)
    ops = " ".join(sorted({n.op_type for n in model.graph.node}))
    opsets = ",".join("%s:%d" % (o.domain or "ai.onnx", o.version) for o in model.opset_import)
    print(f"ok   onnx.checker: {args.model} (ir {model.ir_version}, opset {opsets}, "
          f"{len(model.graph.node)} nodes: {ops})")
    return 0


def fmnist(args):
    import gzip
    import os

    def idx(path):
        data = gzip.open(path).read()
        nd = data[3]
        dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(nd)]
        return np.frombuffer(data, np.uint8, offset=4 + 4 * nd).reshape(dims)
    root = "/usr/share/datasets/fashion-mnist/"
    d = args.outdir
    np.save(os.path.join(d, "x.npy"), idx(root + "t10k-images-idx3-ubyte.gz")[:args.test].astype(np.float32)[:, None] / 255)
    np.save(os.path.join(d, "cx.npy"),
            idx(root + "train-images-idx3-ubyte.gz")[-args.calib:].astype(np.float32)[:, None] / 255)
    np.save(os.path.join(d, "cy.npy"), idx(root + "train-labels-idx1-ubyte.gz")[-args.calib:].astype(np.int64))
    return 0


def bpe(args):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train([args.text], trainers.BpeTrainer(vocab_size=args.vocab, show_progress=False,
                                               special_tokens=["<|endoftext|>"],
                                               initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.save(args.out)
    return 0


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("compare")
    c.add_argument("actual")
    c.add_argument("expected")
    c.add_argument("--atol", type=float, required=True)
    c.add_argument("--rtol", type=float, default=0.0)
    c.add_argument("--label", default="")
    c.add_argument("--scale-floor", type=float, default=0.0,
                   help="if set, tolerance is atol * max(scale_floor, max|expected|) instead")
    for name in ("make-data", "make-input"):
        m = sub.add_parser(name)
        m.add_argument("outdir" if name == "make-data" else "out")
        m.add_argument("--kind", choices=("image", "tokens"), required=True)
        m.add_argument("--n", type=int, default=64)
        m.add_argument("--batch", type=int, default=3)
        m.add_argument("--vocab", type=int, default=50)
        m.add_argument("--seq", type=int, default=8)
        m.add_argument("--classes", type=int, default=10)
        m.add_argument("--seed", type=int, default=0)
    k = sub.add_parser("check-onnx")
    k.add_argument("model")
    b = sub.add_parser("bpe")
    b.add_argument("out")
    b.add_argument("--text", required=True)
    b.add_argument("--vocab", type=int, required=True)
    f = sub.add_parser("fmnist")
    f.add_argument("outdir")
    f.add_argument("--test", type=int, default=2000)
    f.add_argument("--calib", type=int, default=256)
    args = ap.parse_args()
    return {"compare": compare, "make-data": make_data, "make-input": make_input,
            "check-onnx": check_onnx, "bpe": bpe, "fmnist": fmnist}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
