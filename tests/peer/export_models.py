#!/usr/bin/env python3
"""Exports PyTorch models to ONNX, with inputs and PyTorch's outputs as .npy, for the peer tests.

    .venv/bin/python export_models.py OUTDIR [--only NAME,...] [--keep-layers I,J,...]

Writes, for every model NAME: OUTDIR/NAME.onnx, and for every test batch size B:
OUTDIR/NAME.b{B}.input.npy and OUTDIR/NAME.b{B}.expected.npy. It prints one line per case on
stdout, "NAME MODEL INPUT EXPECTED ENGINES" (ENGINES: the `pare run --engine` values that run
it, comma-separated), for the test script to loop over.
With --keep-layers, the transformer also gets OUTDIR/transformer.b{B}.keep.expected.npy: the
outputs of the same model with only those encoder layers (a student derived from it).

Models are exported with batch 2 (dynamic batch axis) and tested at batches 1 and 5, so a runtime
that bakes the export batch into a shape fails. Weights are random from a fixed seed; BatchNorm
and LayerNorm parameters and running statistics are randomised too, so that a runtime that
ignored them would not pass by accident.
"""
import argparse
import os
import sys
import warnings

import numpy as np
import torch
import torch.nn as nn

EXPORT_BATCH = 2
TEST_BATCHES = (1, 5)


def randomize_norms(model, gen):
    """Gives every BatchNorm/LayerNorm non-trivial affine parameters and running statistics."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                c = m.num_features
                m.weight.copy_(torch.rand(c, generator=gen) * 0.5 + 0.75)
                m.bias.copy_(torch.randn(c, generator=gen) * 0.1)
                m.running_mean.copy_(torch.randn(c, generator=gen) * 0.1)
                m.running_var.copy_(torch.rand(c, generator=gen) * 0.5 + 0.75)
            elif isinstance(m, nn.LayerNorm) and m.elementwise_affine:
                shape = m.normalized_shape
                m.weight.copy_(torch.rand(shape, generator=gen) * 0.5 + 0.75)
                m.bias.copy_(torch.randn(shape, generator=gen) * 0.1)


class TokenClassifier(nn.Module):
    """nn.Embedding -> nn.TransformerEncoder (batch_first) -> mean over the sequence -> Linear."""

    def __init__(self, vocab=100, d=64, heads=4, layers=2, classes=10):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        layer = nn.TransformerEncoderLayer(d, heads, dim_feedforward=4 * d, dropout=0.1,
                                           batch_first=True)
        # The nested-tensor fast path does not trace; the plain path exports to standard ops.
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, classes)

    def forward(self, ids):
        return self.head(self.encoder(self.embed(ids)).mean(dim=1))


class NormMLP(nn.Module):
    """Linear -> LayerNorm -> GELU blocks (exact and tanh GELU), then a Linear classifier."""

    def __init__(self, d_in=32, hidden=64, classes=10):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(d_in, hidden), nn.LayerNorm(hidden), nn.GELU(),
            nn.Linear(hidden, hidden), nn.LayerNorm(hidden), nn.GELU(approximate="tanh"),
            nn.Linear(hidden, classes))

    def forward(self, x):
        return self.net(x)


class TinyUNet(nn.Module):
    """Two-level U-Net: Conv-BN-ReLU blocks, max-pool down, F.interpolate up (bilinear, then nearest),
    skip connections by concatenation: exported with Resize nodes (pytorch_half_pixel linear and
    asymmetric floor nearest)."""

    def __init__(self, c=8, classes=3):
        super().__init__()

        def block(cin, cout):
            return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU())

        self.enc1, self.enc2, self.mid = block(3, c), block(c, 2 * c), block(2 * c, 2 * c)
        self.dec2, self.dec1 = block(4 * c, c), block(2 * c, c)
        self.head = nn.Conv2d(c, classes, 1)

    def forward(self, x):
        import torch.nn.functional as F
        e1 = self.enc1(x)
        e2 = self.enc2(F.max_pool2d(e1, 2))
        m = self.mid(F.max_pool2d(e2, 2))
        d2 = self.dec2(torch.cat([F.interpolate(m, scale_factor=2.0, mode="bilinear", align_corners=False), e2], 1))
        d1 = self.dec1(torch.cat([F.interpolate(d2, scale_factor=2.0, mode="nearest"), e1], 1))
        return self.head(d1)


class LstmClassifier(nn.Module):
    """nn.Embedding -> 2-layer bidirectional nn.LSTM (batch_first) -> Linear on the last step."""

    def __init__(self, vocab=50, d=16, hidden=24, classes=5):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.lstm = nn.LSTM(d, hidden, num_layers=2, batch_first=True, bidirectional=True)
        self.head = nn.Linear(2 * hidden, classes)

    def forward(self, ids):
        y, _ = self.lstm(self.embed(ids))
        return self.head(y[:, -1])


class GptBlock(nn.Module):
    """A pre-LayerNorm GPT block with a causal mask from torch.triu of a tensor computed at run time
    (exported as Trilu, not folded into a constant), then a LayerNorm and a token classifier."""

    def __init__(self, vocab=64, d=32, heads=4, classes=64):
        super().__init__()
        self.heads = heads
        self.embed, self.pos = nn.Embedding(vocab, d), nn.Embedding(16, d)
        self.ln1, self.ln2, self.ln_f = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.head = nn.Linear(d, classes)

    def forward(self, ids):
        b, t = ids.shape
        x = self.embed(ids) + self.pos(torch.arange(t).unsqueeze(0))
        q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
        split = lambda z: z.reshape(b, t, self.heads, -1).transpose(1, 2)
        q, k, v = split(q), split(k), split(v)
        scores = q @ k.transpose(-2, -1) / (q.shape[-1] ** 0.5)
        future = torch.triu(torch.ones_like(scores), diagonal=1).bool()
        att = scores.masked_fill(future, float("-inf")).softmax(-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, -1))
        x = x + self.mlp(self.ln2(x))
        return self.head(self.ln_f(x))


def build(name):
    """-> (model, function(batch, generator) -> input tensor)."""
    import torchvision

    if name == "resnet18":
        return (torchvision.models.resnet18(weights=None),
                lambda b, g: torch.rand(b, 3, 224, 224, generator=g))
    if name == "mobilenet_v2":
        return (torchvision.models.mobilenet_v2(weights=None),
                lambda b, g: torch.rand(b, 3, 224, 224, generator=g))
    if name == "transformer":
        return (TokenClassifier(),
                lambda b, g: torch.randint(0, 100, (b, 16), generator=g, dtype=torch.int64))
    if name == "mlp_layernorm_gelu":
        return NormMLP(), lambda b, g: torch.randn(b, 32, generator=g)
    if name == "unet":
        return TinyUNet(), lambda b, g: torch.rand(b, 3, 32, 32, generator=g)
    if name == "lstm_classifier":
        return LstmClassifier(), lambda b, g: torch.randint(0, 50, (b, 12), generator=g, dtype=torch.int64)
    if name == "gpt_block":
        return GptBlock(), lambda b, g: torch.randint(0, 64, (b, 16), generator=g, dtype=torch.int64)
    raise ValueError(f"unknown model {name}")


MODELS = ("resnet18", "mobilenet_v2", "transformer", "mlp_layernorm_gelu", "unet", "lstm_classifier", "gpt_block")
# Per model: the opset it is exported with (Trilu needs 14, and PyTorch 2.x's TransformerEncoderLayer
# runs scaled_dot_product_attention, which its exporter writes from opset 14 on), the op its export must contain (the
# op it is here to test), and the engines of `pare run` that run it (pare_rt has no Resize, LSTM
# or Trilu yet).
OPSET = {"gpt_block": 14, "transformer": 14}
MUST_CONTAIN = {"unet": "Resize", "lstm_classifier": "LSTM", "gpt_block": "Trilu"}
ENGINES = {"unet": "torch", "lstm_classifier": "torch", "gpt_block": "torch"}


def export(name, outdir, seed, keep_layers=None):
    torch.manual_seed(seed)
    model, make_input = build(name)
    gen = torch.Generator().manual_seed(seed + 1)
    randomize_norms(model, gen)
    model.eval()
    path = os.path.join(outdir, name + ".onnx")
    # In eval mode under no_grad, nn.TransformerEncoderLayer takes its fused fast path
    # (aten::_transformer_encoder_layer_fwd), which the exporter cannot export. With autograd on and
    # parameters requiring grad it runs the plain ops, so the transformer is exported, and its
    # reference outputs computed, with grad enabled; the other models use no_grad. dynamo=False: the
    # TorchScript-based exporter at the opsets below (PyTorch 2.9 made the dynamo exporter, opset 18,
    # the default; these files stay what they were, so the checks keep their tolerances).
    grad = torch.enable_grad() if name == "transformer" else torch.no_grad()
    with grad, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (make_input(EXPORT_BATCH, gen),), path, opset_version=OPSET.get(name, 13),
                          dynamo=False, do_constant_folding=True, input_names=["input"], output_names=["output"],
                          dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
    if name in MUST_CONTAIN:
        import onnx
        ops = {n.op_type for n in onnx.load(path).graph.node}
        if MUST_CONTAIN[name] not in ops:
            sys.exit(f"export_models.py: the export of {name} has no {MUST_CONTAIN[name]} node (ops: {sorted(ops)})")
    cases = []
    for b in TEST_BATCHES:
        x = make_input(b, gen)
        with (torch.enable_grad() if name == "transformer" else torch.no_grad()):
            y = model(x).detach()
        xin = os.path.join(outdir, f"{name}.b{b}.input.npy")
        yexp = os.path.join(outdir, f"{name}.b{b}.expected.npy")
        np.save(xin, x.numpy())
        np.save(yexp, y.numpy())
        cases.append((name, path, xin, yexp, ENGINES.get(name, "torch,rt")))
    if keep_layers is not None and name == "transformer":
        model.encoder.layers = nn.ModuleList([model.encoder.layers[i] for i in keep_layers])
        model.encoder.num_layers = len(keep_layers)
        for _, _, xin, yexp, _ in cases:
            with torch.enable_grad():
                y = model(torch.from_numpy(np.load(xin))).detach()
            np.save(yexp.replace(".expected.npy", ".keep.expected.npy"), y.numpy())
    return cases


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("outdir")
    ap.add_argument("--only", default="", help="comma-separated subset of " + ",".join(MODELS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--keep-layers", default=None,
                    help="also write the transformer's outputs with only these encoder layers")
    args = ap.parse_args()
    keep = [int(i) for i in args.keep_layers.split(",")] if args.keep_layers else None
    names = [n for n in args.only.split(",") if n] or list(MODELS)
    for n in names:
        if n not in MODELS:
            ap.error(f"unknown model {n}; known: {', '.join(MODELS)}")
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    os.makedirs(args.outdir, exist_ok=True)
    for n in names:
        for case in export(n, args.outdir, args.seed, keep):
            print(" ".join(case))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
