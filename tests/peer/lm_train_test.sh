#!/usr/bin/env bash
# Peer test: pare trains a language model from a spec on text, and transformers loads what it
# wrote. A byte-level BPE of 1,000 tokens is trained by `tokenizers` on the fortunes; `pare train
# --model llama:...` trains a 2-layer Llama on /usr/share/games/fortunes/computers for 2 epochs
# (next-token loss, windows of 64 tokens); then:
#   - the held-out perplexity (`pare eval --data text:...`) fell from the untrained model's;
#   - transformers' AutoModelForCausalLM loads the written folder, and its logits equal pare's
#     (`pare run hf:OUT`) within 1e-4;
#   - a second run reads the tokens from the token cache; it trains a tied head (tie=1), and the
#     held-out perplexity it reports equals that of the folder it wrote (one weight, not two);
#   - a new model without --tokenizer, and a --seq-len past the context, exit 2 writing nothing.
# Env: PARE, PARE_PYTHON. Without transformers/tokenizers the test fails under make test and CI.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PARE=${PARE:?set PARE to the pare binary}
source "$here/../peers.sh"
need_python "torch, transformers, tokenizers, numpy"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/pare-lm-train.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export PARE_CACHE_DIR=$tmp/cache
text=/usr/share/games/fortunes/computers
need "Debian's fortunes ($text)" test -f "$text"

"$PY" "$here/peer_util.py" bpe "$tmp/tokenizer.json" --text "$text" --vocab 1000
spec=llama:layers=2,dim=64,heads=4,kv-heads=2,ff=128,ctx=128
common=(--tokenizer "$tmp/tokenizer.json" --data "text:$text" --seq-len 64 --batch-size 16 --seed 1)
# The baseline: one step at a learning rate too small to move the weights.
"$PARE" train --model "$spec" "${common[@]}" --epochs 1 --max-steps 1 --lr 1e-9 --out "$tmp/init" -q
"$PARE" train --model "$spec" "${common[@]}" --epochs 2 --lr 3e-3 --out "$tmp/lm" --json >"$tmp/train.json"
cat "$tmp/train.json"
before=$("$PARE" eval "hf:$tmp/init" --data "text:$text" --seq-len 64 --json -q | "$PY" -c "import json,sys; print(json.load(sys.stdin)['perplexity'])")
after=$("$PARE" eval "hf:$tmp/lm" --data "text:$text" --seq-len 64 --json -q | "$PY" -c "import json,sys; print(json.load(sys.stdin)['perplexity'])")
echo "held-out perplexity: untrained $before, trained $after"
"$PY" -c "import sys; sys.exit(0 if float(sys.argv[2]) < 0.5 * float(sys.argv[1]) else 1)" "$before" "$after" ||
  { echo "FAIL: training did not lower the perplexity enough"; exit 1; }

"$PY" - "$tmp" <<'PYEOF'
import sys, numpy as np, torch, transformers as tf
d = sys.argv[1]
m = tf.AutoModelForCausalLM.from_pretrained(f"{d}/lm").eval()
ids = torch.randint(0, 1000, (2, 40), generator=torch.Generator().manual_seed(5))
with torch.no_grad():
    np.save(f"{d}/ref.npy", m(ids).logits.numpy())
np.save(f"{d}/ids.npy", ids.numpy())
PYEOF
"$PARE" run "hf:$tmp/lm" -i "input_ids=$tmp/ids.npy" -o "logits=$tmp/pare.npy"
"$PY" -c "
import numpy as np, sys
d = np.abs(np.load(sys.argv[1] + '/ref.npy') - np.load(sys.argv[1] + '/pare.npy')).max()
print(f'max |pare - transformers| on the trained model: {d:.2e}'); sys.exit(0 if d <= 1e-4 else 1)" "$tmp"

# A tied head (tie=1: the head is the embedding's transpose) trains as one weight: the folder it
# writes is still tied (no lm_head.weight), and its held-out perplexity is what training reported
# (within 1%: training averages its batches, eval all tokens at once; 0.2% apart untied too).
"$PARE" train --model "$spec,tie=1" "${common[@]}" --epochs 1 --max-steps 20 --lr 1e-2 --out "$tmp/lm2" --json \
  >"$tmp/tied.json" 2>"$tmp/err.txt"
grep -q "from the token cache" "$tmp/err.txt" || { echo "FAIL: the second run tokenized again"; cat "$tmp/err.txt"; exit 1; }
echo "ok: the second run read the token cache"
"$PARE" eval "hf:$tmp/lm2" --data "text:$text" --seq-len 64 --json -q >"$tmp/tied_eval.json"
"$PY" - "$tmp" <<'PYEOF'
import json, sys
from safetensors import safe_open
d = sys.argv[1]
tied = json.load(open(f"{d}/lm2/config.json")).get("tie_word_embeddings")
with safe_open(f"{d}/lm2/model.safetensors", "pt") as f:
    head = "lm_head.weight" in f.keys()
trained = json.load(open(f"{d}/tied.json"))["val_perplexity"]
saved = json.load(open(f"{d}/tied_eval.json"))["perplexity"]
print(f"tied head: tie_word_embeddings {tied}, lm_head.weight written: {head}; held-out perplexity {trained:.4f} "
      f"in training, {saved:.4f} from the written folder")
sys.exit(0 if tied is True and not head and abs(trained - saved) <= 1e-2 * saved else 1)
PYEOF

rc=0; "$PARE" train --model "$spec" --data "text:$text" --out "$tmp/bad1" 2>"$tmp/err.txt" || rc=$?
[[ $rc == 2 ]] && grep -q -- "--tokenizer" "$tmp/err.txt" && [[ ! -e "$tmp/bad1" ]] || { echo "FAIL: no tokenizer: exit $rc $(cat "$tmp/err.txt")"; exit 1; }
rc=0; "$PARE" train --model "$spec" "${common[@]/64/512}" --out "$tmp/bad2" 2>"$tmp/err.txt" || rc=$?
[[ $rc == 2 ]] && grep -q -- "--seq-len" "$tmp/err.txt" && [[ ! -e "$tmp/bad2" ]] || { echo "FAIL: long seq-len: exit $rc $(cat "$tmp/err.txt")"; exit 1; }
echo "PASSED"
