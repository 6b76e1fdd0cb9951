"""The peers' side of tests/peer/gguf_export_test.sh: llama.cpp's own code reads and runs the GGUF
files `pare export --target gguf` writes.

    python gguf_export_peer.py make OUT_DIR TOKENIZER_JSON
        random-weight checkpoints made by transformers (save_pretrained) of the architectures llama.cpp
        runs and pare writes: llama (tied embeddings), mistral, qwen2 (q/k/v biases), qwen3 (q/k norms,
        head_dim 24 = not hidden/heads), gpt2; the tokenizer beside each. Prints NAME DIR per line.
    python gguf_export_peer.py tensors FILE HF_DIR
        gguf-py (llama.cpp's reader, PyPI gguf) opens FILE; its metadata must say what the Hugging Face
        folder's config.json and tokenizer.json say, and every tensor must be the checkpoint's tensor
        under gguf-py's own name map (gguf.get_tensor_name_map), in the layout of llama.cpp's
        convert_hf_to_gguf.py (Llama's q/k rows permuted, GPT-2's Conv1D weights transposed), stored
        as gguf.quants.quantize stores it, bit for bit (F32 F16 BF16 Q8_0 Q5_0 Q4_0); Q4_K, which gguf-py
        only dequantizes, as ggml's own quantize_row_q4_K_ref (ggml_quantize_chunk, called in
        llama.cpp's libggml-base through ctypes) stores it, bit for bit.
    python gguf_export_peer.py blocks FILE HF_DIR
        the decoder layers' matrices of FILE (`pare quantize --method gptq --out FILE.gguf`), as gguf-py
        dequantizes them, equal the values of HF_DIR (the same quantization written as a folder) bit
        for bit, in llama.cpp's layout: the GGUF holds GPTQ's codes, not a second rounding of them.
    python gguf_export_peer.py run FILE IDS_NPY OUT_DIR
        llama.cpp (llama-cpp-python) loads FILE and writes logits.npy: its logits at every position of
        the token ids (one sequence), fp32.
    python gguf_export_peer.py generate FILE PROMPT_IDS N
        prints llama.cpp's greedy continuation (N tokens) of the comma-separated ids.
    python gguf_export_peer.py tokenize FILE TEXT_FILE
        prints llama.cpp's ids of the text, space separated (BOS as the file says).
"""
import ctypes
import json
import os
import sys

import numpy as np

import gguf
from gguf import GGMLQuantizationType as Q


def make(out, tokenizer_json):
    import shutil
    import torch
    import transformers as tf
    vocab = json.load(open(tokenizer_json))
    n = len(vocab["model"]["vocab"]) + sum(a["id"] >= len(vocab["model"]["vocab"]) for a in vocab["added_tokens"])
    common = dict(vocab_size=n, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=512, bos_token_id=0, eos_token_id=0)
    cases = {
        "llama_tied": tf.LlamaForCausalLM(tf.LlamaConfig(**common, tie_word_embeddings=True)),
        "mistral": tf.MistralForCausalLM(tf.MistralConfig(**common, sliding_window=None)),
        "qwen2": tf.Qwen2ForCausalLM(tf.Qwen2Config(**common)),
        "qwen3": tf.Qwen3ForCausalLM(tf.Qwen3Config(**common, head_dim=24)),
        "gpt2": tf.GPT2LMHeadModel(tf.GPT2Config(vocab_size=n, n_embd=64, n_layer=2, n_head=4, n_positions=512,
                                                 bos_token_id=0, eos_token_id=0)),
    }
    for name, model in cases.items():
        torch.manual_seed(sum(map(ord, name)))
        with torch.no_grad():  # random weights scaled so the logits are not flat, biases and norms away from 0/1
            for p in model.parameters():
                p.copy_(torch.randn_like(p) * (0.1 if p.dim() == 1 else 0.5 / p.shape[-1] ** 0.5) + (p.dim() == 1) * 1.0)
        d = os.path.join(out, name)
        model.save_pretrained(d, max_shard_size="200KB")
        shutil.copy(tokenizer_json, os.path.join(d, "tokenizer.json"))
        print(name, d)
    return 0


def hf_tensors(d):
    from safetensors.numpy import load_file
    out = {}
    for f in sorted(os.listdir(d)):
        if f.endswith(".safetensors"):
            out.update(load_file(os.path.join(d, f)))
    return out


ARCH = {"llama": gguf.MODEL_ARCH.LLAMA, "mistral": gguf.MODEL_ARCH.LLAMA, "qwen2": gguf.MODEL_ARCH.QWEN2,
        "qwen3": gguf.MODEL_ARCH.QWEN3, "gpt2": gguf.MODEL_ARCH.GPT2}


def permute(w, n_head):  # convert_hf_to_gguf.py's LlamaModel.permute
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def expected(cfg, name, w):
    """The tensor as convert_hf_to_gguf.py lays it out."""
    mt = cfg["model_type"]
    heads = cfg.get("num_attention_heads") or cfg.get("n_head")
    if mt in ("llama", "mistral") and name.endswith(("q_proj.weight", "q_proj.bias")):
        return permute(w, heads)
    if mt in ("llama", "mistral") and name.endswith(("k_proj.weight", "k_proj.bias")):
        return permute(w, cfg.get("num_key_value_heads", heads))
    if mt == "gpt2" and name.endswith((".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight",
                                       ".mlp.c_proj.weight")):
        return w.T
    return w


def ggml_quantize(arr, qtype):
    """ggml's own quantizer (ggml_quantize_chunk in llama.cpp's libggml-base, no importance matrix)."""
    import llama_cpp
    lib = ctypes.CDLL(os.path.join(os.path.dirname(llama_cpp.__file__), "lib", "libggml-base.so"))
    lib.ggml_quantize_chunk.restype = ctypes.c_size_t
    lib.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                        ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
    src = np.ascontiguousarray(arr, dtype=np.float32)
    rows, cols = src.reshape(-1, src.shape[-1]).shape
    block, nbytes = gguf.GGML_QUANT_SIZES[qtype]
    dst = np.zeros(rows * cols // block * nbytes, dtype=np.uint8)
    n = lib.ggml_quantize_chunk(int(qtype), src.ctypes.data, dst.ctypes.data, 0, rows, cols, None)
    assert n == dst.size, (n, dst.size)
    return dst


def check_metadata(r, cfg, tok, failures):
    f = {k: v for k, v in r.fields.items()}
    def val(key):
        if key not in f:
            return None
        return f[key].contents()
    arch = val("general.architecture")
    want_arch = {"mistral": "llama"}.get(cfg["model_type"], cfg["model_type"])
    g = lambda *keys: next((cfg[k] for k in keys if cfg.get(k) is not None), None)
    heads = g("num_attention_heads", "n_head")
    want = {
        f"{arch}.embedding_length": g("hidden_size", "n_embd"),
        f"{arch}.block_count": g("num_hidden_layers", "n_layer"),
        f"{arch}.attention.head_count": heads,
        f"{arch}.context_length": g("max_position_embeddings", "n_positions"),
        f"{arch}.feed_forward_length": g("intermediate_size", "n_inner") or 4 * g("n_embd"),
    }
    if cfg["model_type"] != "gpt2":
        want[f"{arch}.attention.head_count_kv"] = g("num_key_value_heads") or heads
        want[f"{arch}.rope.freq_base"] = g("rope_theta") or cfg.get("rope_parameters", {}).get("rope_theta")
        want[f"{arch}.attention.layer_norm_rms_epsilon"] = np.float32(g("rms_norm_eps"))
    else:
        want[f"{arch}.attention.layer_norm_epsilon"] = np.float32(g("layer_norm_epsilon"))
    if arch != want_arch:
        failures.append(f"general.architecture {arch}, want {want_arch}")
    for k, v in want.items():
        got = val(k)
        if got is None or not np.isclose(float(got), float(v), rtol=1e-7):
            failures.append(f"{k} = {got}, want {v}")
    tokens = val("tokenizer.ggml.tokens")
    vocab = {i: t for t, i in tok["model"]["vocab"].items()}
    vocab.update({a["id"]: a["content"] for a in tok["added_tokens"]})
    want_tokens = [vocab.get(i, f"[PAD{i}]") for i in range(len(tokens))]
    if tokens != want_tokens:
        failures.append("tokenizer.ggml.tokens differ from tokenizer.json's vocabulary")
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]]
    if val("tokenizer.ggml.merges") != merges:
        failures.append("tokenizer.ggml.merges differ from tokenizer.json's")
    return arch


def tensors(path, hf_dir):
    r = gguf.GGUFReader(path)
    cfg = json.load(open(os.path.join(hf_dir, "config.json")))
    tok = json.load(open(os.path.join(hf_dir, "tokenizer.json")))
    failures = []
    arch = check_metadata(r, cfg, tok, failures)
    n_layers = cfg.get("num_hidden_layers") or cfg.get("n_layer")
    names = gguf.get_tensor_name_map(ARCH[cfg["model_type"]], n_layers)
    got = {t.name: t for t in r.tensors}
    seen = set()
    for name, w in hf_tensors(hf_dir).items():
        gname = names.get_name(name, try_suffixes=(".weight", ".bias"))
        if gname is None:
            failures.append(f"{name}: gguf-py has no name for it")
            continue
        seen.add(gname)
        if gname not in got:
            failures.append(f"{gname} ({name}) missing")
            continue
        t = got[gname]
        arr = np.ascontiguousarray(expected(cfg, name, w.astype(np.float32)))
        qtype = t.tensor_type
        if arr.ndim == 1 and qtype != Q.F32:
            failures.append(f"{gname}: 1-D tensor stored as {qtype.name}, want F32")
        want = ggml_quantize(arr, qtype) if qtype == Q.Q4_K else gguf.quants.quantize(arr, qtype)
        stored = np.asarray(t.data).view(np.uint8).reshape(-1)
        if not np.array_equal(stored, np.asarray(want).view(np.uint8).reshape(-1)):
            failures.append(f"{gname} ({qtype.name}): bytes differ from gguf-py's/ggml's quantization")
        deq = gguf.quants.dequantize(np.asarray(t.data), qtype).reshape(arr.shape)
        if qtype in (Q.Q8_0, Q.Q5_0, Q.Q4_0, Q.Q4_K) and not np.allclose(deq, arr, atol=np.abs(arr).max() / 4):
            failures.append(f"{gname}: dequantized values far from the weights")
    extra = set(got) - seen
    if extra and not (extra == {"output.weight"} and cfg.get("tie_word_embeddings")):
        failures.append(f"tensors the checkpoint lacks: {sorted(extra)}")
    types = sorted({t.tensor_type.name for t in r.tensors})
    for f in failures:
        print("FAIL", f)
    print(f"{os.path.basename(path)}: {arch}, {len(r.tensors)} tensors ({', '.join(types)}), {len(r.fields)} keys"
          + (": metadata and every tensor as llama.cpp's converter and quantizers write them" if not failures else ""))
    return 1 if failures else 0


def blocks(path, hf_dir):
    r = gguf.GGUFReader(path)
    cfg = json.load(open(os.path.join(hf_dir, "config.json")))
    names = gguf.get_tensor_name_map(ARCH[cfg["model_type"]], cfg.get("num_hidden_layers") or cfg.get("n_layer"))
    got = {t.name: t for t in r.tensors}
    failures, n = [], 0
    for name, w in hf_tensors(hf_dir).items():
        if ".layers." not in name and ".h." not in name:
            continue  # the layers' matrices, and their norms and biases (which AWQ's folds change)
        t = got[names.get_name(name, try_suffixes=(".weight", ".bias"))]
        want = np.ascontiguousarray(expected(cfg, name, w.astype(np.float32)))
        deq = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type).reshape(want.shape)
        n += 1
        if not np.array_equal(deq, want):
            failures.append(f"{t.name} ({t.tensor_type.name}): differs from {name} by {np.abs(deq - want).max():.3g}")
    for f in failures:
        print("FAIL", f)
    print(f"{n} layer tensors of {os.path.basename(path)} dequantize to the folder's values bit for bit"
          if not failures and n else f"{len(failures)} of {n} differ")
    return 1 if failures or not n else 0


def llama(path, n_ctx=512):
    """llama.cpp on the CPU, 2 threads, logits of every position, an fp32 KV cache (its default,
    f16, would round keys and values that pare keeps in fp32)."""
    import logging
    import llama_cpp
    logging.getLogger("llama-cpp-python").setLevel(logging.ERROR)
    return llama_cpp.Llama(model_path=path, n_gpu_layers=0, n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=n_ctx, n_threads=2,
                           n_threads_batch=2, logits_all=True, type_k=llama_cpp.GGML_TYPE_F32,
                           type_v=llama_cpp.GGML_TYPE_F32, verbose=False)


def run(path, ids_npy, out_dir):
    ids = np.load(ids_npy).reshape(-1).tolist()
    m = llama(path)
    m.eval(ids)
    np.save(os.path.join(out_dir, "logits.npy"), np.array(m.scores[:len(ids)], dtype=np.float32)[None])
    m.close()
    return 0


def generate(path, prompt, n):
    m = llama(path)
    ids = [int(x) for x in prompt.split(",")]
    out = []
    m.eval(ids)
    for _ in range(n):
        nxt = int(np.argmax(m.scores[m.n_tokens - 1]))
        out.append(nxt)
        m.eval([nxt])  # appends: the KV cache holds what came before
    m.close()
    print(" ".join(map(str, out)))
    return 0


def tokenize(path, text_file):
    m = llama(path)
    text = open(text_file, encoding="utf-8").read()
    ids = m.tokenize(text.encode("utf-8"), add_bos=True, special=True)  # BOS only where the file says add_bos_token
    m.close()
    print(" ".join(map(str, ids)))
    return 0


def main():
    cmd, *args = sys.argv[1:]
    if cmd == "make":
        return make(*args)
    if cmd == "tensors":
        return tensors(*args)
    if cmd == "blocks":
        return blocks(*args)
    if cmd == "run":
        return run(*args)
    if cmd == "generate":
        return generate(args[0], args[1], int(args[2]))
    if cmd == "tokenize":
        return tokenize(*args)
    raise SystemExit(f"unknown command {cmd}")


if __name__ == "__main__":
    sys.exit(main())
