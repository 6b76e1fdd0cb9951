# Shared helpers for the CLI tests: sourced, not run.
set -euo pipefail
: "${PARE:?PARE must point at the pare binary}"
source "$(dirname "${BASH_SOURCE[0]}")/../peers.sh"  # PY: the peers' Python (PyTorch, onnx, numpy)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0

fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

# expect_exit CODE PATTERN -- CMD...: runs CMD, checks the exit code and that stderr+stdout match PATTERN.
expect_exit() {
  local code=$1 pattern=$2; shift 3
  local out rc=0
  out=$("$@" 2>&1) || rc=$?
  if [ "$rc" -ne "$code" ]; then fail "exit $rc (want $code): $*"$'\n'"$out"; return; fi
  if ! grep -qE -- "$pattern" <<<"$out"; then fail "output lacks /$pattern/: $*"$'\n'"$out"; return; fi
  echo "ok: exit $code /$pattern/: ${*:1:3}"
}

# no_file PATH: the command must not have left PATH (or a temporary sibling) behind.
no_file() {
  if ls "$1"* >/dev/null 2>&1; then fail "left a file behind: $(ls "$1"*)"; else echo "ok: no $1"; fi
}

# expect_resume_identical NAME EVERY PARE_ARGS...: runs pare with PARE_ARGS (without --out) to the
# end, then again with a checkpoint every EVERY steps, kills that run with SIGKILL once the
# checkpoint exists, resumes it with --resume, and checks both runs wrote identical models.
expect_resume_identical() {
  local name=$1 every=$2; shift 2
  local ck="$work/$name.ckpt" ref="$work/$name.ref.onnx" run="$work/$name.run.onnx"
  "$PARE" "$@" --out "$ref"
  "$PARE" "$@" --checkpoint "$ck" --checkpoint-every "$every" --out "$run" &
  local pid=$!
  for _ in $(seq 1 600); do [ -f "$ck" ] && break; sleep 0.02; done
  # Without a checkpoint before the kill, "--resume" below would be a fresh run and prove nothing.
  [ -f "$ck" ] || fail "$name: no checkpoint was written before the kill"
  kill -9 "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  [ -f "$run" ] && fail "$name: the run finished before it could be killed"
  expect_exit 0 "" -- "$PARE" "$@" --checkpoint "$ck" --checkpoint-every "$every" --resume --out "$run"
  cmp -s "$ref" "$run" && echo "ok: $name resumed identical" || fail "$name: the resumed run differs"
}

# compare_runs A.jsonl B.jsonl A.onnx B.onnx LABEL: the 3 epochs' metrics and the final logits (on
# $work/x.npy) agree within float tolerance.
compare_runs() {
  "$PY" - "$@" "$work/x.npy" <<'PYEOF' && echo "ok: $5" || fail "$5"
import json, subprocess, sys, os
import numpy as np
a, b, ma, mb, label, x = sys.argv[1:7]
ra = [json.loads(l) for l in open(a)]; rb = [json.loads(l) for l in open(b)]
assert len(ra) == len(rb) == 3, (len(ra), len(rb))
for ea, eb in zip(ra, rb):
    for k in ("train_loss", "train_accuracy", "val_loss", "val_accuracy", "samples", "steps"):
        if k in ea:
            assert abs(ea[k] - eb[k]) <= 1e-5 * max(1, abs(ea[k])), (label, ea["epoch"], k, ea[k], eb[k])
outs = []
for m in (ma, mb):
    o = m + ".out.npy"
    subprocess.run([os.environ["PARE"], "run", m, "--input", x, "--output", o], check=True)
    outs.append(np.load(o))
d = float(np.abs(outs[0] - outs[1]).max())
assert d <= 1e-4, (label, "max logit diff", d)
print(f"{label}: losses {[round(e['train_loss'], 6) for e in ra]} vs {[round(e['train_loss'], 6) for e in rb]}, max logit diff {d:.2g}")
PYEOF
}

# free_port: a TCP port free on 127.0.0.1 now (for torchrun's --master_port).
free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

finish() {
  if [ "$fails" -ne 0 ]; then echo "$fails check(s) failed"; exit 1; fi
  echo "all checks passed"
}

# make_npy_data DIR N: x [N,1,28,28] float32 in [0,1], y [N] int64 in 0..9.
make_npy_data() {
  "$PY" - "$1" "$2" <<'PYEOF'
import sys, numpy as np
d, n = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(0)
np.save(f"{d}/x.npy", rng.random((n, 1, 28, 28), dtype=np.float32))
np.save(f"{d}/y.npy", rng.integers(0, 10, n).astype(np.int64))
PYEOF
}
