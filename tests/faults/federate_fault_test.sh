#!/usr/bin/env bash
# pare federate under faults (issue 16): a client killed in the middle of the run, a client that
# hangs (SIGSTOP: alive, connected, never answering), and the server killed with SIGKILL and started
# again. The documented semantics: a round waits for its sampled clients up to --round-timeout,
# then goes on with those that answered; a client not heard from for a round timeout is no longer
# sampled; a restarted server resumes after its last checkpointed round (the round it was killed in
# runs again), and the clients, retrying, carry on with it.
source "$(dirname "$0")/lib.sh"
make_npy_data "$work" 900
data="npy:$work/x.npy,$work/y.npy"
wait_round() {  # wait_round DIR R: until DIR/rounds.jsonl has round R (60 s at most)
  for _ in $(seq 1 1200); do
    [ -f "$1/rounds.jsonl" ] && [ "$(wc -l <"$1/rounds.jsonl")" -ge "$2" ] && return 0
    sleep 0.05
  done
  fail "round $2 never finished in $1"; return 1
}
client() {  # client ID INDEX PORT: a client on part INDEX of 3
  "$PARE" federate client --server "127.0.0.1:$3" --id "$1" -d "$data" --partition iid --partitions 3 \
    --partition-index "$2" --threads 1 --server-timeout 60 >"$work/$1.log" 2>&1 &
}

# start_server DIR ROUNDS CLIENTS TIMEOUT LOG: a server on a fresh port ($port) in the background
# ($spid); its command line stays in ${server[@]} for a restart.
start_server() {
  port=$(free_port)
  server=("$PARE" federate server -m mlp:784-16-10 --dir "$1" --rounds "$2" --clients "$3" --round-timeout "$4"
          --listen "127.0.0.1:$port" --val-data "$data" --val-split train --threads 1)
  "${server[@]}" >"$5" 2>&1 &
  spid=$!
}

# 1. A client killed and a client hung, both during round 2.
start_server "$work/a" 4 3 2 "$work/a.log"
client c0 0 "$port"; c0=$!
client c1 1 "$port"; c1=$!
client c2 2 "$port"; c2=$!
wait_round "$work/a" 1
kill -9 "$c1"
kill -STOP "$c2"
rc=0; wait "$spid" || rc=$?
[ "$rc" = 0 ] && echo "ok: the server finished without c1 and c2" || fail "server exit $rc: $(cat "$work/a.log")"
wait "$c0" || fail "c0 did not exit cleanly: $(cat "$work/c0.log")"
kill -9 "$c2" 2>/dev/null || true
"$PY" - "$work/a/rounds.jsonl" <<'PYEOF' || fail "round log of the killed/hung run: $(cat "$work/a/rounds.jsonl")"
import json, sys
rounds = [json.loads(l) for l in open(sys.argv[1])]
assert [r["round"] for r in rounds] == [1, 2, 3, 4]
assert rounds[0]["answered"] == ["c0", "c1", "c2"], rounds[0]
# c1 and c2 were lost while round 2 ran (each may have answered it first): from round 3 on only c0
# answers, and no round is skipped.
assert all(r["answered"] == ["c0"] for r in rounds[2:]) and "c0" in rounds[1]["answered"], rounds
assert not any(r["skipped"] for r in rounds), rounds
# A round that sampled a lost client waited its deadline; by round 4 they are no longer sampled (not
# heard from for a round timeout), so it does not wait.
waited = [r for r in rounds[1:3] if set(r["sampled"]) != set(r["answered"])]
assert waited and all(r["seconds"] >= 1.9 for r in waited), rounds
assert rounds[3]["sampled"] == ["c0"] and rounds[3]["seconds"] < 1.9, rounds[3]
print("ok: rounds %s waited %s s for the lost clients; round 4 sampled only c0 (%.1f s)" %
      ([r["round"] for r in waited], [round(r["seconds"], 1) for r in waited], rounds[3]["seconds"]))
PYEOF

# 2. The server killed with SIGKILL after round 2 and started again on the same port.
start_server "$work/b" 5 2 30 "$work/b1.log"
client d0 0 "$port"; d0=$!
client d1 1 "$port"; d1=$!
wait_round "$work/b" 2
kill -9 "$spid"; wait "$spid" 2>/dev/null || true
[ "$(temporaries_of "$work/b/server.json" "$work/b/rounds.jsonl")" = 0 ] || echo "note: the kill left a temporary file"
sleep 1  # the clients see the server gone and retry
expect_exit 0 "resuming from .*server.json: [2-5] of 5 rounds done" -- "${server[@]}"
wait "$d0" || fail "d0 did not exit cleanly: $(cat "$work/d0.log")"
wait "$d1" || fail "d1 did not exit cleanly: $(cat "$work/d1.log")"
"$PY" - "$work/b" <<'PYEOF' || fail "round log of the restarted server: $(cat "$work/b/rounds.jsonl")"
import json, os, sys
d = sys.argv[1]
rounds = [json.loads(l) for l in open(f"{d}/rounds.jsonl")]
assert [r["round"] for r in rounds] == [1, 2, 3, 4, 5], [r["round"] for r in rounds]
assert all(r["answered"] == ["d0", "d1"] for r in rounds), rounds
left = sorted(f for f in os.listdir(d) if f.endswith(".onnx"))
assert left == ["model.onnx", "round-5.onnx"], left
print("ok: the restarted server ran rounds 1-5 once each; clients d0, d1 answered every round")
PYEOF
[ "$(temporaries_of "$work/b/server.json" "$work/b/rounds.jsonl" "$work/b/model.onnx")" = 0 ] ||
  fail "the restarted server left temporary files"
no_orphans "the federated runs"
finish
