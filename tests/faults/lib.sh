# The fault campaign's helpers (issue 14): sourced by tests/faults/*_test.sh, on top of the CLI
# tests' lib.sh. The kill points are random and seeded: PARE_FAULT_SEED (printed) replays a run's
# choices, PARE_FAULT_KILLS sets how many kills a scenario makes (20).
source "$(dirname "${BASH_SOURCE[0]}")/../cli/lib.sh"
seed=${PARE_FAULT_SEED:-$(( $(date +%s%N) / 1000 % 1000000 ))}
kills=${PARE_FAULT_KILLS:-20}
RANDOM=$seed
echo "fault campaign: seed $seed (replay with PARE_FAULT_SEED=$seed), $kills kills per scenario"

now_ms() { date +%s%3N; }
# temporaries_of PATH...: how many PATH.tmp.PID.N files (write_file_atomic's) are there.
temporaries_of() { local n=0 p f; for p in "$@"; do for f in "$p".tmp.*; do [ -e "$f" ] && n=$((n + 1)); done; done; echo "$n"; }
# seconds MS: "1.234"
seconds() { printf '%d.%03d' $(( $1 / 1000 )) $(( $1 % 1000 )); }

# running PID: the child PID has not ended (kill -0 alone would also accept an unreaped zombie).
running() { local st; st=$(ps -o stat= -p "$1" 2>/dev/null) && [[ $st != Z* ]]; }

# no_orphans WHAT: no process still names the test's folder in its command line.
no_orphans() {
  for _ in $(seq 1 40); do pgrep -f "$work" >/dev/null || return 0; sleep 0.05; done
  fail "orphan processes after $1: $(pgrep -af "$work")"
  pkill -9 -f "$work" || true
}

# kill_campaign NAME EVERY CMD...: CMD (a pare command without --out, --checkpoint) runs once to
# the end; then as a chain of runs with a checkpoint every EVERY steps and --resume, each killed
# with SIGKILL at a random moment of the first 3/4 of the reference run's duration, until `kills`
# kills have landed before a run's end. Half of the runs that start a chain (no checkpoint yet)
# are killed instead at a random moment of the first quarter of that duration after their first
# checkpoint appears: on a loaded machine the start-up (libtorch, the teacher) can take most of
# the reference's time, and kills before any checkpoint test only the start. A run that ends
# before its kill, and the last run (not killed), must write the reference's model byte for byte:
# every resume of the chain, from every checkpoint, is checked by that. After each kill, what is
# at the model's path is the finished model or nothing, and what is at the checkpoint's path loads
# (the next run would refuse a damaged one, exit 2).
kill_campaign() {
  local name=$1 every=$2; shift 2
  local ref="$work/$name.ref.onnx" ck="$work/$name.ckpt" out="$work/$name.onnx" log="$work/$name.log" t0
  # The reference writes its checkpoints too, so that its duration is that of the runs to kill.
  t0=$(now_ms)
  "$@" --checkpoint "$work/$name.ref.ckpt" --checkpoint-every "$every" --out "$ref"
  local dur=$(( $(now_ms) - t0 ))
  echo "$name: the uninterrupted run took $(seconds $dur) s"
  (( dur > 400 )) || { fail "$name: the reference run took $dur ms, too short to kill inside"; return; }
  local landed=0 after_ck=0 ended=0 runs=0 delays=()
  while (( landed < kills )); do
    local delay=$(( 100 + (RANDOM * 32768 + RANDOM) % (dur * 3 / 4 - 100) )) rc=0
    runs=$((runs + 1))
    "$@" --checkpoint "$ck" --checkpoint-every "$every" --resume --out "$out" >"$log" 2>&1 &
    local pid=$! mark=""
    if [ ! -f "$ck" ] && (( RANDOM % 2 )); then
      while [ ! -f "$ck" ] && running "$pid"; do sleep 0.01; done
      delay=$(( (RANDOM * 32768 + RANDOM) % (dur / 4) )) mark="ck+"
    fi
    sleep "$(seconds $delay)"
    kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || rc=$?
    no_orphans "$name run $runs, killed at $mark$delay ms"
    if [ "$rc" = 0 ]; then  # it ended before the kill: a whole chain of resumes, checked
      cmp -s "$ref" "$out" && ended=$((ended + 1)) || fail "$name: a resumed chain ended with another model"
      rm -f "$out" "$ck"
      continue
    fi
    if [ "$rc" != 137 ]; then fail "$name run $runs: exit $rc before the kill:"$'\n'"$(cat "$log")"; return; fi
    [ -f "$out" ] && ! cmp -s "$ref" "$out" && fail "$name run $runs: a model that is not the finished one is visible"
    landed=$((landed + 1))
    delays+=("$mark$delay")
    [ -f "$ck" ] && after_ck=$((after_ck + 1))
  done
  local r0; r0=$(now_ms)
  local temporaries; temporaries=$(temporaries_of "$ck" "$out")
  expect_exit 0 "" -- "$@" --checkpoint "$ck" --checkpoint-every "$every" --resume --out "$out"
  local last=$(( $(now_ms) - r0 ))
  cmp -s "$ref" "$out" && ended=$((ended + 1)) || fail "$name: the last resume ended with another model"
  # A kill during a write leaves NAME.tmp.PID.N; the next write of NAME removes it (the last run
  # writes the model, and the checkpoint unless it resumed at its end).
  [ "$(temporaries_of "$out")" = 0 ] || fail "$name: the last run left the killed runs' temporary models: $(ls "$out".tmp.*)"
  echo "$name: $temporaries temporary file(s) left by the kills before the last run, $(temporaries_of "$ck" "$out") after it"
  echo "$name: $kills SIGKILLs landed, at ${delays[*]} ms (ck+: after the chain's first checkpoint), in $runs runs; $after_ck left a checkpoint to resume" \
       "from; $ended chain(s) of resumes ended, each with the uninterrupted model byte for byte; the last resume took" \
       "$(seconds $last) s"
  (( after_ck * 3 >= kills )) || fail "$name: only $after_ck of $kills kills came after a checkpoint: the campaign tested little"
  rm -f "$ck" "$out" "$ck".tmp.* "$out".tmp.*
}
