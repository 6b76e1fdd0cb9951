#!/usr/bin/env bash
# pare launch: torchrun's environment for each worker, rank-prefixed output, a failed or killed
# worker stops the others and names the rank (within 10 s), --max-restarts resumes a training run
# from its checkpoint to the same result, SIGTERM is forwarded, and no worker outlives the job.
source "$(dirname "$0")/lib.sh"
tag="pare-launch-test-$$"   # in every worker's command line, to look for orphans

no_orphans() {
  sleep 0.3
  if pgrep -f "$tag" >/dev/null; then fail "orphan workers: $(pgrep -af "$tag")"; pkill -9 -f "$tag" || true
  else echo "ok: no orphans ($1)"; fi
}

# 1. The environment, one prefixed line per rank.
out=$("$PARE" launch --nproc-per-node 2 --master-port 29731 -- sh -c \
  'echo "env $RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $GROUP_RANK $MASTER_ADDR $MASTER_PORT $TORCHELASTIC_RESTART_COUNT $OMP_NUM_THREADS"; echo to-stderr >&2' 2>/dev/null)
for r in 0 1; do
  grep -qx "\[rank$r\]: env $r $r 2 2 0 127.0.0.1 29731 0 1" <<<"$out" && echo "ok: rank $r env" || fail "rank $r env: $out"
done
err=$("$PARE" launch --nproc-per-node 2 -- sh -c 'echo to-stderr >&2' 2>&1 >/dev/null)
[ "$(grep -c '^\[rank[01]\]: to-stderr$' <<<"$err")" = 2 ] && echo "ok: stderr prefixed" || fail "stderr: $err"

# 2. A failing worker stops the others; the message names rank 1 and its exit code, which pare
# launch exits with.
start=$(date +%s)
expect_exit 3 "rank 1 .*failed with exit code 3" -- "$PARE" launch --nproc-per-node 3 -- sh -c \
  "if [ \$RANK = 1 ]; then exit 3; fi; exec sleep 60 # $tag"
(( $(date +%s) - start <= 10 )) && echo "ok: stopped within 10 s" || fail "took $(( $(date +%s) - start )) s"
no_orphans "exit 3"

# 3. A worker killed with SIGKILL from outside: named with its signal, others stopped.
"$PARE" launch --nproc-per-node 2 -- sh -c "echo \$\$ > $work/pid.\$RANK; exec sleep 60 # $tag" \
  >"$work/kill.out" 2>&1 &
lpid=$!
for _ in $(seq 1 200); do [ -s "$work/pid.1" ] && break; sleep 0.05; done
start=$(date +%s)
kill -9 "$(cat "$work/pid.1")"
rc=0; wait "$lpid" || rc=$?
[ "$rc" = 1 ] && grep -q "rank 1 .*signal 9 (SIGKILL)" "$work/kill.out" && echo "ok: SIGKILL named" \
  || fail "rc $rc: $(cat "$work/kill.out")"
(( $(date +%s) - start <= 10 )) && echo "ok: stopped within 10 s" || fail "took $(( $(date +%s) - start )) s"
no_orphans "SIGKILL"

# 4. The worker's own error message (TORCHELASTIC_ERROR_FILE) reaches the summary.
expect_exit 2 "rank 0 .*exit code 2: pare: .*missing.onnx" -- "$PARE" launch -- "$PARE" inspect "$work/missing.onnx"

# 5. SIGTERM to the launcher is forwarded; it exits 143 and leaves nothing behind.
"$PARE" launch --nproc-per-node 2 -- sh -c "echo up; exec sleep 60 # $tag" >"$work/term.out" 2>&1 &
lpid=$!
for _ in $(seq 1 200); do [ "$(grep -c up "$work/term.out" || true)" = 2 ] && break; sleep 0.05; done
kill -TERM "$lpid"
rc=0; wait "$lpid" || rc=$?
[ "$rc" = 143 ] && echo "ok: SIGTERM -> 143" || fail "SIGTERM: rc $rc: $(cat "$work/term.out")"
no_orphans "SIGTERM"

# 6. --max-restarts 1: the first attempt dies after its first checkpoint, the restarted worker
# resumes from it, and the model is byte-identical to an uninterrupted run's.
make_npy_data "$work" 256
train=("$PARE" train --model mlp:784-32-10 --data "npy:$work/x.npy,$work/y.npy" --epochs 3 --batch-size 16
       --seed 5 --no-val --quiet --threads 1)
"${train[@]}" --out "$work/ref.onnx"
cat >"$work/worker.sh" <<WEOF
#!/usr/bin/env bash
# $tag
if [ "\$TORCHELASTIC_RESTART_COUNT" = 0 ]; then
  ${train[*]} --checkpoint $work/ck --checkpoint-every 5 --out $work/run.onnx &
  p=\$!
  while [ ! -f $work/ck ]; do sleep 0.02; done
  kill -9 \$p; exit 1
fi
exec ${train[*]} --checkpoint $work/ck --checkpoint-every 5 --resume --out $work/run.onnx
WEOF
chmod +x "$work/worker.sh"
expect_exit 0 "restarting all workers \(restart 1 of 1\)" -- "$PARE" launch --max-restarts 1 -- "$work/worker.sh"
cmp -s "$work/ref.onnx" "$work/run.onnx" && echo "ok: restarted run identical" || fail "restarted run differs"
no_orphans "restart"

# 7. Bad usage exits 2 naming the problem.
expect_exit 2 "no-such-program" -- "$PARE" launch -- no-such-program
expect_exit 2 "nproc-per-node" -- "$PARE" launch --nproc-per-node 0 -- true
expect_exit 2 "master-port" -- "$PARE" launch --nnodes 2 --node-rank 1 -- true
expect_exit 2 "rendezvous" -- "$PARE" launch --nnodes 2 --master-port 29555 --max-restarts 1 -- true
expect_exit 2 "command" -- "$PARE" launch --nproc-per-node 2
finish
