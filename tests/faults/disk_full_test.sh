#!/usr/bin/env bash
# A full disk while pare writes a model, a checkpoint and a teacher cache: exit 1 with a message
# naming the file and the cause, the previous artifact left as it was, no partial file. On a small
# tmpfs (root can mount one), and under `ulimit -f` (a file size limit) everywhere.
source "$(dirname "$0")/lib.sh"
make_npy_data "$work" 256
data="npy:$work/x.npy,$work/y.npy"
train=("$PARE" train --model mlp:784-64-10 --data "$data" --epochs 1 --batch-size 32 --no-val --quiet --threads 1)
cache=("$PARE" teacher-cache --teacher lenet5 --data "$data" --quiet --threads 1)

# fill DIR: takes every free byte of the filesystem under DIR.
fill() { dd if=/dev/zero of="$1/fill" bs=64k status=none 2>/dev/null || true; }

# expect_intact WHAT PATH COPY: PATH is byte-identical to COPY (files or folders) and has no
# temporary or partial sibling.
expect_intact() {
  if diff -r "$2" "$3" >/dev/null; then echo "ok: $1: the previous artifact is intact"; else fail "$1: $2 changed"; fi
  if ls -d "$2".tmp.* "$2".partial >/dev/null 2>&1; then fail "$1: left $(ls -d "$2".tmp.* "$2".partial 2>/dev/null)"
  else echo "ok: $1: no partial file"; fi
}

mnt="$work/small"
mkdir "$mnt"
if mount -t tmpfs -o size=3m tmpfs "$mnt" 2>/dev/null; then
  trap 'umount "$mnt" 2>/dev/null; rm -rf "$work"' EXIT
  # A model.
  "${train[@]}" --seed 1 --out "$mnt/model.onnx"
  cp "$mnt/model.onnx" "$work/model.copy"
  fill "$mnt"
  expect_exit 1 "model.onnx.*No space left on device" -- "${train[@]}" --seed 2 --out "$mnt/model.onnx"
  expect_intact "model, disk full" "$mnt/model.onnx" "$work/model.copy"
  rm "$mnt/fill"
  # A checkpoint (the run fails at its first epoch end; its model is not written either).
  "${train[@]}" --seed 1 --checkpoint "$mnt/run.ckpt" --out "$work/one.onnx"
  cp "$mnt/run.ckpt" "$work/run.copy"
  fill "$mnt"
  expect_exit 1 "run.ckpt.*No space left on device" -- "${train[@]}" --seed 2 --checkpoint "$mnt/run.ckpt" \
    --out "$work/two.onnx"
  expect_intact "checkpoint, disk full" "$mnt/run.ckpt" "$work/run.copy"
  no_file "$work/two.onnx"
  rm "$mnt/fill"
  # A teacher cache (a folder, replaced whole).
  "${cache[@]}" --top-k 3 --out "$mnt/cache"
  cp -r "$mnt/cache" "$work/cache.copy"
  fill "$mnt"
  expect_exit 1 "cache.partial.*No space left on device" -- "${cache[@]}" --top-k 8 --out "$mnt/cache"
  expect_intact "teacher cache, disk full" "$mnt/cache" "$work/cache.copy"
  rm "$mnt/fill"
  umount "$mnt"
  trap 'rm -rf "$work"' EXIT
else
  echo "skip: cannot mount a tmpfs here (not root?); the ulimit -f checks below still run"
fi

# The same under a file size limit: write() fails with EFBIG (SIGXFSZ ignored, as a shell may).
limited() { (trap '' XFSZ; ulimit -f 64; "$@"); }   # 64 KiB
small=("$PARE" train --model mlp:784-16-10 --data "$data" --epochs 1 --batch-size 32 --no-val --quiet --threads 1)
"${small[@]}" --seed 1 --out "$work/m.onnx"
cp "$work/m.onnx" "$work/m.copy"
expect_exit 1 "m.onnx.*File too large" -- limited "${train[@]}" --seed 2 --out "$work/m.onnx"
expect_intact "model, file size limit" "$work/m.onnx" "$work/m.copy"
"${small[@]}" --seed 1 --checkpoint "$work/c.ckpt" --out "$work/m1.onnx"
cp "$work/c.ckpt" "$work/c.copy"
expect_exit 1 "c.ckpt.*File too large" -- limited "${train[@]}" --seed 2 --checkpoint "$work/c.ckpt" --out "$work/m2.onnx"
expect_intact "checkpoint, file size limit" "$work/c.ckpt" "$work/c.copy"
no_file "$work/m2.onnx"
finish
