#!/usr/bin/env bash
# Peer test: pare's token-level divergence for language models (distill::token_divergence, `pare
# distill --loss jsd:BETA`, fkl and rkl being BETA 0 and 1) equals TRL's
# GKDTrainer.generalized_jsd_loss, value and gradient wrt the student logits, within 1e-5 on random
# float32 logits [B, S, V] with prompt and padding tokens masked (-100), for BETA in {0, 0.1, 0.5,
# 0.9, 1} and T in {1, 2}.
#
# The C++ side is the gtest LmKdLossPeer.FromFiles in $PARE_BUILD_DIR/tests/distill_tests, driven by
# files through PARE_LM_KD_PEER_DIR. Needs trl, torch and numpy in the peers' Python (tests/peers.sh).
source "$(dirname "${BASH_SOURCE[0]}")/gtest_peer_lib.sh" lm-kd-loss distill_tests "trl.experimental.gkd, torch, numpy"

echo "== random logits into $tmp"
"$PY" "$here/lm_kd_loss_peer.py" gen "$tmp"

run_gtest PARE_LM_KD_PEER_DIR LmKdLossPeer.FromFiles

if ! "$PY" "$here/lm_kd_loss_peer.py" check "$tmp"; then
  echo "FAILED: pare's generalized JSD differs from TRL's"
  exit 1
fi
echo "PASSED: pare's generalized JSD (fkl, rkl, jsd:BETA) and its gradient match TRL's"
