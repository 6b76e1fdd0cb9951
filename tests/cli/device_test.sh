#!/usr/bin/env bash
# --device, --precision and --backend on a machine without a GPU (this one): every command refuses a
# GPU with exit 2 saying why (a CUDA build, pare's ordinary one: libtorch sees no GPU; a build
# without CUDA: it has none), cpu is the default bit for bit, bf16 trains, and a checkpoint whose
# tensors were written on cuda:0 resumes on the CPU to the uninterrupted model.
source "$(dirname "$0")/lib.sh"
if "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  echo "skip: this machine has a GPU (tests/gpu covers it)"; exit 77
fi
if "$PARE" --version 2>&1 | grep -q 'CUDA yes'; then
  no_gpu="libtorch has CUDA but sees no GPU" no_nccl="--backend nccl reduces CUDA tensors, but the device is cpu"
else
  no_gpu="this pare is built against libtorch .* without CUDA" no_nccl="--backend nccl: this pare is built without c10d's NCCL"
fi
make_npy_data "$work" 512
data="npy:$work/x.npy,$work/y.npy"
train=(train --model mlp:784-32-10 --data "$data" --batch-size 64 --no-val --quiet --threads 1 --seed 3)
"$PARE" "${train[@]}" --epochs 1 --out "$work/t.onnx"
"$PY" -c "import numpy as np; np.save('$work/in.npy', np.load('$work/x.npy')[:4])"

# A GPU asked of a CPU build: exit 2, the reason, and no output file.
for dev in cuda cuda:0 cuda:1; do
  expect_exit 2 "--device $dev: $no_gpu" -- \
    "$PARE" "${train[@]}" --epochs 1 --device "$dev" --out "$work/o.onnx"
done
expect_exit 2 "--device .*$no_gpu" -- "$PARE" distill --teacher "$work/t.onnx" --student mlp:784-16-10 \
  --data "$data" --max-steps 2 --no-val --quiet --device cuda --out "$work/o.onnx"
expect_exit 2 "--device .*$no_gpu" -- "$PARE" prune "$work/t.onnx" --data "$data" --epochs 1 --device cuda \
  --quiet --out "$work/o.onnx"
expect_exit 2 "--device .*$no_gpu" -- "$PARE" quantize "$work/t.onnx" --calib "$data" --qat --epochs 1 \
  --data "$data" --device cuda --quiet --out "$work/o.onnx"
expect_exit 2 "--device .*$no_gpu" -- "$PARE" eval "$work/t.onnx" --data "$data" --split train --device cuda
expect_exit 2 "--device .*$no_gpu" -- "$PARE" run "$work/t.onnx" --input "$work/in.npy" \
  --output "$work/o.npy" --device cuda
expect_exit 2 "--engine rt \(pare_rt\) runs on the CPU" -- "$PARE" run "$work/t.onnx" --engine rt \
  --input "$work/in.npy" --output "$work/o.npy" --device cuda:0
expect_exit 2 "--device .*$no_gpu" -- "$PARE" teacher-cache --teacher "$work/t.onnx" --data "$data" \
  --device cuda --quiet --out "$work/o.cache"
expect_exit 2 "--device must be cpu, cuda, cuda:N or auto, got 'gpu'" -- \
  "$PARE" "${train[@]}" --epochs 1 --device gpu --out "$work/o.onnx"
expect_exit 2 "--precision fp16 runs on CUDA only" -- "$PARE" "${train[@]}" --epochs 1 --precision fp16 --out "$work/o.onnx"
expect_exit 2 "--precision must be fp32, bf16 or fp16" -- "$PARE" "${train[@]}" --epochs 1 --precision int8 --out "$work/o.onnx"
expect_exit 2 "$no_nccl" -- \
  "$PARE" "${train[@]}" --epochs 1 --backend nccl --out "$work/o.onnx"
no_file "$work/o.onnx"
no_file "$work/o.npy"
[ -e "$work/o.cache" ] && fail "teacher-cache left $work/o.cache"

# cpu and auto (= cpu here) are the default, bit for bit; the help says what --device takes.
"$PARE" "${train[@]}" --epochs 1 --device cpu --out "$work/cpu.onnx"
"$PARE" "${train[@]}" --epochs 1 --device auto --out "$work/auto.onnx"
cmp -s "$work/t.onnx" "$work/cpu.onnx" && cmp -s "$work/t.onnx" "$work/auto.onnx" \
  && echo "ok: --device cpu and auto are the default bit for bit" || fail "--device cpu/auto changed the model"
"$PARE" run "$work/t.onnx" --input "$work/in.npy" --output "$work/a.npy" --device cpu
expect_exit 0 "cuda:N" -- "$PARE" distill --help
expect_exit 0 "precision" -- "$PARE" train --help

# bf16 autocast on the CPU trains the same model class and ends near the fp32 loss.
"$PARE" distill --teacher "$work/t.onnx" --student mlp:784-16-10 --data "$data" --epochs 2 --batch-size 64 \
  --no-val --quiet --threads 1 --seed 1 --metrics "$work/fp32.jsonl" --out "$work/fp32.onnx"
"$PARE" distill --teacher "$work/t.onnx" --student mlp:784-16-10 --data "$data" --epochs 2 --batch-size 64 \
  --no-val --quiet --threads 1 --seed 1 --precision bf16 --metrics "$work/bf16.jsonl" --out "$work/bf16.onnx"
"$PY" - "$work/fp32.jsonl" "$work/bf16.jsonl" <<'PYEOF' && echo "ok: bf16 distill near fp32" || fail "bf16 distill"
import json, sys
a, b = ([json.loads(l)["train_loss"] for l in open(p)] for p in sys.argv[1:3])
print("fp32 losses", a, "bf16 losses", b)
assert a != b, "bf16 gave the fp32 losses exactly: autocast was off"
assert b[1] < b[0], b
assert all(abs(x - y) <= 0.05 * abs(x) for x, y in zip(a, b)), (a, b)
PYEOF

# A checkpoint records no device: its payload is safetensors (bytes, dtypes and shapes), mapped onto
# the trainer's device when read (train/checkpoint.cpp), so a run checkpointed on cuda:0 resumes on
# the CPU (on a GPU machine, CudaTrainer.ACheckpointWrittenOnTheGpuResumesOnTheCpu runs it end to end).
"$PARE" "${train[@]}" --epochs 2 --out "$work/ref.onnx"
"$PARE" "${train[@]}" --epochs 1 --checkpoint "$work/c.ckpt" --out "$work/half.onnx"
"$PY" - "$work/c.ckpt" <<'PYEOF' && echo "ok: the checkpoint is safetensors and names no device" || fail "checkpoint format"
import json, struct, sys
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"PARECKPT", data[:8]
payload = data[24:]
n = struct.unpack("<Q", payload[:8])[0]
header = json.loads(payload[8:8 + n])
assert any(k.startswith("model/") for k in header), sorted(header)[:5]
assert "rng" in header and "state" in header["__metadata__"], sorted(header)[:5]
assert "cuda" not in json.dumps(header) and "device" not in json.dumps(header), "a device in the header"
PYEOF
expect_exit 0 "" -- "$PARE" "${train[@]}" --epochs 2 --checkpoint "$work/c.ckpt" --resume --device cpu --out "$work/res.onnx"
cmp -s "$work/ref.onnx" "$work/res.onnx" && echo "ok: the checkpoint resumed with --device cpu to the same model" \
  || fail "the resumed model differs from the uninterrupted run"
finish
