#!/usr/bin/env bash
# pare federate simulate beside central training and a PyTorch FedAvg: see federated.py.
exec "$(dirname "$0")/python" "$(dirname "$0")/federated.py" "$@"
