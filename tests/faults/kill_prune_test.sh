#!/usr/bin/env bash
# SIGKILL at random points of `pare prune --schedule gradual` (with a teacher); every resume ends
# byte-identical to the uninterrupted run.
source "$(dirname "$0")/lib.sh"
make_npy_data "$work" 1024
kill_campaign prune 16 "$PARE" prune mlp:784-128-32-10 --data "npy:$work/x.npy,$work/y.npy" --batch-size 16 --sparsity 0.8 \
  --schedule gradual --epochs 8 --prune-every 5 --teacher lenet5 --seed 3 --no-val --quiet --threads 1
finish
