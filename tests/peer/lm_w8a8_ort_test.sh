#!/usr/bin/env bash
# Peer test: a language model's W8A8 (`pare quantize LM --calib text:F [--smoothquant A] --out F.onnx`)
# run by ONNX Runtime. A Llama trained by pare on shipped text, quantized plain and with SmoothQuant
# 0.5: ONNX Runtime runs each QDQ file (its int8 kernels) to pare's logits (argmax agreement at least
# 99% over 256 held-out tokens, largest difference within 1% of the largest logit: an activation on
# a rounding boundary may land one step apart); `pare eval` reads the file back as a language model
# (config and tokenizer in its metadata) with a perplexity near the fp32 model's and not equal to it.
# Bad requests exit 2 and write nothing. Finally a nudged logit must be caught.
#
# Env: PARE, PARE_SOURCE_DIR, PARE_PYTHON (tests/peers.sh). Without onnxruntime the test fails under
# make test and CI, and skips otherwise.
source "$(dirname "${BASH_SOURCE[0]}")/ort_peer_lib.sh" lm-w8a8 "numpy, tokenizers"

text=/usr/share/games/fortunes/computers
held_out=/usr/share/games/fortunes/science
need "Debian's fortunes ($text)" test -f "$text"
export PARE_CACHE_DIR=$tmp/cache
"$PY" "$here/peer_util.py" bpe "$tmp/tokenizer.json" --text "$text" --vocab 1024
"$PARE" train --model llama:layers=2,dim=128,heads=4,kv-heads=2,ff=256,ctx=256 --tokenizer "$tmp/tokenizer.json" \
  --data "text:$text" --seq-len 64 --batch-size 16 --seed 1 --epochs 1 --lr 3e-3 --out "$tmp/llama" -q
"$PARE" tokenize "$tmp/tokenizer.json" --text "$(head -c 3000 "$held_out")" --json >"$tmp/ids.json"
"$PY" -c "import json, numpy as np, sys; ids = json.load(open(sys.argv[1]))[:256]; assert len(ids) == 256, len(ids); \
np.save(sys.argv[2], np.array([ids], dtype=np.int64))" "$tmp/ids.json" "$tmp/ids.npy"

compare() {  # PREFIX: ONNX Runtime's logits against pare's
  "$PY" - "$tmp" "$1" <<'PYEOF'
import sys, numpy as np
d, p = sys.argv[1:]
ort, pare = np.load(f"{d}/{p}.ort.npy")[0], np.load(f"{d}/{p}.pare.npy")[0]
rel = float(np.abs(ort - pare).max() / np.abs(pare).max())
agree = float((ort.argmax(-1) == pare.argmax(-1)).mean())
print(f"{p}: max |ONNX Runtime - pare| {rel:.1e} of the largest logit, argmax agreement {agree:.1%}")
sys.exit(0 if rel <= 1e-2 and agree >= 0.99 else 1)
PYEOF
}

perplexity() { "$PARE" eval "$1" --data "text:$held_out" --seq-len 64 --json -q | "$PY" -c \
  "import json, sys; print(json.load(sys.stdin)['perplexity'])"; }
fp32=$(perplexity "hf:$tmp/llama")
q=(--calib "text:$text" --calib-samples 8 --seq-len 64 --weight-bits "$ORT_WEIGHT_BITS" -q)
for variant in plain smooth; do
  extra=()
  [[ $variant == smooth ]] && extra=(--smoothquant 0.5)
  "$PARE" quantize "hf:$tmp/llama" "${q[@]}" "${extra[@]}" --report "$tmp/$variant.json" \
    --out "$tmp/$variant.onnx" >/dev/null
  "$PARE" run "$tmp/$variant.onnx" -i "input_ids=$tmp/ids.npy" -o "logits=$tmp/$variant.pare.npy" >/dev/null
  "$PY" "$here/ort_run.py" "$tmp/$variant.onnx" --input "input_ids=$tmp/ids.npy" --output "logits=$tmp/$variant.ort.npy"
  compare "$variant"
  ppl=$(perplexity "$tmp/$variant.onnx")
  "$PY" -c "import sys; f, q = map(float, sys.argv[1:]); print(f'$variant: perplexity fp32 {f:.3f}, W8A8 {q:.3f}'); \
sys.exit(0 if q != f and abs(q / f - 1) < 0.05 else 1)" "$fp32" "$ppl"
done
"$PY" -c "import json, sys; r = json.load(open(sys.argv[1])); g = r['smoothquant']['groups']; \
assert r['smoothquant']['alpha'] == 0.5 and len(g) == 8, r['smoothquant']; \
assert sum(x['input_max_smoothed'] < x['input_max'] for x in g) >= 4, g" "$tmp/smooth.json"

refused() {  # NAME FILE COMMAND...: exit 2, FILE not written
  local name=$1 file=$2 rc=0
  shift 2
  "$@" >/dev/null 2>"$tmp/err.txt" || rc=$?
  if ((rc != 2)) || [[ -e $file ]]; then
    echo "FAIL $name: exit $rc (want 2), $file $([[ -e $file ]] && echo written || echo absent)"
    cat "$tmp/err.txt"
    exit 1
  fi
  echo "ok   refused $name: $(head -c 200 "$tmp/err.txt")"
}
refused "W8A8 into a GGUF file" "$tmp/bad.gguf" "$PARE" quantize "hf:$tmp/llama" "${q[@]}" --out "$tmp/bad.gguf"
refused "--smoothquant 1.5" "$tmp/bad.onnx" "$PARE" quantize "hf:$tmp/llama" "${q[@]}" --smoothquant 1.5 \
  --out "$tmp/bad.onnx"
refused "--smoothquant with --weight-only" "$tmp/bad-hf" "$PARE" quantize "hf:$tmp/llama" "${q[@]}" --smoothquant 0.5 \
  --weight-only int4 --out "$tmp/bad-hf"
"$PARE" export mlp:16-4 --target onnx --out "$tmp/mlp.onnx" >/dev/null
refused "eval on text of an ONNX file that is no language model" "$tmp/none" "$PARE" eval "$tmp/mlp.onnx" \
  --data "text:$held_out"
# `pare export LM --target onnx` carries the config and tokenizer too: pare evaluates it as the model.
"$PARE" export "hf:$tmp/llama" --target onnx --out "$tmp/exported.onnx" >/dev/null
exported=$(perplexity "$tmp/exported.onnx")
"$PY" -c "import sys; f, e = map(float, sys.argv[1:]); \
print(f'exported ONNX: perplexity {e:.4f}, the folder {f:.4f}'); sys.exit(0 if abs(e / f - 1) < 1e-5 else 1)" \
  "$fp32" "$exported"

# The comparison can fail: a nudged logit must be caught.
"$PY" -c 'import sys, numpy as np
t = np.load(sys.argv[1]); t[0, 5] += np.abs(t).max() * 0.05; np.save(sys.argv[1], t)' "$tmp/smooth.pare.npy"
if compare smooth >/dev/null; then echo "FAIL: the comparison accepted a logit nudged by 5% of the largest"; exit 1; fi
echo "self-check: a logit nudged by 5% of the largest is caught"
