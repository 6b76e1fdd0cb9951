#!/usr/bin/env bash
# SIGKILL at random points of `pare quantize --qat`; every resume ends byte-identical to the
# uninterrupted run.
source "$(dirname "$0")/lib.sh"
make_npy_data "$work" 1024
data="npy:$work/x.npy,$work/y.npy"
"$PARE" train --model mlp:784-64-32-10 --data "$data" --epochs 1 --batch-size 32 --no-val --quiet --out "$work/mlp.onnx"
kill_campaign qat 16 "$PARE" quantize "$work/mlp.onnx" --calib "$data" --calib-samples 16 --weight-bits 4 --qat \
  --epochs 10 --batch-size 8 --no-val --seed 2 --quiet --threads 1
finish
