#!/usr/bin/env python3
"""TRL side of tests/peer/lm_kd_loss_test.sh (run with the peers' Python, tests/peers.sh).

    lm_kd_loss_peer.py gen DIR     writes random float32 student and teacher logits [B, S, V] and int64
                                   labels [B, S] with -100 on prompt and padding tokens, for beta in
                                   {0, 0.5, 1} (and 0.1, 0.9) and T in {1, 2}: DIR/cases.txt ("name beta T"
                                   per line) and DIR/<name>.{s,t,y}.npy
    lm_kd_loss_peer.py check DIR   compares pare's DIR/<name>.{loss,grad}.npy (distill::token_divergence
                                   with jsd:BETA) with TRL's GKDTrainer.generalized_jsd_loss(s, t, labels,
                                   beta, T) and its gradient wrt s, in float32; prints the differences;
                                   exit 1 when one exceeds 1e-5
"""
import os
import sys

import numpy as np

# (batch B, sequence S, vocabulary V, logit scale)
SHAPES = [(2, 8, 1000, 3.0), (1, 16, 4096, 5.0), (3, 5, 50, 1.0)]
BETAS = ["0", "0.5", "1", "0.1", "0.9"]
TEMPERATURES = [1.0, 2.0]
ATOL = 1e-5


def gen(d):
    rng = np.random.default_rng(20261205)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "cases.txt"), "w") as f:
        for i, (b, s_len, v, scale) in enumerate(SHAPES):
            for beta in BETAS:
                for T in TEMPERATURES:
                    name = f"shape{i}_b{beta}_T{T:g}"
                    s = (rng.standard_normal((b, s_len, v)) * scale).astype(np.float32)
                    t = (0.5 * s + rng.standard_normal((b, s_len, v)) * scale).astype(np.float32)
                    y = rng.integers(0, v, size=(b, s_len)).astype(np.int64)
                    y[:, :2] = -100                     # a prompt
                    y[-1, s_len - 2:] = -100            # padding at the end of the last row
                    for suffix, a in (("s", s), ("t", t), ("y", y)):
                        np.save(os.path.join(d, f"{name}.{suffix}.npy"), a)
                    f.write(f"{name} {beta} {T!r}\n")


def check(d):
    import torch
    import trl
    from trl.experimental.gkd import GKDTrainer
    worst = {"loss": 0.0, "grad": 0.0}
    failures = []
    with open(os.path.join(d, "cases.txt")) as f:
        cases = [line.split() for line in f if line.strip()]
    for name, beta, T in cases:
        load = lambda suffix: np.load(os.path.join(d, f"{name}.{suffix}.npy"))
        s = torch.tensor(load("s"), requires_grad=True)
        t, y = torch.tensor(load("t")), torch.tensor(load("y"))
        loss = GKDTrainer.generalized_jsd_loss(s, t, labels=y, beta=float(beta), temperature=float(T))
        grad = torch.autograd.grad(loss, s)[0]
        line = []
        for key, ref in (("loss", loss.detach().numpy()), ("grad", grad.numpy())):
            got = load(key)
            if got.shape != ref.shape or got.dtype != np.float32:
                failures.append(f"{name} {key}: {got.dtype} {got.shape}, TRL float32 {ref.shape}")
                continue
            diff = float(np.max(np.abs(got.astype(np.float64) - ref.astype(np.float64))))
            worst[key] = max(worst[key], diff)
            if not np.all(np.isfinite(got)) or not diff <= ATOL:
                failures.append(f"{name} {key}: max |pare - TRL| = {diff:.3g} > {ATOL:g}")
            line.append(f"{key} {diff:.2g}")
        print(f"{name} beta={beta} T={T} loss={float(loss):.6g}: max |pare - TRL| " + ", ".join(line))
    print(f"TRL {trl.__version__}, torch {torch.__version__}: {len(cases)} cases, max |pare - TRL| loss "
          f"{worst['loss']:.3g}, gradient {worst['grad']:.3g} (tolerance {ATOL:g})")
    for msg in failures:
        print("FAIL " + msg)
    return 1 if failures or not cases else 0


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("gen", "check"):
        sys.exit(__doc__)
    if sys.argv[1] == "gen":
        gen(sys.argv[2])
    else:
        sys.exit(check(sys.argv[2]))
