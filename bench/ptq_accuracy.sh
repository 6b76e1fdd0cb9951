#!/usr/bin/env bash
# Post-training int8 accuracy on Fashion-MNIST, pare quantize vs PyTorch torch.ao PTQ on the same
# weights and calibration images. Arguments go to ptq_accuracy.py (MODEL.onnx ..., --methods,
# --calib-samples, --per-tensor, --threads, --json).
#   PARE=build/cli/pare bench/ptq_accuracy.sh /tmp/q/cnn.onnx /tmp/q/mlp.onnx
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if ! /usr/bin/python3 -c 'import torch, numpy, onnx' 2>/dev/null; then
  echo "ptq_accuracy: /usr/bin/python3 needs torch, numpy and onnx (apt-get install python3-torch python3-onnx)" >&2
  exit 1
fi
exec /usr/bin/python3 "$here/ptq_accuracy.py" "$@"
