// The wire format of pipeline traffic: a tensor of any dtype and shape sent point-to-point as a
// fixed-size int64 header (dtype, rank, sizes), then its data.
#include "core/error.h"
#include "dist/shard_internal.h"
#include "dist/world.h"

namespace pare::dist::detail {
namespace {
constexpr int64_t kMaxRank = 8;
}  // namespace

void send_tensor(ProcessGroup& pg, const at::Tensor& t, int dst, int tag, std::vector<at::Tensor>& keep) {
  PARE_CHECK(t.dim() <= kMaxRank, "a pipeline boundary value has rank ", t.dim(), " (at most ", kMaxRank, ")");
  at::Tensor header = at::zeros({kMaxRank + 2}, at::kLong);
  auto h = header.accessor<int64_t, 1>();
  h[0] = static_cast<int64_t>(t.scalar_type());
  h[1] = t.dim();
  for (int64_t d = 0; d < t.dim(); ++d) h[2 + d] = t.size(d);
  keep.push_back(header);
  keep.push_back(t.contiguous());
  pg.send(keep[keep.size() - 2], dst, tag);
  pg.send(keep.back(), dst, tag);
}

at::Tensor recv_tensor(ProcessGroup& pg, int src, int tag) {
  at::Tensor header = at::zeros({kMaxRank + 2}, at::kLong);
  pg.recv(header, src, tag);
  auto h = header.accessor<int64_t, 1>();
  std::vector<int64_t> sizes(h[1]);
  for (int64_t d = 0; d < h[1]; ++d) sizes[d] = h[2 + d];
  at::Tensor t = at::empty(sizes, at::TensorOptions().dtype(static_cast<at::ScalarType>(h[0])));
  pg.recv(t, src, tag);
  return t;
}

}  // namespace pare::dist::detail
