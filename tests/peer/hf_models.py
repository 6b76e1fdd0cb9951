"""Makes the Hugging Face checkpoints that tests/peer/hf_models_test.sh runs in pare: one per
architecture of lm/arch.h, random weights (seeded) from a small config, saved by transformers'
save_pretrained in several safetensors shards; with each, a batch of token ids (right-padded: rows
of different lengths), transformers' logits on it, and 32 tokens of greedy generation.

    python hf_models.py OUT_DIR [--only llama,gpt2]

Prints one line per case: NAME DIR  (the folder holds ids.npy, lengths.npy, logits.npy,
prompt.npy, generated.npy beside the checkpoint files).
"""
import argparse
import os
import sys

import numpy as np
import torch
import transformers as tf

COMMON = dict(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=128, bos_token_id=1, eos_token_id=2)


def configs():
    return {
        "llama": tf.LlamaConfig(**COMMON, rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                         "high_freq_factor": 4.0, "original_max_position_embeddings": 32}),
        "llama_tied": tf.LlamaConfig(**dict(COMMON, num_key_value_heads=4), tie_word_embeddings=True),
        "mistral": tf.MistralConfig(**COMMON, sliding_window=None),
        "qwen2": tf.Qwen2Config(**COMMON),
        "qwen3": tf.Qwen3Config(**COMMON, head_dim=24),
        "gpt2": tf.GPT2Config(vocab_size=256, n_embd=64, n_layer=2, n_head=4, n_positions=128, bos_token_id=1,
                              eos_token_id=2),
    }


CLASSES = {"llama": tf.LlamaForCausalLM, "llama_tied": tf.LlamaForCausalLM, "mistral": tf.MistralForCausalLM,
           "qwen2": tf.Qwen2ForCausalLM, "qwen3": tf.Qwen3ForCausalLM, "gpt2": tf.GPT2LMHeadModel}


def make(name, cfg, out):
    torch.manual_seed(sum(map(ord, name)))
    model = CLASSES[name](cfg).eval()
    with torch.no_grad():  # biases and norms away from their initial 0/1, so that a wrong one shows
        for n, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(torch.randn_like(p) * 0.1)
    d = os.path.join(out, name)
    model.save_pretrained(d, max_shard_size="100KB")
    g = torch.Generator().manual_seed(7)
    lengths = torch.tensor([12, 9, 5])
    ids = torch.randint(3, cfg.vocab_size, (3, 12), generator=g)
    mask = torch.arange(12)[None, :] < lengths[:, None]
    ids[~mask] = 0  # right padding: the valid positions never see it (causal)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask.long()).logits
        prompt = ids[:1, :6]
        model.generation_config.eos_token_id = None  # 32 tokens whatever comes (pare: --ignore-eos)
        gen = model.generate(prompt, max_new_tokens=32, do_sample=False, pad_token_id=0,
                             attention_mask=torch.ones_like(prompt))
    np.save(os.path.join(d, "ids.npy"), ids.numpy())
    np.save(os.path.join(d, "lengths.npy"), lengths.numpy())
    np.save(os.path.join(d, "logits.npy"), logits.float().numpy())
    np.save(os.path.join(d, "prompt.npy"), prompt.numpy())
    np.save(os.path.join(d, "generated.npy"), gen[0, prompt.shape[1]:].numpy())
    shards = [f for f in os.listdir(d) if f.endswith(".safetensors")]
    print(name, d, len(shards))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    only = set(filter(None, a.only.split(",")))
    for name, cfg in configs().items():
        if not only or name in only:
            make(name, cfg, a.out)


if __name__ == "__main__":
    sys.exit(main())
