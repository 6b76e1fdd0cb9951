#include "federated/wire.h"

#include <cstring>

namespace pare::federated {

void encode_tensors(const Tensors& tensors, google::protobuf::RepeatedPtrField<wire::Tensor>* msg) {
  for (const auto& [name, t] : tensors) {
    const at::Tensor c = t.to(at::kFloat).contiguous().cpu();
    wire::Tensor* w = msg->Add();
    w->set_name(name);
    for (int64_t d : c.sizes()) w->add_shape(d);
    w->set_dtype("float32");
    w->set_data(c.data_ptr(), c.numel() * sizeof(float));
  }
}

std::string decode_tensors(const google::protobuf::RepeatedPtrField<wire::Tensor>& msg, Tensors* out) {
  constexpr int64_t kMaxElements = int64_t(1) << 40;
  for (const wire::Tensor& w : msg) {
    const std::string who = "tensor '" + w.name() + "'";
    if (w.name().empty()) return "a tensor has no name";
    if (out->count(w.name())) return who + " appears twice";
    if (w.dtype() != "float32") return who + " has dtype '" + w.dtype() + "', not float32";
    int64_t numel = 1;
    std::vector<int64_t> shape;
    for (int64_t d : w.shape()) {
      if (d < 0 || d > kMaxElements || (d > 0 && numel > kMaxElements / d))
        return who + " has an impossible shape (dimension " + std::to_string(d) + ")";
      numel *= d;
      shape.push_back(d);
    }
    const size_t want = size_t(numel) * sizeof(float);
    if (w.data().size() != want)
      return who + " holds " + std::to_string(w.data().size()) + " bytes, its shape needs " + std::to_string(want) +
             " (truncated or padded)";
    at::Tensor t = at::empty(shape, at::kFloat);
    if (want > 0) std::memcpy(t.data_ptr(), w.data().data(), want);
    (*out)[w.name()] = std::move(t);
  }
  return "";
}

}  // namespace pare::federated
