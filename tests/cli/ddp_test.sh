#!/usr/bin/env bash
# Data parallel training: 2 ranks (Gloo) with global batch B follow the loss curve of 1 rank with
# batch B and end with the same weights (float tolerance); the same job under PyTorch's real
# torchrun gives pare launch's result; a rank killed mid-run is restarted by pare launch
# --max-restarts 1 and every rank resumes from rank 0's checkpoint to the uninterrupted result;
# distillation runs data parallel too.
source "$(dirname "$0")/lib.sh"
make_npy_data "$work" 512
data="npy:$work/x.npy,$work/y.npy"
train=("$PARE" train --model mlp:784-32-10 --data "$data" --epochs 3 --batch-size 32 --seed 5 --threads 1
       --lr 1e-2 --quiet)

"${train[@]}" --metrics "$work/one.jsonl" --out "$work/one.onnx"
expect_exit 0 "" -- "$PARE" launch --nproc-per-node 2 -- "${train[@]}" --metrics "$work/two.jsonl" --out "$work/two.onnx"
compare_runs "$work/one.jsonl" "$work/two.jsonl" "$work/one.onnx" "$work/two.onnx" "2 ranks = 1 rank"

# The same job under torchrun (the .venv's PyTorch), with its agent-hosted store.
if "$PY" -c 'import torch.distributed.run' 2>/dev/null; then
  port=$(free_port)
  expect_exit 0 "" -- "$PY" -m torch.distributed.run --no_python --nproc_per_node 2 --redirects=1 --tee=1 \
    --master_port "$port" "${train[@]}" --metrics "$work/tr.jsonl" --out "$work/torchrun.onnx"
  cmp -s "$work/two.onnx" "$work/torchrun.onnx" && echo "ok: torchrun = pare launch (identical bytes)" \
    || compare_runs "$work/two.jsonl" "$work/tr.jsonl" "$work/two.onnx" "$work/torchrun.onnx" "torchrun = pare launch"
else
  echo "skip: $PY has no torch.distributed.run"
fi

# Rank 1 dies after rank 0's first checkpoint; the restarted group resumes from it.
cat >"$work/worker.sh" <<WEOF
#!/usr/bin/env bash
run=(${train[*]} --checkpoint $work/ck --checkpoint-every 7 --resume --metrics $work/restart.jsonl --out $work/restart.onnx)
if [ "\$TORCHELASTIC_RESTART_COUNT" = 0 ] && [ "\$RANK" = 1 ]; then
  "\${run[@]}" &
  while [ ! -f $work/ck ]; do sleep 0.02; done
  kill -9 \$! \$\$
fi
exec "\${run[@]}"
WEOF
chmod +x "$work/worker.sh"
expect_exit 0 "rank 1 .*SIGKILL.*restarting" -- "$PARE" launch --nproc-per-node 2 --max-restarts 1 -- "$work/worker.sh"
cmp -s "$work/two.onnx" "$work/restart.onnx" && echo "ok: restarted 2-rank run identical" \
  || compare_runs "$work/two.jsonl" "$work/restart.jsonl" "$work/two.onnx" "$work/restart.onnx" "restarted = uninterrupted"

# Distillation, data parallel: same as one process.
"$PARE" train --model mlp:784-64-10 --data "$data" --epochs 1 --batch-size 32 --quiet --no-val --out "$work/teacher.onnx"
kd=("$PARE" distill --teacher "$work/teacher.onnx" --student mlp:784-32-10 --data "$data" --epochs 3
    --batch-size 32 --seed 5 --threads 1 --lr 1e-2 --quiet)
"${kd[@]}" --metrics "$work/kd1.jsonl" --out "$work/kd1.onnx"
expect_exit 0 "" -- "$PARE" launch --nproc-per-node 2 -- "${kd[@]}" --metrics "$work/kd2.jsonl" --out "$work/kd2.onnx"
compare_runs "$work/kd1.jsonl" "$work/kd2.jsonl" "$work/kd1.onnx" "$work/kd2.onnx" "distill: 2 ranks = 1 rank"

expect_exit 2 "multiple of the world size 2" -- "$PARE" launch --nproc-per-node 2 -- "${train[@]:0:9}" 33 "${train[@]:10}" \
  --out "$work/bad.onnx"
no_file "$work/bad.onnx"
finish
