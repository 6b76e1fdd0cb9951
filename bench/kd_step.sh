#!/usr/bin/env bash
# KD step throughput (teacher forward + student step), pare vs PyTorch (default and tuned malloc),
# with where the time goes. Arguments go to kd_step.py (--batches, --steps, --warmup, --threads,
# --repeats, --teacher, --student, --teacher-split, --json).
#   PARE=build/cli/pare bench/kd_step.sh --repeats 3
exec "$(dirname "$0")/python" "$(dirname "$0")/kd_step.py" "$@"
