// Model state, flattening and the checks every update passes before it is aggregated.
#include <gtest/gtest.h>

#include <limits>

#include "core/onnx_io.h"
#include "federated/update.h"
#include "federated/wire.h"
#include "tests/test_util.h"

namespace fed = pare::federated;

TEST(FederatedUpdate, LayoutFlattenUnflattenAndApply) {
  pare::core::Graph g = pare::core::load_model("mlp:784-8-2", 1);
  const fed::Layout l = fed::state_layout(g);
  EXPECT_EQ(l.size, 784 * 8 + 8 + 8 * 2 + 2);
  EXPECT_TRUE(std::is_sorted(l.names.begin(), l.names.end()));
  const at::Tensor flat = at::arange(l.size, at::kFloat);
  const fed::Tensors parts = fed::unflatten(flat, l);
  EXPECT_TRUE(pare::testing::bitwise_equal(fed::flatten(parts, l), flat));
  const fed::Tensors before = fed::state_of(g, l);
  fed::apply_update(g, flat, l, 0.5);
  const fed::Tensors delta = fed::difference(fed::state_of(g, l), before, l);
  EXPECT_TRUE(at::allclose(fed::flatten(delta, l), flat * 0.5));
}

TEST(FederatedUpdate, CheckNamesWhatIsWrong) {
  const fed::Layout l = fed::state_layout(pare::core::load_model("mlp:784-8-2", 1));
  fed::Tensors ok = fed::unflatten(at::zeros({l.size}), l);
  EXPECT_EQ(fed::check_update(ok, l), "");
  fed::Tensors missing = ok;
  missing.erase(l.names[0]);
  EXPECT_EQ(fed::check_update(missing, l), "tensor '" + l.names[0] + "' is missing");
  fed::Tensors wrong = ok;
  wrong[l.names[1]] = at::zeros({3}, at::kFloat);
  EXPECT_NE(fed::check_update(wrong, l).find("has shape [3]"), std::string::npos) << fed::check_update(wrong, l);
  fed::Tensors dbl = ok;
  dbl[l.names[0]] = dbl[l.names[0]].to(at::kDouble);
  EXPECT_NE(fed::check_update(dbl, l).find("not float32"), std::string::npos);
  fed::Tensors inf = ok;
  inf[l.names[2]] = inf[l.names[2]].clone();
  inf[l.names[2]].view({-1})[0] = std::numeric_limits<float>::infinity();
  inf[l.names[2]].view({-1})[1] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(fed::check_update(inf, l), "tensor '" + l.names[2] + "' has 2 NaN or Inf values");
}

TEST(FederatedUpdate, WireDecodingChecksWhatAMessageClaims) {
  google::protobuf::RepeatedPtrField<fed::wire::Tensor> msg;
  fed::encode_tensors({{"w", at::ones({2, 3})}}, &msg);
  fed::Tensors out;
  EXPECT_EQ(fed::decode_tensors(msg, &out), "");
  EXPECT_TRUE(pare::testing::bitwise_equal(out.at("w"), at::ones({2, 3})));
  auto refused = [](google::protobuf::RepeatedPtrField<fed::wire::Tensor> m) {
    fed::Tensors o;
    return fed::decode_tensors(m, &o);
  };
  auto bad = msg;
  bad.Mutable(0)->set_dtype("float64");
  EXPECT_NE(refused(bad).find("dtype 'float64'"), std::string::npos);
  bad = msg;
  bad.Mutable(0)->set_shape(0, -1);
  EXPECT_NE(refused(bad).find("impossible shape"), std::string::npos);
  bad = msg;
  bad.Mutable(0)->set_shape(0, int64_t(1) << 40);
  bad.Mutable(0)->set_shape(1, int64_t(1) << 40);  // the product overflows
  EXPECT_NE(refused(bad).find("impossible shape"), std::string::npos);
  bad = msg;
  bad.Mutable(0)->mutable_data()->pop_back();
  EXPECT_EQ(refused(bad), "tensor 'w' holds 23 bytes, its shape needs 24 (truncated or padded)");
  bad = msg;
  *bad.Add() = msg.Get(0);
  EXPECT_EQ(refused(bad), "tensor 'w' appears twice");
  bad = msg;
  bad.Mutable(0)->set_name("");
  EXPECT_EQ(refused(bad), "a tensor has no name");
}
