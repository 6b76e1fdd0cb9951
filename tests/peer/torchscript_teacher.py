#!/usr/bin/env python3
"""Writes TorchScript teachers and PyTorch's logits for tests/peer/torchscript_teacher_test.sh.

    torchscript_teacher.py OUTDIR

OUTDIR gets x.npy (float32 [5, 1, 28, 28] in [0, 1]) and, per case, <case>.pt plus <case>.expected.npy
(PyTorch's logits in eval mode, float32):
    scripted      torch.jit.script of a BatchNorm CNN with Dropout, saved while in *training* mode, so
                  a loader that forgets eval() gets batch statistics and dropout and a different answer
    traced_tuple  torch.jit.trace (in eval mode) of a model returning (logits, features)
    float64       the scripted CNN converted with .double() (pare casts it to float32)
and corrupt.pt, which is not a TorchScript archive.
"""
import os
import sys

import numpy as np
import torch
from torch import nn


class Cnn(nn.Module):
    def __init__(self, classes: int = 10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(16)
        self.drop = nn.Dropout(0.5)
        self.fc = nn.Linear(16 * 7 * 7, classes)

    def forward(self, x):
        x = torch.max_pool2d(torch.relu(self.bn1(self.conv1(x))), 2)
        x = torch.max_pool2d(torch.relu(self.bn2(self.conv2(x))), 2)
        return self.fc(self.drop(torch.flatten(x, 1)))


class WithFeatures(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(784, 32), nn.LayerNorm(32), nn.GELU())
        self.head = nn.Linear(32, 6)

    def forward(self, x):
        f = self.body(x)
        return self.head(f), f


def randomize_bn(model):
    # Non-trivial running statistics, so eval mode (running stats) and train mode (batch stats) differ.
    g = torch.Generator().manual_seed(1)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.5)
            m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            m.weight.data.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            m.bias.data.copy_(torch.randn(m.num_features, generator=g) * 0.1)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    x = torch.rand(5, 1, 28, 28)
    np.save(os.path.join(out, "x.npy"), x.numpy())

    with torch.no_grad():
        cnn = Cnn()
        randomize_bn(cnn)
        cnn.eval()
        expected = cnn(x)
        cnn.train()
        torch.jit.script(cnn).save(os.path.join(out, "scripted.pt"))
        np.save(os.path.join(out, "scripted.expected.npy"), expected.numpy().astype(np.float32))

        wf = WithFeatures().eval()
        np.save(os.path.join(out, "traced_tuple.expected.npy"), wf(x)[0].numpy().astype(np.float32))
        torch.jit.trace(wf, x).save(os.path.join(out, "traced_tuple.pt"))

        dbl = Cnn(classes=4)
        randomize_bn(dbl)
        dbl = dbl.double().eval()
        np.save(os.path.join(out, "float64.expected.npy"), dbl(x.double()).numpy().astype(np.float32))
        torch.jit.script(dbl).save(os.path.join(out, "float64.pt"))

    with open(os.path.join(out, "corrupt.pt"), "wb") as f:
        f.write(b"PK\x03\x04 this is not a TorchScript archive")
    print(torch.__version__)


if __name__ == "__main__":
    main()
