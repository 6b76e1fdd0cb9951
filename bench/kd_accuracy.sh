#!/usr/bin/env bash
# Student alone vs distilled, pare and PyTorch side by side: see kd_accuracy.py.
exec /usr/bin/python3 "$(dirname "$0")/kd_accuracy.py" "$@"
