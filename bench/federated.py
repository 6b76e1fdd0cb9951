"""Federated training with pare federate simulate (issue 16), beside two references in one run.

No attack (the default): pare's FedAvg over N client processes and gRPC, against
  * the same model trained centrally by `pare train` for rounds x local epochs epochs, and
  * the peer: FedAvg written in PyTorch (the .venv's), on exactly the client data pare's
    simulation wrote (DIR/data/client-K.{x,y}.npy), with the same local SGD, in one process.
--table: final accuracy for every aggregator x attack at each Byzantine fraction (pare only:
no peer here ships these aggregators in C++ or in Debian's Python).
--feddf A B C: FedDF with clients running the architectures A, B, C (client k runs k mod 3), its
models distilled each round on --distill-samples held-out training inputs, against FedAvg of each
architecture alone on all the clients (which also get the held-out samples, with their labels).

  PARE=build/cli/pare bench/federated.sh                      # 20 clients, Dirichlet 0.5, 30 rounds
  PARE=build/cli/pare bench/federated.sh --table --rounds 10 --train-samples 20000
  PARE=build/cli/pare bench/federated.sh --table --fractions 0.2 --aggregators median --bucket 2
  PARE=build/cli/pare bench/federated.sh --feddf mlp:784-100-10 mlp:784-300-100-10 lenet5
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

sys.path.insert(0, os.path.dirname(__file__))
from bench_util import load_fmnist_torch, torch_model  # noqa: E402

PARE = os.environ.get("PARE", "build/cli/pare")
AGGS = ["fedavg", "median", "trimmed-mean", "krum", "multi-krum", "bulyan", "fltrust"]
ATTACKS = ["sign-flip", "scaling", "gaussian", "label-flip", "alie"]


def simulate(a, out, aggregator="fedavg", byzantine=0, attack="none", models=None, extra=()):
    models = models or [a.model]
    cmd = [PARE, "federate", "simulate", *sum((["-m", m] for m in models), []), "-d", "fashion-mnist",
           "--clients", str(a.clients),
           "--rounds", str(a.rounds), "--partition", a.partition, "--lr", str(a.lr), "--seed", str(a.seed),
           "--aggregator", aggregator, "--out", out, "--json", "--quiet"]
    if a.train_samples:
        cmd += ["--train-samples", str(a.train_samples)]
    if aggregator == "fltrust":
        cmd += ["--root-samples", str(a.root_samples)]
    if byzantine:
        cmd += ["--byzantine", str(byzantine), "--attack", attack]
        if aggregator == "trimmed-mean":  # cut at least the attackers' share of the rows at each end
            rows = -(-a.clients // a.bucket) if a.bucket > 1 else a.clients
            cmd += ["--trim", str(min(0.45, max(0.2, byzantine / rows)))]
    if a.bucket > 1 and aggregator != "fedavg":
        cmd += ["--bucket", str(a.bucket)]
    if a.nnm and aggregator != "fedavg":
        cmd += ["--nnm"]
    if a.local_kd_alpha:
        cmd += ["--local-kd-alpha", str(a.local_kd_alpha)]
    if a.server_momentum or a.server_lr != 1:
        cmd += ["--server-momentum", str(a.server_momentum), "--server-lr", str(a.server_lr)]
    cmd += list(extra)
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        return None, time.time() - t0, r.stderr.strip().splitlines()[-1:]
    j = json.loads(r.stdout)
    return j.get("model_accuracy", j["val_accuracy"]), time.time() - t0, None


def torch_fedavg(a, data_dir):
    """FedAvg in PyTorch on pare's client files: local SGD (momentum, batch 32), sample-weighted mean,
    then the server step (FedAvgM: v = beta v + mean update, the model moves by server lr * v)."""
    torch.manual_seed(a.seed)
    torch.set_num_threads(2)
    parts = []
    for k in range(a.clients):
        x = torch.from_numpy(np.load(f"{data_dir}/client-{k:02d}.x.npy"))
        y = torch.from_numpy(np.load(f"{data_dir}/client-{k:02d}.y.npy"))
        parts.append((x, y))
    xt, yt = load_fmnist_torch("test")
    glob = torch_model(a.model)
    n_all = sum(len(y) for _, y in parts)
    velocity = {k: torch.zeros_like(v) for k, v in glob.state_dict().items()}
    for _ in range(a.rounds):
        avg = {k: torch.zeros_like(v) for k, v in glob.state_dict().items()}
        for x, y in parts:
            local = torch_model(a.model)
            local.load_state_dict(glob.state_dict())
            opt = torch.optim.SGD(local.parameters(), lr=a.lr, momentum=0.9)
            perm = torch.randperm(len(y))
            for i in range(0, len(y), 32):
                idx = perm[i:i + 32]
                opt.zero_grad()
                torch.nn.functional.cross_entropy(local(x[idx]), y[idx]).backward()
                opt.step()
            for k, v in local.state_dict().items():
                avg[k] += v * (len(y) / n_all)
        state = glob.state_dict()
        for k in avg if a.server_momentum or a.server_lr != 1 else ():
            velocity[k] = a.server_momentum * velocity[k] + (avg[k] - state[k])
            avg[k] = state[k] + a.server_lr * velocity[k]
        glob.load_state_dict(avg)
    with torch.no_grad():
        return (glob(xt).argmax(1) == yt).float().mean().item()


def central(a, work):
    cmd = [PARE, "train", "-m", a.model, "-d", "fashion-mnist", "--epochs", str(a.rounds), "--optimizer", "sgd",
           "--lr", str(a.lr), "--momentum", "0.9", "--batch-size", "32", "--seed", str(a.seed),
           "--out", f"{work}/central.onnx", "--json", "--quiet"]
    if a.train_samples:
        print("note: the central run uses the whole training set", file=sys.stderr)
    return json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)["val_accuracy"]


def no_attack(a, work):
    t0 = time.time()
    fed, fed_s, err = simulate(a, f"{work}/fedavg")
    if fed is None:
        sys.exit(f"pare federate simulate failed: {err}")
    t1 = time.time()
    peer = torch_fedavg(a, f"{work}/fedavg/data")
    peer_s = time.time() - t1
    cen = central(a, work)
    print(f"{a.clients} clients, {a.partition}, {a.rounds} rounds of 1 local epoch, {a.model}, SGD lr {a.lr}")
    print(f"| run | test accuracy | seconds |\n|---|---|---|")
    print(f"| pare federate simulate (FedAvg, {a.clients + 1} processes, gRPC) | {fed * 100:.2f}% | {fed_s:.0f} |")
    print(f"| PyTorch FedAvg on the same client data (one process) | {peer * 100:.2f}% | {peer_s:.0f} |")
    print(f"| pare train, central, {a.rounds} epochs | {cen * 100:.2f}% | - |")
    if a.local_kd_alpha:
        print(f"note: pare's clients also distil from the global model (alpha {a.local_kd_alpha:g}); the PyTorch "
              "FedAvg and the central run do not")
    print(f"FedAvg vs central: {(fed - cen) * 100:+.2f} points; pare vs PyTorch FedAvg: {(fed - peer) * 100:+.2f} points; "
          f"total {time.time() - t0:.0f} s")


def table(a, work):
    base, _, _ = simulate(a, f"{work}/base")
    every = "".join([f"; local KD alpha {a.local_kd_alpha:g}" if a.local_kd_alpha else "",
                     f"; server momentum {a.server_momentum:g}, server lr {a.server_lr:g}"
                     if a.server_momentum or a.server_lr != 1 else ""])
    print(f"no attack, FedAvg: {base * 100:.2f}%{every}")
    for frac in a.fractions:
        f = int(round(frac * a.clients))
        print(f"\n{f} of {a.clients} clients attacking ({frac:.0%}); {a.rounds} rounds; cells: final test accuracy "
              f"(points vs the no-attack FedAvg)\n")
        print("| aggregator | " + " | ".join(a.attacks) + " |\n|---|" + "---|" * len(a.attacks))
        for agg in a.aggregators:
            cells = []
            for att in a.attacks:
                if agg == "bulyan" and a.clients < 4 * f + 3:
                    cells.append(f"n/a (n < 4f+3)")
                    continue
                # "none": no attacker, the rule still set for f of them (its own cost on this split).
                extra = ["--assume-byzantine", str(f)] if att == "none" else []
                acc, secs, err = simulate(a, f"{work}/{agg}-{att}-{f}", agg, 0 if att == "none" else f, att, extra=extra)
                cells.append(f"{acc * 100:.1f} ({(acc - base) * 100:+.1f})" if acc is not None else f"failed: {err}")
            print(f"| {agg} | " + " | ".join(cells) + " |", flush=True)


def feddf(a, work):
    print(f"{a.clients} clients, {a.partition}, {a.rounds} rounds of 1 local epoch, SGD lr {a.lr}; FedDF: client k "
          f"runs architecture k mod {len(a.feddf)}, {a.distill_samples} held-out unlabeled inputs, ensemble {a.ensemble}, "
          f"{a.distill_epochs} distillation epochs at temperature {a.distill_temperature:g}"
          + (f", best epoch on {a.distill_val:.0%} held out" if a.distill_val else ""))
    accs, secs, err = simulate(a, f"{work}/feddf", models=a.feddf,
                               extra=["--mode", "feddf", "--distill-samples", str(a.distill_samples),
                                      "--ensemble", a.ensemble, "--distill-epochs", str(a.distill_epochs),
                                      "--distill-temperature", str(a.distill_temperature),
                                      "--distill-val", str(a.distill_val)])
    if accs is None:
        sys.exit(f"feddf failed: {err}")
    print("| architecture | FedDF (mixed clients) | FedAvg (all clients this architecture) |\n|---|---|---|")
    best = 0
    for m, acc in zip(a.feddf, accs):
        alone, s_alone, err = simulate(a, f"{work}/fedavg-{m.replace(':', '_')}", models=[m])
        best = max(best, alone or 0)
        print(f"| {m} | {acc * 100:.2f}% | " + (f"{alone * 100:.2f}% ({s_alone:.0f} s)" if alone else f"failed {err}") +
              " |", flush=True)
    print(f"FedDF's best model {max(accs) * 100:.2f}% vs FedAvg's best homogeneous setup {best * 100:.2f}%: "
          f"{(max(accs) - best) * 100:+.2f} points; FedDF took {secs:.0f} s")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="mlp:784-100-10")
    p.add_argument("--clients", type=int, default=20)
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--partition", default="dirichlet:0.5")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--train-samples", type=int, default=0)
    p.add_argument("--table", action="store_true")
    p.add_argument("--fractions", type=float, nargs="+", default=[0.2, 0.4])
    p.add_argument("--aggregators", nargs="+", default=AGGS)
    p.add_argument("--attacks", nargs="+", default=ATTACKS, help="of " + ", ".join(ATTACKS) +
                   "; none: no attacker, the rule still assuming the fraction's f")
    p.add_argument("--root-samples", type=int, default=1000, help="FLTrust's root set")
    p.add_argument("--bucket", type=int, default=0, help="bucketing before every robust rule (groups of this many)")
    p.add_argument("--nnm", action="store_true", help="nearest-neighbour mixing before every robust rule")
    p.add_argument("--local-kd-alpha", type=float, default=0,
                   help="every run's clients also distil from the round's global model, with this weight")
    p.add_argument("--server-momentum", type=float, default=0, help="FedAvgM on every run (0: none)")
    p.add_argument("--server-lr", type=float, default=1)
    p.add_argument("--feddf", nargs="+", metavar="MODEL")
    p.add_argument("--distill-samples", type=int, default=5000)
    p.add_argument("--ensemble", default="mean")
    p.add_argument("--distill-epochs", type=int, default=1)
    p.add_argument("--distill-temperature", type=float, default=1)
    p.add_argument("--distill-val", type=float, default=0,
                   help="share of the distillation set held out to pick each round's best epoch (0: none)")
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as work:
        (feddf if a.feddf else table if a.table else no_attack)(a, work)


if __name__ == "__main__":
    main()
