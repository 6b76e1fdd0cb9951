#!/usr/bin/env bash
# SIGKILL mid-epoch, then --resume: the final model is bit-for-bit the uninterrupted run's.
source "$(dirname "$0")/lib.sh"
make_npy_data "$work" 1024
common=(train --model cnn --data "npy:$work/x.npy,$work/y.npy" --epochs 3 --batch-size 64 --lr 2e-3
        --schedule cosine --no-val --quiet --threads 1)
args=("${common[@]}" --seed 5)

"$PARE" "${args[@]}" --out "$work/ref.onnx" --metrics "$work/ref.jsonl"

# Kill the run as soon as its first mid-epoch checkpoint (step 4 of 16 per epoch) lands.
"$PARE" "${args[@]}" --checkpoint "$work/run.ckpt" --checkpoint-every 4 --out "$work/run.onnx" \
  --metrics "$work/run.jsonl" &
pid=$!
for _ in $(seq 1 600); do
  [ -f "$work/run.ckpt" ] && break
  sleep 0.05
done
kill -9 "$pid" 2>/dev/null || true
wait "$pid" 2>/dev/null || true
[ -f "$work/run.ckpt" ] || fail "no checkpoint was written"
if [ -f "$work/run.onnx" ]; then fail "the run finished before it could be killed: the test did not test resume"; fi
ls "$work"/run.ckpt.tmp.* >/dev/null 2>&1 && fail "a temporary checkpoint was left as the checkpoint"

expect_exit 0 "" -- "$PARE" "${args[@]}" --checkpoint "$work/run.ckpt" --checkpoint-every 4 --resume \
  --out "$work/run.onnx" --metrics "$work/run.jsonl"
if cmp -s "$work/ref.onnx" "$work/run.onnx"; then echo "ok: resumed model identical"; else fail "resumed model differs"; fi
# Loss columns match too (seconds and samples/s may differ).
strip() { "$PY" -c "import json,sys; [print(json.dumps({k: v for k, v in json.loads(l).items() if 'second' not in k and 'per_s' not in k})) for l in open(sys.argv[1])]" "$1"; }
if [ "$(strip "$work/ref.jsonl")" == "$(strip "$work/run.jsonl")" ]; then echo "ok: metrics identical"; else
  fail "metrics differ:"$'\n'"$(cat "$work/ref.jsonl")"$'\n'"$(cat "$work/run.jsonl")"; fi

# A checkpoint from other options is refused, naming the file.
expect_exit 2 "run.ckpt" -- "$PARE" "${common[@]}" --seed 6 --checkpoint "$work/run.ckpt" --resume --out "$work/o.onnx"
# A damaged checkpoint (one flipped byte, or cut short) is refused naming the file and why: never
# loaded half, never silently replaced by a fresh run, and left as it was.
"$PY" - "$work/run.ckpt" "$work/flip.ckpt" "$work/short.ckpt" <<'PYEOF'
import sys
b = bytearray(open(sys.argv[1], "rb").read())
short = bytes(b[: len(b) * 2 // 3])
b[len(b) // 2] ^= 0x01
open(sys.argv[2], "wb").write(b)
open(sys.argv[3], "wb").write(short)
PYEOF
for damaged in flip short; do
  cp "$work/$damaged.ckpt" "$work/$damaged.copy"
  expect_exit 2 "$damaged.ckpt' is not a usable pare checkpoint: .*(checksum does not match|truncated).*nothing was loaded" -- \
    "$PARE" "${args[@]}" --checkpoint "$work/$damaged.ckpt" --checkpoint-every 4 --resume --out "$work/o.onnx"
  cmp -s "$work/$damaged.ckpt" "$work/$damaged.copy" && echo "ok: $damaged.ckpt left as it was" \
    || fail "$damaged.ckpt was changed"
done
no_file "$work/o.onnx"
echo garbage > "$work/bad.ckpt"
expect_exit 2 "bad.ckpt" -- "$PARE" "${args[@]}" --checkpoint "$work/bad.ckpt" --resume --out "$work/o.onnx"
no_file "$work/o.onnx"
finish
