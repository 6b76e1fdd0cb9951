#!/usr/bin/env bash
# Training throughput, pare vs PyTorch (default and tuned malloc). Arguments go to
# train_throughput.py (--models, --batch, --steps, --warmup, --threads, --repeats, --json).
#   PARE=build-peer/cli/pare bench/train_throughput.sh
exec "$(dirname "$0")/python" "$(dirname "$0")/train_throughput.py" "$@"
