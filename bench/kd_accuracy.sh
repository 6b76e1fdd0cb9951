#!/usr/bin/env bash
# Student alone vs distilled, pare and PyTorch side by side: see kd_accuracy.py.
exec "$(dirname "$0")/python" "$(dirname "$0")/kd_accuracy.py" "$@"
