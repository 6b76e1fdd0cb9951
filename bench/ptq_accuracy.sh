#!/usr/bin/env bash
# Post-training int8 accuracy on Fashion-MNIST, pare quantize vs PyTorch torch.ao PTQ on the same
# weights and calibration images. Arguments go to ptq_accuracy.py (MODEL.onnx ..., --methods,
# --calib-samples, --per-tensor, --threads, --json).
#   PARE=build/cli/pare bench/ptq_accuracy.sh /tmp/q/cnn.onnx /tmp/q/mlp.onnx
exec "$(dirname "$0")/python" "$(dirname "$0")/ptq_accuracy.py" "$@"
