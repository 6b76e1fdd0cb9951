// pare_rt's promise: after the first run at a given input shape, a run allocates nothing (the plan,
// its primitives and its arena are made once). Counted with a replaced global operator new; an
// allocation made inside oneDNN (whose 2.6 execute() builds a map of its arguments on every call:
// a few small blocks per primitive) is counted apart, by the library its caller lives in.
#include <dlfcn.h>
#include <execinfo.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>

#include "core/onnx_io.h"
#include "core/zoo.h"
#include "rt/rt.h"
#include "quantize/ptq.h"

namespace {
std::atomic<bool> counting{false};
std::atomic<int64_t> allocations{0}, onednn_allocations{0};

// True when a frame of the caller's stack lies in libdnnl.
bool inside_onednn() {
  void* frames[24];
  const int n = backtrace(frames, 24);
  for (int i = 1; i < n; ++i) {
    Dl_info info;
    if (dladdr(frames[i], &info) && info.dli_fname && std::strstr(info.dli_fname, "libdnnl")) return true;
  }
  return false;
}
}  // namespace

void* operator new(size_t n) {
  if (counting.exchange(false)) {  // not counting the counter's own work
    (inside_onednn() ? onednn_allocations : allocations).fetch_add(1);
    counting = true;
  }
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }

namespace pare::rt {
namespace {

// Allocations made by `runs` runs of `m` on `x` after a first run at the same shape.
int64_t allocations_per_run(Model& m, std::vector<float>& x, std::vector<int64_t> dims, int runs) {
  const std::vector<TensorView> in = {TensorView::of(x.data(), dims)};
  m.run(in);  // the plan of this shape is made here
  void* warm[4];
  backtrace(warm, 4);  // its first call loads libgcc's unwinder, which allocates
  allocations = 0;
  onednn_allocations = 0;
  counting = true;
  for (int i = 0; i < runs; ++i) m.run(in);
  counting = false;
  std::printf("%lld allocations inside oneDNN over %d runs (its execute() builds its argument map)\n",
              static_cast<long long>(onednn_allocations.load()), runs);
  return allocations.load();
}

std::vector<float> images(int64_t n) {
  std::vector<float> x(static_cast<size_t>(n * 784));
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 7919) % 1000) / 1000.f;
  return x;
}

TEST(RtAllocation, FloatCnnRunAllocatesNothingAfterItsFirstRunAtAShape) {
  Model m = Model::load_bytes(core::serialize_onnx(core::build_zoo_model("cnn", 1)), "cnn");
  auto x = images(8);
  EXPECT_EQ(allocations_per_run(m, x, {8, 1, 28, 28}, 5), 0);
  auto y = images(3);  // another batch size gets its own plan, then allocates nothing either
  EXPECT_EQ(allocations_per_run(m, y, {3, 1, 28, 28}, 5), 0);
}

TEST(RtAllocation, Int8ResnetRunAllocatesNothingAfterItsFirstRunAtAShape) {
  core::Graph g = core::build_zoo_model("resnet:1", 2);
  at::Tensor calib = at::rand({32, 1, 28, 28});
  core::Graph q = quantize::quantize_static(g, calib, quantize::PtqOptions()).graph;
  Model m = Model::load_bytes(core::serialize_onnx(q), "resnet-int8");
  ASSERT_GT(m.report().int8_ops, 0) << m.report().to_text();
  auto x = images(4);
  EXPECT_EQ(allocations_per_run(m, x, {4, 1, 28, 28}, 5), 0);
}

TEST(RtAllocation, CountingSeesAnAllocation) {  // the counter itself works
  allocations = 0;
  counting = true;
  auto* p = new std::vector<int>(100);
  counting = false;
  delete p;
  EXPECT_GE(allocations.load(), 1);
}

}  // namespace
}  // namespace pare::rt
