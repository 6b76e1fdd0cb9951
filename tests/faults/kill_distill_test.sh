#!/usr/bin/env bash
# SIGKILL at random points of `pare distill`; every resume ends byte-identical to the uninterrupted run.
source "$(dirname "$0")/lib.sh"
make_npy_data "$work" 1024
kill_campaign distill 16 "$PARE" distill --teacher lenet5 --student mlp:784-128-10 --data "npy:$work/x.npy,$work/y.npy" \
  --epochs 8 --batch-size 16 --seed 3 --no-val --quiet --threads 1
finish
