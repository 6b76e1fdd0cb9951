#!/usr/bin/env bash
# Peer test: `pare export --target hf` writes checkpoints that transformers itself loads. For each
# architecture of tests/peer/hf_models.py (random weights saved by transformers), pare loads the
# checkpoint and exports it with a small --max-shard-size, so that it shards; transformers'
# AutoModelForCausalLM.from_pretrained loads pare's folder with no missing, unexpected or mismatched
# tensor, the weights equal the original's and the logits equal the original model's within 1e-4
# (they are exact). One checkpoint carries a tokenizer (byte-level BPE trained by tokenizers on the
# fortunes): AutoTokenizer loads the exported copy and encodes as the original does. Then
# SmolLM2-135M from its GGUF (pare dequantizes it) exported to hf: transformers' logits on 64 tokens
# equal pare's within 1e-4 relative. Then `pare prune --method channel` (Minitron) of four
# families: transformers loads the smaller checkpoints with pare's logits. Last the bad requests,
# each exit 2 naming what is wrong with nothing written: a model that is no language model, an
# unknown --max-shard-size spelling, an --out folder that holds something else, heads that are not
# whole query groups.
#
# Env: PARE (the binary), PARE_PYTHON. Without torch, transformers, tokenizers, accelerate or the
# SmolLM2 GGUF the test fails under make test and CI, and skips otherwise (tests/peers.sh).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PARE=${PARE:?set PARE to the pare binary}
source "$here/../peers.sh"
need_python "torch, transformers, tokenizers, accelerate, numpy"
need_smollm2_gguf
gguf=$SMOLLM2_GGUF
need "Debian's fortunes" test -f /usr/share/games/fortunes/fortunes
tmp=$(mktemp -d "${TMPDIR:-/tmp}/pare-hf-export.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
failures=()

mkdir "$tmp/src" "$tmp/out"
"$PY" "$here/hf_models.py" "$tmp/src" 2>/dev/null >"$tmp/cases.txt"
# A tokenizer beside the llama checkpoint (256 byte tokens: the models' vocabulary).
"$PY" - "$tmp/src/llama" <<'PYEOF' 2>/dev/null
import sys, transformers as tf
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.train(["/usr/share/games/fortunes/fortunes"],
          trainers.BpeTrainer(vocab_size=256, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
tf.PreTrainedTokenizerFast(tokenizer_object=tok).save_pretrained(sys.argv[1])
PYEOF

while read -r name dir shards <&3; do
  out="$tmp/out/$name"
  if ! "$PARE" export "hf:$dir" --target hf --out "$out" --max-shard-size 50KB >"$tmp/log.txt" 2>&1; then
    echo "FAIL $name: pare export: $(head -c 1500 "$tmp/log.txt")"; failures+=("$name export"); continue
  fi
  n=$(ls "$out" | grep -c '\.safetensors$' || true)
  if [[ -f "$out/model.safetensors.index.json" ]] && ((n > 1)); then echo "ok   $name: exported in $n shards"
  else echo "FAIL $name: expected shards and an index, got $(ls "$out")"; failures+=("$name shards"); fi
done 3<"$tmp/cases.txt"

if ! "$PY" - "$tmp" <<'PYEOF' 2>"$tmp/py_err.txt"; then
import os, sys, numpy as np, torch, transformers as tf
tmp = sys.argv[1]
bad = 0
for line in open(f"{tmp}/cases.txt"):
    name, src = line.split()[:2]
    out = f"{tmp}/out/{name}"
    if not os.path.isdir(out):
        continue  # its export failed, reported above
    model, info = tf.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32, output_loading_info=True)
    model.eval()
    problems = {k: v for k, v in info.items() if v}
    ref = tf.AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32).state_dict()
    got = model.state_dict()
    weight_err = max((ref[k] - got[k]).abs().max().item() for k in ref)
    ids, lengths = torch.from_numpy(np.load(f"{src}/ids.npy")), np.load(f"{src}/lengths.npy")
    mask = (torch.arange(ids.shape[1])[None, :] < torch.from_numpy(lengths)[:, None]).long()
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask).logits.numpy()
    want = np.load(f"{src}/logits.npy")
    err = max(np.abs(want[i, :n] - logits[i, :n]).max() for i, n in enumerate(lengths))
    ok = not problems and type(model).__name__ == model.config.architectures[0] and err <= 1e-4 and weight_err == 0
    print(f"{'ok  ' if ok else 'FAIL'} {name}: transformers loads pare's export as {type(model).__name__}, "
          f"max |weight diff| {weight_err:.1e}, max |logit diff| {err:.2e}{' ' + str(problems) if problems else ''}")
    bad += not ok
    if os.path.exists(f"{src}/tokenizer.json"):
        text = "Whoever fights monsters should see to it that in the process he does not become one. Ünïcödé ✓"
        a, b = tf.AutoTokenizer.from_pretrained(src), tf.AutoTokenizer.from_pretrained(out)
        same = a(text)["input_ids"] == b(text)["input_ids"] and len(a(text)["input_ids"]) > 10
        print(f"{'ok  ' if same else 'FAIL'} {name}: AutoTokenizer loads the exported tokenizer files and encodes alike")
        bad += not same
sys.exit(1 if bad else 0)
PYEOF
  failures+=("transformers")
  tail -n 5 "$tmp/py_err.txt"
fi

# SmolLM2-135M from its GGUF: pare's logits on 64 tokens against transformers' on pare's export, and
# the tokenizer pare writes for it (from the GGUF's metadata) against pare's own.
"$PY" -c "import numpy as np; np.save('$tmp/smol_ids.npy', np.random.default_rng(3).integers(0, 49152, (1, 64)))"
if "$PARE" export "gguf:$gguf" --target hf --out "$tmp/smol" --max-shard-size 200MB >"$tmp/log.txt" 2>&1 &&
   "$PARE" run "gguf:$gguf" -i "input_ids=$tmp/smol_ids.npy" -o "logits=$tmp/smol_pare.npy" >/dev/null 2>>"$tmp/log.txt"; then
  "$PY" - "$tmp" <<'PYEOF' 2>>"$tmp/log.txt" || { failures+=("smollm2"); head -c 1500 "$tmp/log.txt"; }
import os, sys, numpy as np, torch, transformers as tf
tmp = sys.argv[1]
model, info = tf.AutoModelForCausalLM.from_pretrained(f"{tmp}/smol", dtype=torch.float32, output_loading_info=True)
with torch.no_grad():
    ref = model.eval()(torch.from_numpy(np.load(f"{tmp}/smol_ids.npy"))).logits.numpy()
got = np.load(f"{tmp}/smol_pare.npy")
rel = np.abs(ref - got).max() / np.abs(ref).max()
shards = len([f for f in os.listdir(f"{tmp}/smol") if f.endswith(".safetensors")])
problems = {k: v for k, v in info.items() if v}
ok = rel <= 1e-4 and shards > 1 and not problems
print(f"{'ok  ' if ok else 'FAIL'} SmolLM2-135M GGUF -> hf ({shards} shards): max |transformers - pare| / max |pare| = "
      f"{rel:.2e} on 64 tokens{' ' + str(problems) if problems else ''}")
# The GGUF's tokenizer (its metadata) written as tokenizer.json: transformers reads it and tokenizes
# held-out text to the ids pare gives with the GGUF's own tokenizer.
text = open("/usr/share/games/fortunes/science", encoding="utf-8").read()[:6000]
open(f"{tmp}/smol_text.txt", "w", encoding="utf-8").write(text)
tok = tf.AutoTokenizer.from_pretrained(f"{tmp}/smol")
np.save(f"{tmp}/smol_hf_ids.npy", np.array(tok(text)["input_ids"]))
sys.exit(0 if ok else 1)
PYEOF
  want=$("$PARE" tokenize "gguf:$gguf" --text "$(cat "$tmp/smol_text.txt")" 2>>"$tmp/log.txt")
  got=$("$PY" -c "import numpy as np, sys; print(' '.join(map(str, np.load(sys.argv[1]))))" "$tmp/smol_hf_ids.npy")
  if [[ -n "$want" && "$got" == "$want" ]]; then echo "ok   SmolLM2 GGUF -> hf: transformers reads the written tokenizer.json and gives pare's $(wc -w <<<"$want") ids"
  else echo "FAIL smollm2 tokenizer: transformers '${got:0:200}' vs pare '${want:0:200}'"; failures+=("smollm2 tokenizer"); fi
else
  echo "FAIL smollm2: $(head -c 1500 "$tmp/log.txt")"; failures+=("smollm2 export")
fi

# Minitron: `pare prune --method channel` ranks heads, neurons, hidden channels and layers on text and
# writes a smaller checkpoint of the same family, which transformers loads (nothing missing or
# mismatched) and runs to pare's logits within 1e-4: Llama with GQA (whole KV groups), Qwen2 (q/k/v
# biases), Qwen3 (q/k norms; head_dim stays 16 while hidden becomes 40) and GPT-2 (Conv1D: layers
# and MLP width only). The calibration text is read with the llama case's tokenizer (vocabulary 256,
# every case's).
mkdir "$tmp/pruned"
for case in "llama --heads 2 --hidden 40 --intermediate 48 --layers 1" \
            "qwen2 --heads 2 --hidden 40 --intermediate 48" "qwen3 --heads 2 --hidden 40 --layers 1" \
            "gpt2 --intermediate 48 --layers 1"; do
  read -r name args <<<"$case"
  src="$tmp/prune-src/$name" out="$tmp/pruned/$name"
  mkdir -p "$src" && cp "$tmp/src/$name/"* "$tmp/src/llama/"tok*.json "$src/"
  # shellcheck disable=SC2086  # args are flags
  if ! "$PARE" prune "hf:$src" --calib-data text:/usr/share/games/fortunes/fortunes --calib-samples 8 --seq-len 32 \
         $args --out "$out" >"$tmp/log.txt" 2>&1 ||
     ! "$PARE" run "hf:$out" -i "input_ids=$src/ids.npy" -o "logits=$out.npy" >/dev/null 2>>"$tmp/log.txt"; then
    echo "FAIL prune $name: $(head -c 1500 "$tmp/log.txt")"; failures+=("prune $name"); continue
  fi
  "$PY" - "$out" "$src" "$args" <<'PYEOF' 2>>"$tmp/log.txt" || { failures+=("prune $name"); head -c 999 "$tmp/log.txt"; }
import sys, numpy as np, torch, transformers as tf
out, src, args = sys.argv[1:]
model, info = tf.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32, output_loading_info=True)
ids, lengths = torch.from_numpy(np.load(f"{src}/ids.npy")), np.load(f"{src}/lengths.npy")
mask = (torch.arange(ids.shape[1])[None, :] < torch.from_numpy(lengths)[:, None]).long()
with torch.no_grad():
    ref = model.eval()(input_ids=ids, attention_mask=mask).logits.numpy()
got = np.load(out + ".npy")
err = max(np.abs(ref[i, :n] - got[i, :n]).max() for i, n in enumerate(lengths))
before = sum(p.numel() for p in tf.AutoModelForCausalLM.from_pretrained(src).parameters())
after = sum(p.numel() for p in model.parameters())
problems = {k: v for k, v in info.items() if v}
ok = err <= 1e-4 and not problems and after < before
print(f"{'ok  ' if ok else 'FAIL'} pare prune {args}: {type(model).__name__} of {after} parameters "
      f"(from {before}), transformers against pare max |logit diff| {err:.2e}{' ' + str(problems) if problems else ''}")
sys.exit(0 if ok else 1)
PYEOF
done
rc=0
"$PARE" prune "hf:$tmp/prune-src/llama" --calib-data text:/usr/share/games/fortunes/fortunes --heads 3 \
  --out "$tmp/pruned/bad" >/dev/null 2>"$tmp/err.txt" || rc=$?
if ((rc == 2)) && grep -q -- "--heads 3 must keep whole query groups (a multiple of 2)" "$tmp/err.txt" &&
   [[ ! -e "$tmp/pruned/bad" ]]; then echo "ok   bad prune heads: $(head -c 300 "$tmp/err.txt")"
else echo "FAIL bad prune heads: exit $rc, $(head -c 500 "$tmp/err.txt")"; failures+=("bad prune"); fi

# Bad requests: exit 2, the message names the problem, nothing written.
bad() {  # NAME REGEX OUT ARGS...
  local name=$1 regex=$2 out=$3
  shift 3
  local rc=0
  "$PARE" export "$@" --target hf --out "$out" >/dev/null 2>"$tmp/err.txt" || rc=$?
  if ((rc == 2)) && grep -qE -- "$regex" "$tmp/err.txt" && [[ ! -e "$out.partial" ]]; then echo "ok   bad $name: $(head -c 300 "$tmp/err.txt")"
  else echo "FAIL bad $name: exit $rc, $(head -c 500 "$tmp/err.txt")"; failures+=("bad $name"); fi
}
bad not_a_language_model "'mlp:784-10' is none" "$tmp/bad1" mlp:784-10
bad shard_size_spelling "--max-shard-size .*got '2 gigabytes'" "$tmp/bad2" "hf:$tmp/src/llama" --max-shard-size "2 gigabytes"
mkdir "$tmp/keep" && echo notes >"$tmp/keep/notes.txt"
bad out_folder_of_other_files "keep' is a folder that holds no Hugging Face checkpoint" "$tmp/keep" "hf:$tmp/src/llama"
[[ ! -e "$tmp/bad1" && ! -e "$tmp/bad2" && "$(cat "$tmp/keep/notes.txt")" == notes ]] ||
  { echo "FAIL bad requests wrote something"; failures+=("bad wrote"); }

if ((${#failures[@]})); then echo "FAILED: ${failures[*]}"; exit 1; fi
echo "all passed"
