#!/usr/bin/env bash
# pare federate: a simulation end to end (server and client processes over loopback gRPC, a
# Byzantine client, the round log), and the refusals of bad flags and data (exit 2, nothing run).
source "$(dirname "$0")/lib.sh"
make_npy_data "$work" 600
data="npy:$work/x.npy,$work/y.npy"

# 5 clients, one flipping its update's sign, under the coordinate median.
out=$("$PARE" federate simulate -m mlp:784-16-10 -d "$data" --clients 5 --rounds 3 --partition iid \
  --aggregator median --byzantine 1 --attack sign-flip --out "$work/sim" --json 2>"$work/sim.err") ||
  fail "simulate failed: $(cat "$work/sim.err")"
"$PY" - "$out" "$work/sim" <<'PYEOF' || fail "simulate's summary or round log is wrong"
import json, sys
s = json.loads(sys.argv[1]); d = sys.argv[2]
assert s["rounds"] == 3 and s["aggregator"] == "median" and s["byzantine"] == 1 and s["failed_clients"] == 0, s
assert 0 <= s["val_accuracy"] <= 1, s
rounds = [json.loads(l) for l in open(f"{d}/server/rounds.jsonl")]
assert [r["round"] for r in rounds] == [1, 2, 3], rounds
for r in rounds:
    assert r["answered"] == [f"client-0{k}" for k in range(5)] and not r["refused"] and not r["skipped"], r
state = json.load(open(f"{d}/server/server.json"))
assert state["round"] == 3 and state["models"] == ["round-3.onnx"], state
PYEOF
[ -f "$work/sim/server/model.onnx" ] && echo "ok: simulate wrote the model" || fail "no server/model.onnx"
grep -q "update accepted" "$work/sim/logs/client-00.log" || fail "client-00's log: $(cat "$work/sim/logs/client-00.log")"
expect_exit 0 "accuracy" -- "$PARE" eval "$work/sim/server/model.onnx" -d "$data"

# Local training that also distils from the round's global model.
expect_exit 0 "final val acc" -- "$PARE" federate simulate -m mlp:784-16-10 -d "$data" --clients 3 --rounds 2 \
  --partition iid --local-kd-alpha 0.5 --local-kd-temperature 2 --out "$work/kd"
expect_exit 2 "--local-kd-alpha must be in \[0, 1\]" -- "$PARE" federate simulate -m mlp:784-16-10 -d "$data" \
  --clients 3 --local-kd-alpha 2 --out "$work/bad8"

# Nearest-neighbour mixing reaches the server process: its start line names the pre-step and f.
expect_exit 0 "aggregator median \(f = 1, nearest-neighbour mixing\)" -- "$PARE" federate simulate -m mlp:784-16-10 \
  -d "$data" --clients 4 --rounds 1 --partition iid --aggregator median --byzantine 1 --attack sign-flip --nnm \
  --out "$work/nnm"

# FedDF: clients of two architectures (client k trains model k mod 2); both models distilled each
# round from the ensemble of the client models on 100 held-out inputs.
out=$("$PARE" federate simulate --mode feddf -m mlp:784-16-10 -m mlp:784-32-16-10 -d "$data" --clients 4 --rounds 2 \
  --partition iid --distill-samples 100 --ensemble median --out "$work/fdf" --json 2>"$work/fdf.err") ||
  fail "feddf simulate failed: $(cat "$work/fdf.err")"
"$PY" - "$out" "$work/fdf" <<'PYEOF' || fail "feddf's summary or round log is wrong: $out"
import json, os, sys
s = json.loads(sys.argv[1]); d = sys.argv[2]
assert s["mode"] == "feddf" and len(s["model_accuracy"]) == 2, s
rounds = [json.loads(l) for l in open(f"{d}/server/rounds.jsonl")]
assert len(rounds) == 2 and all(len(r["model_accuracy"]) == 2 for r in rounds), rounds
assert os.path.exists(f"{d}/server/model.onnx") and os.path.exists(f"{d}/server/model-1.onnx")
assert os.path.exists(f"{d}/data/server-distill.x.npy") and not os.path.exists(f"{d}/data/server-distill.y.npy")
PYEOF
expect_exit 0 "parameters" -- "$PARE" inspect "$work/fdf/server/model-1.onnx"

# Bad flags: exit 2 before anything starts, naming the flag.
sim=("$PARE" federate simulate -m mlp:784-16-10 -d "$data" --clients 4 --rounds 1)
expect_exit 2 "--aggregator must be one of fedavg, median" -- "${sim[@]}" --aggregator mean --out "$work/bad1"
expect_exit 2 "--assume-byzantine is too large for 4 clients per round: bulyan needs n >= 7" -- \
  "${sim[@]}" --aggregator bulyan --byzantine 1 --attack sign-flip --out "$work/bad2"
expect_exit 2 "dirichlet:0" -- "${sim[@]}" --partition dirichlet:0 --out "$work/bad3"
expect_exit 2 "--attack is needed with --byzantine" -- "${sim[@]}" --byzantine 1 --out "$work/bad4"
expect_exit 2 "attack" -- "${sim[@]}" --byzantine 1 --attack nonsense --out "$work/bad5"
expect_exit 2 "--trim must be in \[0, 0.5\)" -- "${sim[@]}" --aggregator trimmed-mean --trim 0.5 --out "$work/bad6"
expect_exit 2 "--assume-byzantine is too large for 4 clients per round: fedavg with nearest-neighbour mixing needs n >= 5 for f = 2" -- \
  "${sim[@]}" --nnm --assume-byzantine 2 --out "$work/bad9"
expect_exit 2 "--nnm \(nearest-neighbour mixing\) and bucketing are two ways" -- "${sim[@]}" --nnm --bucket 2 --out "$work/bad10"
for d in bad1 bad2 bad3 bad4 bad5 bad6 bad7 bad8 bad9 bad10; do [ -e "$work/$d" ] && fail "$d: a refused simulation left $work/$d"; done
expect_exit 2 "--model is given 2 times: fedavg trains one model" -- "$PARE" federate server -m mlp:784-16-10 \
  -m lenet5 --dir "$work/srv"
expect_exit 2 "--distill-data is needed by mode feddf" -- "$PARE" federate server --mode feddf -m mlp:784-16-10 \
  --dir "$work/srv"
expect_exit 2 "--distill-samples must be in \[1, 600\)" -- "${sim[@]}" --mode feddf --distill-samples 600 --out "$work/bad7"
expect_exit 2 "missing.onnx" -- "$PARE" federate server -m "$work/missing.onnx" --dir "$work/srv"
expect_exit 2 "--root-data is needed by the fltrust aggregator" -- \
  "$PARE" federate server -m mlp:784-16-10 --dir "$work/srv" --aggregator fltrust
expect_exit 2 "--partition-index must be in \[0, 3\)" -- "$PARE" federate client --server 127.0.0.1:1 --id a \
  -d "$data" --partition iid --partitions 3 --partition-index 3
# A client whose server never comes: exit 1 after --server-timeout, naming the address.
expect_exit 1 "127.0.0.1:$(free_port)|failed" -- "$PARE" federate client --server "127.0.0.1:$(free_port)" --id a \
  -d "$data" --server-timeout 1
finish
