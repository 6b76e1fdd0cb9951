// Byzantine clients for experiments: what an attacker sends instead of its honest update.
// Update attacks rewrite the flat update [d]; label flipping poisons the client's data instead.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>

namespace pare::federated {

enum class AttackKind { kNone, kSignFlip, kScaling, kGaussian, kLabelFlip, kAlie };

/// "none", "sign-flip", "scaling", "gaussian", "label-flip", "alie"; InputError naming the value
/// otherwise.
AttackKind parse_attack(const std::string& name);
std::string attack_name(AttackKind kind);

struct AttackOptions {
  double scale = 10;     ///< scaling: the factor (a boosted update)
  double flip = 4;       ///< sign-flip: the reversed update's factor (4, as in Li et al. 2019, RSA)
  double sigma = 1;      ///< gaussian: standard deviation of the noise that replaces the update
  uint64_t seed = 0;     ///< gaussian: noise seed
};

/// sign-flip: -flip * u. scaling: scale * u. gaussian: N(0, sigma^2) noise of u's shape, drawn from the
/// seed. Others (none, label-flip, alie): u unchanged.
at::Tensor attack_update(AttackKind kind, const at::Tensor& u, const AttackOptions& opts);

/// Label flipping: y -> classes - 1 - y (int64 labels in [0, classes)).
at::Tensor flip_labels(const at::Tensor& y, int64_t classes);

/// "A little is enough" (Baruch et al. 2019): from honest updates H [k, d] (the colluding
/// attackers' own honest updates), returns mean(H) - z * std(H) per coordinate, where for n
/// clients of which f attack s = floor(n / 2 + 1) - f and z = Phi^-1((n - s) / n) (Phi: the
/// standard normal CDF). std is the population standard deviation (0 for k = 1).
at::Tensor alie_update(const at::Tensor& H, int64_t n, int64_t f);
/// The z above (exposed for tests).
double alie_z(int64_t n, int64_t f);

}  // namespace pare::federated
