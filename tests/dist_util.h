// Ranks as threads of one test process, each with a real c10d group (Gloo or NCCL) over a TCPStore
// on a free loopback port: for the tests of dist/ and of the GPU paths.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <exception>
#include <functional>
#include <thread>
#include <vector>

#include "dist/ddp.h"
#include "dist/world.h"

namespace pare::testing {

/// A TCP port that was free a moment ago.
inline int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

/// Runs fn(rank, group) on `ranks` threads joined in one process group over `backend` (its
/// collectives on `device`); rethrows a rank's failure.
inline void on_ranks(int ranks, const std::function<void(int, std::shared_ptr<dist::ProcessGroup>)>& fn,
                     dist::Backend backend = dist::Backend::kGloo, at::Device device = at::kCPU) {
  const int port = free_port();
  std::vector<std::exception_ptr> errors(ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      try {
        dist::World w;
        w.rank = r;
        w.world_size = w.local_world_size = ranks;
        w.master_port = port;
        fn(r, dist::ProcessGroup::connect(w, backend, device, std::chrono::seconds(60)));
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace pare::testing

namespace pare::testing {

/// Two ranks' GradientSync on `device` over `backend`: rank r holds gradients (r + 1) * base and
/// saw r + 1 samples; a third parameter has no gradient on rank 0 (it counts as zero there). Every
/// rank must end with the sample-weighted mean, on `device`, in each parameter's dtype.
inline void expect_gradient_sync_averages(at::Device device, dist::Backend backend) {
  const std::vector<at::Tensor> base = {at::arange(12, at::kFloat).view({3, 4}) - 5, at::linspace(-1, 1, 5),
                                        at::full({2}, 0.5f)};
  const std::vector<double> want_scale = {5.0 / 3, 5.0 / 3, 4.0 / 3};  // (1*1 + 2*2) / 3, (0 + 2*2) / 3
  on_ranks(
      2,
      [&](int r, std::shared_ptr<dist::ProcessGroup> pg) {
        std::vector<at::Tensor> params;
        for (size_t k = 0; k < base.size(); ++k) {
          params.push_back(at::zeros_like(base[k]).to(device).requires_grad_());
          if (k < 2 || r == 1) params.back().mutable_grad() = (base[k] * (r + 1)).to(device);
        }
        dist::GradientSync sync(pg, params, /*bucket_bytes=*/16);
        ASSERT_EQ(sync.buckets(), 2u);
        sync.sync(r + 1);
        for (size_t k = 0; k < base.size(); ++k) {
          const at::Tensor g = params[k].grad();
          ASSERT_TRUE(g.defined()) << "rank " << r << " parameter " << k;
          EXPECT_EQ(g.device(), device);
          EXPECT_TRUE(at::allclose(g.cpu(), base[k] * want_scale[k], 1e-6, 1e-6))
              << "rank " << r << " parameter " << k << ": " << g.cpu();
        }
      },
      backend, device);
}

}  // namespace pare::testing
