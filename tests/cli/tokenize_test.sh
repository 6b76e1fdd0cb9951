#!/usr/bin/env bash
# pare tokenize: ids of --text and of stdin lines, --json, --no-special, --decode back to the text;
# and the bad inputs (missing file, tokenizers of other kinds, unknown patterns, bad ids): exit 2
# naming the file and the key, nothing on stdout.
source "$(dirname "$0")/lib.sh"

# A byte-level BPE by hand: bytes as GPT-2 spells them ("Ġ" is the space), two merges, a special
# token that the template puts first.
cat >"$work/tok.json" <<'EOF'
{"version": "1.0", "truncation": null, "padding": null,
 "added_tokens": [{"id": 7, "content": "<s>", "special": true, "normalized": false}],
 "normalizer": null,
 "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
 "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
   {"Sequence": {"id": "A", "type_id": 0}}], "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [7], "tokens": ["<s>"]}}},
 "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
 "model": {"type": "BPE", "dropout": null, "unk_token": null, "fuse_unk": false, "byte_fallback": false,
   "vocab": {"h": 0, "i": 1, "Ġ": 2, "Ġh": 3, "Ġhi": 4, "hi": 5, "!": 6, "<s>": 7}, "merges": ["Ġ h", "Ġh i", "h i"]}}
EOF

check() {  # check WANT GOT LABEL
  if [[ "$1" == "$2" ]]; then echo "ok: $3"; else fail "$3: want '$1', got '$2'"; fi
}
check "7 5 4 6" "$("$PARE" tokenize "$work/tok.json" --text "hi hi!")" "--text adds BOS"
check "5 4 6" "$("$PARE" tokenize "$work/tok.json" --text "hi hi!" --no-special)" "--no-special"
check $'[7,5]\n[7,4,4]\n[7]' "$(printf 'hi\n hi hi\n\n' | "$PARE" tokenize "$work/tok.json" --json)" "stdin lines, --json"
check "hi hi!" "$("$PARE" tokenize "$work/tok.json" --decode --text "7 5 4 6" --no-special)" "--decode skips <s>"
check "<s>hi hi!" "$("$PARE" tokenize "$work/tok.json" --decode --text "7 5 4 6")" "--decode keeps <s>"
check '"hi"' "$(echo '[5]' | "$PARE" tokenize "$work/tok.json" --decode --json)" "--decode --json"

# refuses PATTERN ARGS...: exit 2, the message matches PATTERN, stdout stays empty.
refuses() {
  local pattern=$1; shift
  local rc=0
  "$PARE" tokenize "$@" >"$work/out.txt" 2>"$work/err.txt" <"${stdin:-/dev/null}" || rc=$?
  if ((rc != 2)); then fail "exit $rc (want 2): tokenize $*: $(cat "$work/err.txt")"; return; fi
  if ! grep -qE -- "$pattern" "$work/err.txt"; then fail "message lacks /$pattern/: $(cat "$work/err.txt")"; return; fi
  if [[ -s "$work/out.txt" ]]; then fail "partial output on stdout: $(head -c 200 "$work/out.txt")"; return; fi
  echo "ok: refused /$pattern/"
}

refuses "missing.json" "$work/missing.json" --text hi
cat >"$work/wordpiece.json" <<'EOF'
{"normalizer": null, "pre_tokenizer": {"type": "BertPreTokenizer"}, "post_processor": null, "decoder": null,
 "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##", "vocab": {"[UNK]": 0, "a": 1}}}
EOF
refuses "wordpiece.json.*'model.type'.*WordPiece" "$work/wordpiece.json" --text hi
cat >"$work/unigram.json" <<'EOF'
{"normalizer": null, "pre_tokenizer": null, "post_processor": null, "decoder": null,
 "model": {"type": "Unigram", "unk_id": 0, "vocab": [["<unk>", 0.0], ["a", -1.0]]}}
EOF
refuses "unigram.json.*'model.type'.*Unigram" "$work/unigram.json" --text hi
sed 's/"type": "ByteLevel", "add_prefix_space": false/"type": "Whitespace", "add_prefix_space": false/' \
  "$work/tok.json" >"$work/whitespace.json"
refuses "whitespace.json.*'pre_tokenizer.type'.*Whitespace" "$work/whitespace.json" --text hi
python3 - "$work" <<'PYEOF'
import json, sys
d = sys.argv[1]
j = json.load(open(f"{d}/tok.json"))
j["pre_tokenizer"] = {"type": "Split", "pattern": {"Regex": r"\p{L}+"}, "behavior": "Isolated", "invert": False}
json.dump(j, open(f"{d}/pattern.json", "w"))
PYEOF
refuses "pattern.json.*'pre_tokenizer.pattern'" "$work/pattern.json" --text hi
echo '{"model": ' >"$work/truncated.json"
refuses "truncated.json.*not a tokenizer.json" "$work/truncated.json" --text hi
# Bad ids and bad text: nothing printed, not even the good lines before them.
stdin=<(printf '[5]\n[99]\n') refuses "token id 99 is outside the vocabulary" "$work/tok.json" --decode --json
stdin=<(printf '5\nfive\n') refuses "stdin:2: 'five' is not a token id" "$work/tok.json" --decode
stdin=<(printf 'hi\n\xff\n') refuses "valid UTF-8" "$work/tok.json"
finish
