#!/usr/bin/env bash
# pare federate simulate beside central training and a PyTorch FedAvg: see federated.py.
exec /usr/bin/python3 "$(dirname "$0")/federated.py" "$@"
