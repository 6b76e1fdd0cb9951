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
echo garbage > "$work/bad.ckpt"
expect_exit 2 "bad.ckpt" -- "$PARE" "${args[@]}" --checkpoint "$work/bad.ckpt" --resume --out "$work/o.onnx"
no_file "$work/o.onnx"
finish
