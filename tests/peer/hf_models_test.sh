#!/usr/bin/env bash
# Peer test: Hugging Face causal LMs made by transformers itself (tests/peer/hf_models.py: Llama with
# llama3 rope scaling and GQA, Llama with tied embeddings, Mistral, Qwen2, Qwen3, GPT-2; random
# weights, several safetensors shards) run in pare: `pare run hf:DIR` gives transformers' logits
# within 1e-4 on a right-padded batch (the valid positions), and `pare generate --temperature 0`
# gives the same 32 tokens as transformers' greedy generate(). Then the bad checkpoints: a truncated
# shard, an index naming a missing shard, a tensor of the wrong shape, an unknown model_type and an
# unknown config key each exit 2 naming the file and the key or tensor.
#
# Env: PARE (the binary), PARE_PYTHON. Without transformers the test fails under make test and CI,
# and skips otherwise (tests/peers.sh).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PARE=${PARE:?set PARE to the pare binary}
source "$here/../peers.sh"
need_python "torch, transformers, numpy"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/pare-hf.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

"$PY" "$here/hf_models.py" "$tmp" 2>/dev/null >"$tmp/cases.txt"
failures=()
while read -r name dir shards <&3; do
  if ! "$PARE" run "hf:$dir" -i "input_ids=$dir/ids.npy" -o "logits=$dir/pare.npy" 2>"$tmp/err.txt"; then
    echo "FAIL $name: pare run: $(head -c 1500 "$tmp/err.txt")"; failures+=("$name run"); continue
  fi
  if "$PY" - "$dir" <<'PYEOF'
import sys, numpy as np
d = sys.argv[1]
ref, got, lengths = np.load(f"{d}/logits.npy"), np.load(f"{d}/pare.npy"), np.load(f"{d}/lengths.npy")
err = max(np.abs(ref[i, :n] - got[i, :n]).max() for i, n in enumerate(lengths))
print(f"max |pare - transformers| over the valid positions: {err:.2e}")
sys.exit(0 if err <= 1e-4 else 1)
PYEOF
  then echo "ok   $name: logits ($shards shards)"; else echo "FAIL $name: logits"; failures+=("$name logits"); fi
  prompt=$("$PY" -c "import numpy as np, sys; print(','.join(map(str, np.load(sys.argv[1])[0])))" "$dir/prompt.npy")
  want=$("$PY" -c "import numpy as np, sys; print(' '.join(map(str, np.load(sys.argv[1]))))" "$dir/generated.npy")
  got=$("$PARE" generate "hf:$dir" --prompt-ids "$prompt" -n 32 --temperature 0 --ignore-eos -q 2>"$tmp/err.txt" || true)
  if [[ "$got" == "$want" ]]; then echo "ok   $name: greedy generation of 32 tokens"
  else echo "FAIL $name: generate: pare '$got' vs transformers '$want' $(head -c 500 "$tmp/err.txt")"; failures+=("$name generate"); fi
done 3<"$tmp/cases.txt"

# Bad checkpoints, each a copy of the llama one with one thing wrong: exit 2, the message names it.
bad() {  # NAME REGEX SETUP...
  local name=$1 regex=$2
  shift 2
  local d="$tmp/bad-$name"
  cp -r "$tmp/llama" "$d"
  "$@" "$d"
  local rc=0
  "$PARE" run "hf:$d" -i "input_ids=$d/ids.npy" -o "logits=$d/out.npy" >/dev/null 2>"$tmp/err.txt" || rc=$?
  if ((rc == 2)) && grep -qE "$regex" "$tmp/err.txt" && [[ ! -e "$d/out.npy" ]]; then echo "ok   bad $name: $(head -c 300 "$tmp/err.txt")"
  else echo "FAIL bad $name: exit $rc, $(head -c 500 "$tmp/err.txt")"; failures+=("bad $name"); fi
}
truncate_shard() { truncate -s 100 "$1/model-00002-of-00004.safetensors"; }
missing_shard() { rm "$1/model-00003-of-00004.safetensors"; }
edit_config() { "$PY" - "$1" "$EDIT" <<'PYEOF'
import json, sys
p = sys.argv[1] + "/config.json"; c = json.load(open(p)); exec(sys.argv[2]); json.dump(c, open(p, "w"))
PYEOF
}
wrong_shape() { EDIT='c["intermediate_size"] = 80' edit_config "$1"; }
unknown_type() { EDIT='c["architectures"] = ["FalconForCausalLM"]; c["model_type"] = "falcon"' edit_config "$1"; }
unknown_key() { EDIT='c["sliding_window_pattern"] = 4' edit_config "$1"; }
bad truncated "model-00002-of-00004.safetensors" truncate_shard
bad missing_shard "model-00003-of-00004.safetensors" missing_shard
bad wrong_shape "mlp\.(gate|up|down)_proj\.weight' has shape" wrong_shape
bad unknown_architecture "config.json: architecture 'FalconForCausalLM'" unknown_type
bad unknown_key "config.json: config key 'sliding_window_pattern'" unknown_key

if ((${#failures[@]})); then echo "FAILED: ${failures[*]}"; exit 1; fi
echo "all passed"
