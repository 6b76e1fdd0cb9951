#!/usr/bin/env bash
# A rank that dies inside a collective, and a rank that hangs (SIGSTOP), in a 2-rank data-parallel
# job under pare launch and under PyTorch's torchrun: the job ends (or, with --max-restarts,
# restarts) within the bound that --timeout sets, naming the rank, with no orphan process and no
# partial checkpoint; resuming from what is left ends byte-identical to the uninterrupted job.
source "$(dirname "$0")/lib.sh"
make_npy_data "$work" 1024
T=5   # --timeout: how long a rank waits for the others inside a collective
job=("$PARE" train --model mlp:784-128-10 --data "npy:$work/x.npy,$work/y.npy" --epochs 12 --batch-size 32 --seed 4
     --no-val --quiet --threads 1 --timeout "$T" --checkpoint-every 8)
"$PARE" launch --nproc-per-node 2 -- "${job[@]}" --checkpoint "$work/ref.ckpt" --out "$work/ref.onnx"
cat >"$work/worker.sh" <<WEOF
#!/usr/bin/env bash
echo \$\$ > "$work/pid.\$RANK.\${TORCHELASTIC_RESTART_COUNT:-0}"
exec ${job[*]} --checkpoint "$work/ck" "\$@"
WEOF
chmod +x "$work/worker.sh"
torchrun=()
if "$PY" -c 'import torch.distributed.run' 2>/dev/null; then
  torchrun=("$PY" -m torch.distributed.run --no_python --nproc_per_node 2 --redirects=1 --tee=1 --master_port)
fi
wait_for() { for _ in $(seq 1 600); do [ -e "$1" ] && return 0; sleep 0.05; done; fail "$2: $1 never appeared"; return 1; }

# scenario NAME FAULT WANT_RC PATTERN BOUND_S LAUNCHER...: runs the job under LAUNCHER, and once its
# first checkpoint exists does FAULT to rank 1: die (stopped so that rank 0 waits in the gradient
# all-reduce, then SIGKILL) or hang (SIGSTOP). Checks the exit code, the message, the time from the
# fault to the exit (or, for WANT_RC 0, to the restart), orphans and the checkpoint.
scenario() {
  local name=$1 fault=$2 want=$3 pattern=$4 bound=$5; shift 5
  rm -f "$work"/pid.* "$work/ck" "$work/out.onnx"
  "$@" "$work/worker.sh" --resume --out "$work/out.onnx" >"$work/$name.log" 2>&1 &
  local lp=$! t0 rc=0 took
  wait_for "$work/ck" "$name" || { kill -9 "$lp"; return; }
  local p1; p1=$(cat "$work/pid.1.0")
  kill -STOP "$p1"
  if [ "$fault" = die ]; then sleep 1; kill -9 "$p1"; fi
  t0=$(now_ms)
  if [ "$want" = 0 ]; then
    wait_for "$work/pid.0.1" "$name: the restart"
    took=$(( $(now_ms) - t0 ))
  fi
  wait "$lp" || rc=$?
  [ "$want" = 0 ] || took=$(( $(now_ms) - t0 ))
  local what="exit"; [ "$want" = 0 ] && what="restart"
  echo "$name: fault to $what $(seconds "$took") s (bound $bound s), exit code $rc"
  [ "$rc" = "$want" ] || fail "$name: exit code $rc, want $want:"$'\n'"$(tail -20 "$work/$name.log")"
  grep -qE -- "$pattern" "$work/$name.log" && echo "ok: $name: /$pattern/" \
    || fail "$name: the output lacks /$pattern/:"$'\n'"$(tail -20 "$work/$name.log")"
  (( took <= bound * 1000 )) || fail "$name: took $(seconds "$took") s, more than $bound s"
  no_orphans "$name"
  ls "$work"/ck.tmp.* >/dev/null 2>&1 && fail "$name: a temporary checkpoint is left: $(ls "$work"/ck.tmp.*)"
  if [ "$want" != 0 ]; then  # what is left resumes to the uninterrupted result
    expect_exit 0 "" -- "$PARE" launch --nproc-per-node 2 -- "$work/worker.sh" --resume --out "$work/out.onnx"
  fi
  cmp -s "$work/ref.onnx" "$work/out.onnx" && echo "ok: $name: the resumed job is identical" \
    || fail "$name: the resumed job differs from the uninterrupted one"
}

scenario launch-die die 1 "rank 1 .*signal 9 \(SIGKILL\)" "$T" "$PARE" launch --nproc-per-node 2 --
scenario launch-hang hang 1 "rank 0 .*did not take part within the timeout of 5 s.*rank 1 \(pid [0-9]+\) was stopped" \
  $((T + 3)) "$PARE" launch --nproc-per-node 2 --
scenario launch-hang-restart hang 0 "rank 1 \(pid [0-9]+\) was stopped.*restarting all workers" $((T + 3)) \
  "$PARE" launch --nproc-per-node 2 --max-restarts 1 --
if [ ${#torchrun[@]} -gt 0 ]; then
  # torchrun polls its workers every 5 s (--monitor_interval), and gives a worker it stops 30 s
  # between SIGTERM and SIGKILL, which a stopped one needs: pare cannot shorten that.
  scenario torchrun-die die 1 "exitcode *: -9" $((T + 8)) "${torchrun[@]}" "$(free_port)"
  scenario torchrun-hang hang 1 "rank 0 of 2: .*did not take part within the timeout of 5 s" $((T + 45)) \
    "${torchrun[@]}" "$(free_port)"
else
  echo "skip: $PY has no torch.distributed.run"
fi
finish
