// Tensors to and from the wire messages of federation.proto (internal to federated/). Decoding
// checks everything a message claims before a tensor is made of it.
#pragma once

#include <string>

#include "federated/update.h"
#include "federation.grpc.pb.h"

namespace pare::federated {

/// Appends `tensors` to `msg` as float32 wire tensors.
void encode_tensors(const Tensors& tensors, google::protobuf::RepeatedPtrField<wire::Tensor>* msg);

/// Decodes `msg` into `out`; returns why it cannot ("" when it can): a repeated or empty name, a
/// dtype other than "float32", a negative or too large dimension, or data whose size is not the
/// shape's (a truncated tensor).
std::string decode_tensors(const google::protobuf::RepeatedPtrField<wire::Tensor>& msg, Tensors* out);

}  // namespace pare::federated
