#!/usr/bin/env bash
# KD step throughput (teacher forward + student step), pare vs PyTorch (default and tuned malloc),
# with where the time goes. Arguments go to kd_step.py (--batches, --steps, --warmup, --threads,
# --repeats, --teacher, --student, --teacher-split, --json).
#   PARE=build/cli/pare bench/kd_step.sh --repeats 3
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if ! /usr/bin/python3 -c 'import torch, numpy, onnx' 2>/dev/null; then
  echo "kd_step: /usr/bin/python3 needs torch, numpy and onnx (apt-get install python3-torch python3-onnx)" >&2
  exit 1
fi
exec /usr/bin/python3 "$here/kd_step.py" "$@"
