#!/usr/bin/env bash
# SIGKILL of `pare launch` (its workers die with it) at random points of a 2-rank distillation;
# every resumed 2-rank run ends byte-identical to the uninterrupted one, and no worker outlives a kill.
source "$(dirname "$0")/lib.sh"
make_npy_data "$work" 1024
kill_campaign launch 8 "$PARE" launch --nproc-per-node 2 -- "$PARE" distill --teacher lenet5 --student mlp:784-128-10 \
  --data "npy:$work/x.npy,$work/y.npy" --epochs 16 --batch-size 32 --seed 3 --no-val --quiet --threads 1
finish
