#!/usr/bin/env bash
# Peer test: pare's KD loss equals PyTorch's F.kl_div(F.log_softmax(s/T, 1), F.softmax(t/T, 1),
# reduction='batchmean') * T*T, and the mixed loss alpha*KD + (1-alpha)*CE equals PyTorch's, within
# 1e-6 on random float32 logits (several batch sizes, class counts, T and alpha), gradients wrt the
# student logits too; checked against torch in float32 and in float64.
#
# There is no CLI command for the loss alone, so the C++ side is the gtest KdLossPeer.FromFiles in
# $PARE_BUILD_DIR/tests/distill_tests, driven by files through PARE_KD_PEER_DIR.
# Env: PARE_BUILD_DIR (ctest sets it). Needs torch and numpy in the peers\' Python (tests/peers.sh).
source "$(dirname "${BASH_SOURCE[0]}")/gtest_peer_lib.sh" kd-loss

echo "== random logits into $tmp (torch $("$PY" -c 'import torch; print(torch.__version__)'))"
"$PY" "$here/kd_loss_peer.py" gen "$tmp"

run_gtest PARE_KD_PEER_DIR KdLossPeer.FromFiles

if ! "$PY" "$here/kd_loss_peer.py" check "$tmp"; then
  echo "FAILED: pare's KD / mixed loss differs from PyTorch's"
  exit 1
fi
echo "PASSED: pare's KD and mixed losses and their gradients match PyTorch"
