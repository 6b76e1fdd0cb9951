#!/usr/bin/python3
"""Exports PyTorch models to ONNX, with inputs and PyTorch's outputs as .npy, for the peer tests.

    /usr/bin/python3 export_models.py OUTDIR [--only NAME,...] [--keep-layers I,J,...]

Writes, for every model NAME: OUTDIR/NAME.onnx, and for every test batch size B:
OUTDIR/NAME.b{B}.input.npy and OUTDIR/NAME.b{B}.expected.npy. It prints one line per case on
stdout, "NAME MODEL INPUT EXPECTED", for the test script to loop over.
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
    raise ValueError(f"unknown model {name}")


MODELS = ("resnet18", "mobilenet_v2", "transformer", "mlp_layernorm_gelu")


def export(name, outdir, seed, keep_layers=None):
    torch.manual_seed(seed)
    model, make_input = build(name)
    gen = torch.Generator().manual_seed(seed + 1)
    randomize_norms(model, gen)
    model.eval()
    path = os.path.join(outdir, name + ".onnx")
    # In eval mode under no_grad, nn.TransformerEncoderLayer takes its fused fast path
    # (aten::_transformer_encoder_layer_fwd), which torch 1.13 cannot export. With autograd on and
    # parameters requiring grad it runs the plain ops, so the transformer is exported, and its
    # reference outputs computed, with grad enabled; the other models use no_grad.
    grad = torch.enable_grad() if name == "transformer" else torch.no_grad()
    with grad, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (make_input(EXPORT_BATCH, gen),), path, opset_version=13,
                          do_constant_folding=True, input_names=["input"], output_names=["output"],
                          dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
    cases = []
    for b in TEST_BATCHES:
        x = make_input(b, gen)
        with (torch.enable_grad() if name == "transformer" else torch.no_grad()):
            y = model(x).detach()
        xin = os.path.join(outdir, f"{name}.b{b}.input.npy")
        yexp = os.path.join(outdir, f"{name}.b{b}.expected.npy")
        np.save(xin, x.numpy())
        np.save(yexp, y.numpy())
        cases.append((name, path, xin, yexp))
    if keep_layers is not None and name == "transformer":
        model.encoder.layers = nn.ModuleList([model.encoder.layers[i] for i in keep_layers])
        model.encoder.num_layers = len(keep_layers)
        for _, _, xin, yexp in cases:
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
