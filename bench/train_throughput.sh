#!/usr/bin/env bash
# Training throughput, pare vs PyTorch (default and tuned malloc). Arguments go to
# train_throughput.py (--models, --batch, --steps, --warmup, --threads, --repeats, --json).
#   PARE=build-peer/cli/pare bench/train_throughput.sh
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if ! /usr/bin/python3 -c 'import torch, numpy' 2>/dev/null; then
  echo "train_throughput: /usr/bin/python3 needs torch and numpy (apt-get install python3-torch)" >&2
  exit 1
fi
exec /usr/bin/python3 "$here/train_throughput.py" "$@"
