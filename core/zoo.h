// The model zoo: spec strings that build Graphs with PyTorch-style initialisation
// (nn.Linear / nn.Conv2d: kaiming_uniform(a=sqrt(5)) weights and U(-1/sqrt(fan_in), 1/sqrt(fan_in))
// biases; BatchNorm weight 1, bias 0, mean 0, var 1; LayerNorm 1/0; token embeddings N(0,1),
// learned positions N(0,0.02)), all drawn from one generator seeded with `seed`.
//
//   mlp:784-300-100-10        Flatten, then Gemm+Relu layers (the last without Relu)
//   lenet5                    LeNet-5 for 1x28x28 inputs (Conv 6@5x5 pad 2, pool, Conv 16@5x5,
//                             pool, Gemm 120-84-10)
//   cnn                       BatchNorm CNN, the Fashion-MNIST teacher: three stages of
//                             Conv3x3 (32, 64, 64 channels, pad 1, no bias), BN, Relu, MaxPool 2
//                             (28 -> 14 -> 7 -> 3), then Flatten, Gemm 576->256, Relu, Dropout 0.3,
//                             Gemm 10 (about 6 M MACs a sample)
//   resnet:N                  CIFAR-style ResNet with N blocks per stage (3 stages, 16/32/64)
//   transformer:vocab=V,d=D,heads=H,layers=L,classes=C,seq=S[,ff=F,norm=pre|post]
//                             encoder classifier on int64 ids [N, S] (ff defaults to 4*D, norm
//                             to pre-LN with a final LayerNorm), mean over the sequence, Gemm
//
// Image models take "input" [N, 1, 28, 28] by default (`in=C` / `hw=H` options where offered,
// `classes=K` for lenet5, cnn and resnet), every model has one output "logits" [N, classes].
//
// Nodes and their output values share predictable names: "conv1", "bn1", "relu1", "fc1";
// "layer2.0.conv1" in the ResNet; and in the transformer, per layer i, "layer<i>.ln1",
// "layer<i>.attn.{q,k,v}" (projections), "layer<i>.attn.scores", "layer<i>.attn.softmax"
// ([N, H, S, S]), "layer<i>.attn.context", "layer<i>.attn.out", "layer<i>.attn_residual",
// "layer<i>.ffn.fc1", "layer<i>.ffn.gelu", "layer<i>.ffn.fc2", "layer<i>.ffn_residual".
// Weights are "<node>.weight" / "<node>.bias" (BatchNorm also ".running_mean" / ".running_var").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/graph.h"

namespace pare::core {

/// True if `spec` names a zoo model (by prefix), so callers can tell specs from file paths.
bool is_zoo_spec(const std::string& spec);

/// Builds the model named by `spec`, weights drawn from a generator seeded with `seed`.
/// Throws InputError with the list of known specs on anything unknown or malformed.
Graph build_zoo_model(const std::string& spec, uint64_t seed = 0);

/// One line per zoo family, for --help.
std::vector<std::string> zoo_help();

}  // namespace pare::core
