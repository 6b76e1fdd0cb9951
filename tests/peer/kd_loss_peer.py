#!/usr/bin/env python3
"""PyTorch side of tests/peer/kd_loss_test.sh (run with the peers' Python, tests/peers.sh).

    kd_loss_peer.py gen DIR      writes random float32 logits and int64 labels for several batch
                                 sizes, class counts, temperatures and alphas: DIR/cases.txt
                                 ("name T alpha" per line) and DIR/<name>.{s,t,y}.npy
    kd_loss_peer.py check DIR    compares pare's DIR/<name>.{kd,kd_grad,mixed,mixed_grad}.npy with
                                 F.kl_div(F.log_softmax(s/T, 1), F.softmax(t/T, 1), 'batchmean')*T*T
                                 and alpha*KD + (1-alpha)*F.cross_entropy(s, y), and their gradients
                                 wrt s, computed by torch in float32 and in float64; prints the max
                                 differences; exit 1 when one exceeds the tolerance: 1e-6 against
                                 torch float32 (the same arithmetic), 1e-6 * max(1, |value|) against
                                 float64 (a float32 loss near 50 cannot be closer than ~4e-6; torch's
                                 own float32 result is held to the same bound and its error printed)
"""
import os
import sys

import numpy as np

# (batch N, classes C, temperature T, alpha, logit scale)
CASES = [
    (1, 2, 1.0, 0.5, 1.0),
    (7, 10, 4.0, 0.9, 3.0),
    (64, 10, 2.0, 0.0, 2.0),
    (64, 10, 4.0, 1.0, 2.0),
    (32, 100, 8.0, 0.3, 5.0),
    (16, 1000, 0.5, 0.7, 1.0),
    (128, 10, 20.0, 0.95, 10.0),
    (3, 37, 3.3, 0.25, 4.0),
    (256, 10, 1.0, 0.9, 1.0),
]
ATOL = 1e-6


def gen(d):
    rng = np.random.default_rng(20240613)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "cases.txt"), "w") as f:
        for i, (n, c, T, alpha, scale) in enumerate(CASES):
            name = f"case{i}_n{n}_c{c}"
            s = (rng.standard_normal((n, c)) * scale).astype(np.float32)
            # A teacher correlated with the student, as in training, plus noise.
            t = (0.5 * s + rng.standard_normal((n, c)) * scale).astype(np.float32)
            y = rng.integers(0, c, size=(n,), dtype=np.int64)
            for suffix, a in (("s", s), ("t", t), ("y", y)):
                np.save(os.path.join(d, f"{name}.{suffix}.npy"), a)
            f.write(f"{name} {T!r} {alpha!r}\n")


def torch_side(s, t, y, T, alpha, dtype):
    import torch
    import torch.nn.functional as F
    out = {}
    sv = torch.tensor(s, dtype=dtype, requires_grad=True)
    tv = torch.tensor(t, dtype=dtype)
    kd = F.kl_div(F.log_softmax(sv / T, 1), F.softmax(tv / T, 1), reduction="batchmean") * T * T
    out["kd"] = kd.detach().numpy()
    out["kd_grad"] = torch.autograd.grad(kd, sv)[0].numpy()
    sv = torch.tensor(s, dtype=dtype, requires_grad=True)
    kd = F.kl_div(F.log_softmax(sv / T, 1), F.softmax(tv / T, 1), reduction="batchmean") * T * T
    mixed = alpha * kd + (1 - alpha) * F.cross_entropy(sv, torch.tensor(y))
    out["mixed"] = mixed.detach().numpy()
    out["mixed_grad"] = torch.autograd.grad(mixed, sv)[0].numpy()
    return out


def check(d):
    import torch
    worst = {"float32": 0.0, "float64": 0.0, "torch32_vs_64": 0.0}
    failures = []
    with open(os.path.join(d, "cases.txt")) as f:
        cases = [line.split() for line in f if line.strip()]
    for name, T, alpha in cases:
        T, alpha = float(T), float(alpha)
        load = lambda suffix: np.load(os.path.join(d, f"{name}.{suffix}.npy"))
        s, t, y = load("s"), load("t"), load("y")
        refs = {"float32": torch_side(s, t, y, T, alpha, torch.float32),
                "float64": torch_side(s, t, y, T, alpha, torch.float64)}
        line = []
        for key in ("kd", "kd_grad", "mixed", "mixed_grad"):
            got = load(key)
            for ref_name, ref in refs.items():
                exp = ref[key]
                if got.shape != exp.shape:
                    failures.append(f"{name} {key}: shape {got.shape}, torch {exp.shape}")
                    continue
                if got.dtype != np.float32:
                    failures.append(f"{name} {key}: dtype {got.dtype}, expected float32")
                diff = float(np.max(np.abs(got.astype(np.float64) - exp.astype(np.float64))))
                worst[ref_name] = max(worst[ref_name], diff)
                tol = ATOL if ref_name == "float32" else ATOL * max(1.0, float(np.max(np.abs(exp))))
                if not np.all(np.isfinite(got)) or not diff <= tol:
                    failures.append(f"{name} {key}: max |pare - torch {ref_name}| = {diff:.3g} > {tol:.3g}")
                line.append(f"{key}/{ref_name[-2:]} {diff:.2g}")
            own = float(np.max(np.abs(refs["float32"][key].astype(np.float64) - refs["float64"][key])))
            worst["torch32_vs_64"] = max(worst["torch32_vs_64"], own)
        kd_val = float(load("kd"))
        print(f"{name} T={T:g} alpha={alpha:g} kd={kd_val:.6g}: max |pare - torch| " + ", ".join(line))
    print(f"max |pare - torch float32| = {worst['float32']:.3g}, "
          f"max |pare - torch float64| = {worst['float64']:.3g} (losses and gradients; tolerance {ATOL:g}, "
          f"against float64 {ATOL:g} * max(1, |value|)); torch float32 itself is off float64 by up to "
          f"{worst['torch32_vs_64']:.3g}")
    for msg in failures:
        print("FAIL " + msg)
    return 1 if failures else 0


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("gen", "check"):
        sys.exit(__doc__)
    if sys.argv[1] == "gen":
        gen(sys.argv[2])
    else:
        sys.exit(check(sys.argv[2]))
