#!/usr/bin/env bash
# Peer test: PyTorch-exported models (torchvision resnet18 and mobilenet_v2, an
# nn.TransformerEncoder classifier; tests/peer/export_models.py) sharded over 2 ranks, tensor
# parallel and pipeline (`pare launch --nproc-per-node 2 -- pare run --parallel tp|pp`), give the
# whole model's outputs within 1e-5 and PyTorch's within 1e-4; each rank's share is printed.
#
# Env: PARE (the binary), PARE_PYTHON. Needs torch and torchvision in the peers' Python (tests/peers.sh).
# PARE_PEER_MODELS=resnet18,transformer limits the run.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PARE=${PARE:?set PARE to the pare binary}
source "$here/../peers.sh"
need_python "torch, torchvision, numpy"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/pare-sharded.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
"$PY" "$here/export_models.py" "$tmp" --only "${PARE_PEER_MODELS:-resnet18,mobilenet_v2,transformer}" >"$tmp/cases.txt"

failures=()
while read -r name model input expected _engines <&3; do
  case "$input" in *.b5.*) ;; *) continue ;; esac
  "$PARE" run "$model" -i "$input" -o "$tmp/$name.whole.npy"
  for mode in tp pp; do
    out="$tmp/$name.$mode.npy"
    if ! "$PARE" launch --nproc-per-node 2 -- "$PARE" run "$model" -i "$input" -o "$out" --parallel "$mode" \
        >"$tmp/log.txt" 2>&1; then
      echo "FAIL $name $mode: $(tail -c 2000 "$tmp/log.txt")"
      failures+=("$name $mode")
      continue
    fi
    share=$(grep -oE "rank [01]: [0-9]+ parameters \([^)]*\)" "$tmp/log.txt" | sed 's/.*(//; s/)//' | paste -sd' ' -)
    if "$PY" - "$tmp/$name.whole.npy" "$out" "$expected" "$name $mode" "$share" <<'PYEOF'; then :; else failures+=("$name $mode"); fi
import sys
import numpy as np
whole, sharded, torch_out = (np.load(p) for p in sys.argv[1:4])
d_whole = float(np.abs(sharded - whole).max())
d_torch = float(np.abs(sharded - torch_out).max())
ok = d_whole <= 1e-5 and d_torch <= 1e-4
print(f"{'ok  ' if ok else 'FAIL'} {sys.argv[4]}: max |sharded - whole| {d_whole:.2g}, |sharded - torch| {d_torch:.2g}; per rank: {sys.argv[5]}")
sys.exit(0 if ok else 1)
PYEOF
  done
done 3<"$tmp/cases.txt"

if ((${#failures[@]})); then
  echo "${#failures[@]} failure(s): ${failures[*]}"
  exit 1
fi
echo "all sharded models match"
