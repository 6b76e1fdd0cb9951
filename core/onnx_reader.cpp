// Decodes an ONNX ModelProto (libonnx's protobuf schema) into reader::Model, checking every size
// before allocating from it.
#include "core/onnx_reader.h"

#include <fcntl.h>
#include <onnx/onnx_pb.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <set>

#include "core/error.h"
#include "core/file_util.h"

namespace pare::reader {
namespace {

// raw_data and external data are little-endian by the ONNX spec; pare copies bytes as they are.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "pare's ONNX reader assumes a little-endian host");

std::string dims_str(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? "," : "") + std::to_string(dims[i]);
  return s + "]";
}

int64_t parse_int64(const std::string& s, const std::string& what) {
  size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  PARE_CHECK(used == s.size() && !s.empty(), what, " must be an integer, got '", s, "'");
  return v;
}

// A 64-byte aligned block of `nbytes` (at least one byte, so the pointer is never null).
std::shared_ptr<void> aligned_block(int64_t nbytes) {
  const size_t size = (static_cast<size_t>(std::max<int64_t>(nbytes, 1)) + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, size);
  if (!p) throw Error("out of memory: cannot allocate " + std::to_string(nbytes) + " bytes for a tensor");
  return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
}

Tensor empty_tensor(int elem_type, std::vector<int64_t> dims, int64_t nbytes) {
  Tensor t;
  t.elem_type = elem_type;
  t.dims = std::move(dims);
  t.nbytes = nbytes;
  t.storage = aligned_block(nbytes);
  t.data = nbytes ? t.storage.get() : nullptr;
  return t;
}

// Elements of `dims`, checking the rank, that each is in [0, kMaxDim] and the byte count fits in
// int64. A 0 counts as 1 in that product: an empty tensor's other dims still make its strides,
// which libtorch refuses to overflow ("Stride calculation overflowed", a c10::Error).
int64_t checked_numel(const std::vector<int64_t>& dims, int64_t elem, const std::string& what) {
  PARE_CHECK(dims.size() <= kMaxRank, what, " has ", dims.size(), " dimensions; pare takes at most ", kMaxRank);
  int64_t span = 1;
  bool empty = false;
  for (int64_t d : dims) {
    PARE_CHECK(d >= 0, what, " has a negative dimension in shape ", dims_str(dims));
    PARE_CHECK(d <= kMaxDim, what, " has dimension ", d, " in shape ", dims_str(dims), "; pare takes at most ", kMaxDim);
    const int64_t e = std::max<int64_t>(d, 1);
    PARE_CHECK(span <= std::numeric_limits<int64_t>::max() / elem / e, what, " has shape ", dims_str(dims),
               ", too large to address");
    span *= e;
    empty = empty || d == 0;
  }
  return empty ? 0 : span;
}

// ---------------------------------------------------------------------------------------------
// External data

struct ExternalRef {
  std::string file;
  int64_t offset = 0;
  int64_t length = 0;
};

ExternalRef external_ref(const onnx::TensorProto& tp, const std::string& what, const std::string& model_dir,
                         int64_t nbytes) {
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto& kv : tp.external_data()) {
    if (kv.key() == "location") location = kv.value();
    else if (kv.key() == "offset") offset = parse_int64(kv.value(), what + " external data offset");
    else if (kv.key() == "length") length = parse_int64(kv.value(), what + " external data length");
  }
  PARE_CHECK(!location.empty(), what, " is marked as external data but has no 'location'");
  // Like onnx >= 1.14: the data must live inside the model's folder.
  bool escapes = location[0] == '/';
  for (size_t start = 0; start <= location.size();) {
    size_t end = location.find('/', start);
    if (end == std::string::npos) end = location.size();
    if (location.compare(start, end - start, "..") == 0 && end - start == 2) escapes = true;
    start = end + 1;
  }
  PARE_CHECK(!escapes, what, " has external data location '", location,
             "': it must be a relative path inside the model's folder");
  ExternalRef ref;
  ref.file = join_path(model_dir, location);
  struct stat st;
  PARE_CHECK(::stat(ref.file.c_str(), &st) == 0 && S_ISREG(st.st_mode), what, " is stored in external file '",
             ref.file, "', which cannot be opened");
  const int64_t size = static_cast<int64_t>(st.st_size);
  PARE_CHECK(offset >= 0 && offset <= size, what, " has external data offset ", offset, " but '", ref.file,
             "' holds only ", size, " bytes");
  if (length < 0) length = size - offset;  // no length: the rest of the file, as onnx does
  PARE_CHECK(length <= size - offset, what, " has external data [", offset, ", ", offset, "+", length,
             ") past the end of '", ref.file, "' (", size, " bytes)");
  PARE_CHECK(length == nbytes, what, " has ", length, " bytes of external data in '", ref.file,
             "' but its shape and type need ", nbytes);
  ref.offset = offset;
  ref.length = length;
  return ref;
}

// External data is mapped rather than read: a tensor's pages come from disk when first touched,
// so a process that keeps only some of the weights (a pipeline stage, a tensor-parallel slice of
// each) never reads the others. The mapping is private (copy on write), so training may change the
// weights in place; it lives as long as the tensor's storage. pare replaces files by rename, which
// leaves a mapped file intact.
Tensor map_external(const ExternalRef& ref, int elem_type, std::vector<int64_t> dims, const std::string& what) {
  const int fd = ::open(ref.file.c_str(), O_RDONLY | O_CLOEXEC);
  PARE_CHECK(fd >= 0, what, " is stored in external file '", ref.file, "', which cannot be opened");
  const int64_t page = ::sysconf(_SC_PAGE_SIZE);
  const int64_t start = ref.offset / page * page, skip = ref.offset - start;
  const size_t span = static_cast<size_t>(skip + ref.length);
  void* base = ::mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, start);
  ::close(fd);
  PARE_CHECK(base != MAP_FAILED, "cannot map ", ref.length, " bytes of ", what, " from '", ref.file, "'");
  Tensor t;
  t.elem_type = elem_type;
  t.dims = std::move(dims);
  t.nbytes = ref.length;
  t.storage = std::shared_ptr<void>(base, [span](void* p) { ::munmap(p, span); });
  t.data = static_cast<char*>(base) + skip;
  return t;
}

// ---------------------------------------------------------------------------------------------
// Tensors

Tensor tensor_from_proto(const onnx::TensorProto& tp, const std::string& what, const std::string& model_dir) {
  const int type = tp.data_type();
  const int64_t elem = elem_size(type);
  PARE_CHECK(elem > 0, what, " has ONNX data type ", type, " (",
             onnx::TensorProto_DataType_IsValid(type) ? onnx::TensorProto_DataType_Name(type) : "not a data type",
             "), which pare does not support (", supported_types(), ")");
  PARE_CHECK(!tp.has_segment(), what, " is a segment of a tensor, which pare does not support");
  std::vector<int64_t> dims(tp.dims().begin(), tp.dims().end());
  const int64_t numel = checked_numel(dims, elem, what);
  const int64_t nbytes = numel * elem;

  if (tp.data_location() == onnx::TensorProto_DataLocation_EXTERNAL) {
    ExternalRef ref = external_ref(tp, what, model_dir, nbytes);
    if (nbytes == 0) return empty_tensor(type, std::move(dims), 0);
    return map_external(ref, type, std::move(dims), what);
  }
  if (tp.has_raw_data()) {
    PARE_CHECK(static_cast<int64_t>(tp.raw_data().size()) == nbytes, what, " has ", tp.raw_data().size(),
               " bytes of raw_data but shape ", dims_str(dims), " of ", elem_type_name(type), " needs ", nbytes);
    Tensor t = empty_tensor(type, std::move(dims), nbytes);
    if (nbytes > 0) std::memcpy(t.data, tp.raw_data().data(), static_cast<size_t>(nbytes));
    return t;
  }

  // Typed fields: which one holds the values depends on the type (onnx.proto, TensorProto).
  auto expect_count = [&](int count, const char* field) {
    PARE_CHECK(count == numel, what, " has ", count, " values in ", field, " but shape ", dims_str(dims),
               " needs ", numel);
  };
  Tensor t;
  switch (type) {
    case kFloat:
      expect_count(tp.float_data_size(), "float_data");
      t = empty_tensor(type, dims, nbytes);
      std::copy(tp.float_data().begin(), tp.float_data().end(), static_cast<float*>(t.storage.get()));
      break;
    case kDouble:
      expect_count(tp.double_data_size(), "double_data");
      t = empty_tensor(type, dims, nbytes);
      std::copy(tp.double_data().begin(), tp.double_data().end(), static_cast<double*>(t.storage.get()));
      break;
    case kInt64:
      expect_count(tp.int64_data_size(), "int64_data");
      t = empty_tensor(type, dims, nbytes);
      std::copy(tp.int64_data().begin(), tp.int64_data().end(), static_cast<int64_t*>(t.storage.get()));
      break;
    case kInt32:
      expect_count(tp.int32_data_size(), "int32_data");
      t = empty_tensor(type, dims, nbytes);
      std::copy(tp.int32_data().begin(), tp.int32_data().end(), static_cast<int32_t*>(t.storage.get()));
      break;
    default: {
      // Narrow types are widened to int32 in int32_data; float16/bfloat16 hold their bit patterns.
      expect_count(tp.int32_data_size(), "int32_data");
      t = empty_tensor(type, dims, nbytes);
      char* dst = static_cast<char*>(t.storage.get());
      for (int64_t i = 0; i < numel; ++i) {
        const int32_t v = tp.int32_data(static_cast<int>(i));
        if (elem == 1) {
          dst[i] = type == kBool ? static_cast<char>(v != 0) : static_cast<char>(v);
        } else {
          const uint16_t bits = static_cast<uint16_t>(v);
          std::memcpy(dst + 2 * i, &bits, 2);
        }
      }
      break;
    }
  }
  return t;
}

// A dense tensor from ONNX's COO form: `values` [NNZ] and `indices` [NNZ] (linear) or [NNZ, rank].
// Positions not listed are zero. The dense size is bounded by the machine's memory, since a small
// file can declare any shape.
Tensor tensor_from_sparse(const onnx::SparseTensorProto& sp, const std::string& what, const std::string& model_dir) {
  const Tensor values = tensor_from_proto(sp.values(), what + " (values)", model_dir);
  PARE_CHECK(values.dims.size() == 1, what, " is a sparse initializer whose values must be 1-D, got shape ",
             dims_str(values.dims));
  const int64_t nnz = values.dims[0];
  std::vector<int64_t> dims(sp.dims().begin(), sp.dims().end());
  const int64_t elem = elem_size(values.elem_type);
  const int64_t numel = checked_numel(dims, elem, what);
  const int64_t nbytes = numel * elem;
  const int64_t ram = static_cast<int64_t>(::sysconf(_SC_PHYS_PAGES)) * ::sysconf(_SC_PAGE_SIZE);
  PARE_CHECK(nbytes <= ram, what, " is a sparse initializer of shape ", dims_str(dims), ": its ", nbytes,
             " dense bytes exceed this machine's memory (", ram, " bytes)");
  PARE_CHECK(nnz <= numel, what, " is a sparse initializer with ", nnz, " values but shape ", dims_str(dims),
             " holds only ", numel);
  Tensor t = empty_tensor(values.elem_type, dims, nbytes);
  if (nbytes) std::memset(t.data, 0, static_cast<size_t>(nbytes));
  if (nnz == 0) return t;
  PARE_CHECK(sp.has_indices(), what, " is a sparse initializer with ", nnz, " values but no indices");
  const Tensor idx = tensor_from_proto(sp.indices(), what + " (indices)", model_dir);
  PARE_CHECK(idx.elem_type == kInt64, what, " has sparse indices of type ", elem_type_name(idx.elem_type),
             "; ONNX requires int64");
  const int64_t rank = static_cast<int64_t>(dims.size());
  const bool linear = idx.dims.size() == 1;
  PARE_CHECK((linear && idx.dims[0] == nnz) || (idx.dims.size() == 2 && idx.dims[0] == nnz && idx.dims[1] == rank),
             what, " has sparse indices of shape ", dims_str(idx.dims), "; with ", nnz, " values of a rank-", rank,
             " tensor they must be [", nnz, "] or [", nnz, ",", rank, "]");
  const auto* ix = static_cast<const int64_t*>(idx.data);
  const auto* src = static_cast<const char*>(values.data);
  auto* dst = static_cast<char*>(t.data);
  for (int64_t k = 0; k < nnz; ++k) {
    int64_t pos = 0;
    if (linear) {
      pos = ix[k];
    } else {
      for (int64_t a = 0; a < rank; ++a) {
        const int64_t i = ix[k * rank + a];
        PARE_CHECK(i >= 0 && i < dims[static_cast<size_t>(a)], what, ": sparse index ", i, " of value ", k,
                   " is outside dimension ", a, " of shape ", dims_str(dims));
        pos = pos * dims[static_cast<size_t>(a)] + i;
      }
    }
    PARE_CHECK(pos >= 0 && pos < numel, what, ": sparse index ", pos, " of value ", k, " is outside shape ",
               dims_str(dims), " (", numel, " elements)");
    std::memcpy(dst + pos * elem, src + k * elem, static_cast<size_t>(elem));
  }
  return t;
}

// ---------------------------------------------------------------------------------------------
// Attributes, value infos, the graph

// Attribute type, inferred from the fields that are set for old models that omit `type`.
onnx::AttributeProto::AttributeType attr_type(const onnx::AttributeProto& ap) {
  using A = onnx::AttributeProto;
  if (ap.type() != A::UNDEFINED) return ap.type();
  if (ap.has_g() || ap.graphs_size()) return A::GRAPH;
  if (ap.has_t()) return A::TENSOR;
  if (ap.has_f()) return A::FLOAT;
  if (ap.has_i()) return A::INT;
  if (ap.has_s()) return A::STRING;
  if (ap.floats_size()) return A::FLOATS;
  if (ap.ints_size()) return A::INTS;
  if (ap.strings_size()) return A::STRINGS;
  return A::UNDEFINED;
}

AttrValue attr_from_proto(const onnx::AttributeProto& ap, const std::string& node, const std::string& model_dir) {
  using A = onnx::AttributeProto;
  const std::string what = "attribute '" + ap.name() + "' of node " + node;
  switch (attr_type(ap)) {
    case A::INT: return static_cast<int64_t>(ap.i());
    case A::FLOAT: return ap.f();
    case A::STRING: return ap.s();
    case A::TENSOR: return tensor_from_proto(ap.t(), what, model_dir);
    case A::INTS: return std::vector<int64_t>(ap.ints().begin(), ap.ints().end());
    case A::FLOATS: return std::vector<float>(ap.floats().begin(), ap.floats().end());
    case A::STRINGS: return std::vector<std::string>(ap.strings().begin(), ap.strings().end());
    case A::GRAPH:
    case A::GRAPHS:
      throw InputError("node " + node + " has subgraph attribute '" + ap.name() +
                       "': control flow (If, Loop, Scan) is not supported");
    default:
      throw InputError(what + " has kind " +
                       (A::AttributeType_IsValid(ap.type()) ? A::AttributeType_Name(ap.type()) : std::string("?")) +
                       ", which pare does not support (INT, FLOAT, STRING, TENSOR, INTS, FLOATS, STRINGS)");
  }
}

ValueInfo value_info_from_proto(const onnx::ValueInfoProto& vp, const std::string& role) {
  ValueInfo vi;
  vi.name = vp.name();
  vi.is_tensor = vp.type().has_tensor_type();
  if (!vi.is_tensor) return vi;
  const auto& tt = vp.type().tensor_type();
  vi.elem_type = tt.elem_type();
  vi.has_shape = tt.has_shape();
  PARE_CHECK(static_cast<size_t>(tt.shape().dim_size()) <= kMaxRank, role, " '", vp.name(), "' declares ",
             tt.shape().dim_size(), " dimensions; pare takes at most ", kMaxRank);
  for (const auto& d : tt.shape().dim()) {
    Dim dim;
    if (d.has_dim_value()) {
      PARE_CHECK(d.dim_value() >= 0, role, " '", vp.name(), "' has negative dimension ", d.dim_value());
      PARE_CHECK(d.dim_value() <= kMaxDim, role, " '", vp.name(), "' declares dimension ", d.dim_value(),
                 "; pare takes at most ", kMaxDim);
      dim.value = d.dim_value();
    } else {
      dim.symbol = d.dim_param();
    }
    vi.dims.push_back(std::move(dim));
  }
  return vi;
}

// Opsets 1 to kMinOpset - 1 are read for models whose default-domain ops all mean at that opset
// what they mean in pare: ops whose later versions only dropped the legacy `consumed_inputs`
// attribute or added types and attributes with defaults that keep the old behaviour. (A legacy
// attribute on a node is refused later, by Graph::verify, as an attribute the op does not declare.)
// Ops whose old versions differ (broadcast attributes, Reshape's shape attribute, Cast's string
// type, Softmax's 2-D coercion, ...) are refused, naming the first such node.
void check_old_opset(const Model& r) {
  if (r.opset >= kMinOpset) return;
  static const std::set<std::string> unchanged = {
      "Abs", "ArgMax", "ArgMin", "AveragePool", "Ceil", "Conv", "ConvTranspose", "DepthToSpace", "Elu", "Exp",
      "Flatten", "Floor", "Gather", "GlobalAveragePool", "GlobalMaxPool", "HardSigmoid", "Identity", "LRN",
      "LeakyRelu", "Log", "MatMul", "MaxPool", "Neg", "Not", "Reciprocal", "ReduceL1", "ReduceL2", "ReduceLogSum",
      "ReduceLogSumExp", "ReduceMax", "ReduceMean", "ReduceMin", "ReduceProd", "ReduceSum", "ReduceSumSquare",
      "Relu", "Selu", "Shape", "Sigmoid", "Size", "Softplus", "Softsign", "SpaceToDepth", "Sqrt", "Squeeze", "Tanh",
      "Transpose", "Unsqueeze"};
  for (const auto& n : r.nodes) {
    if (!n.domain.empty() || unchanged.count(n.op_type)) continue;
    throw InputError("the model imports opset " + std::to_string(r.opset) +
                     " of the default ONNX domain; pare implements opsets " + std::to_string(kMinOpset) + " to " +
                     std::to_string(kMaxOpset) + ", and older ones only for ops unchanged since (" + n.op_type +
                     " is not: node " + n.label() + ")");
  }
}

Model model_from_proto(const onnx::ModelProto& m, const std::string& model_dir) {
  PARE_CHECK(m.has_graph(), "not an ONNX model: it has no graph");
  const onnx::GraphProto& gp = m.graph();
  Model r;
  r.graph_name = gp.name();
  r.doc = !m.doc_string().empty() ? m.doc_string() : gp.doc_string();
  r.producer_name = m.producer_name();
  r.producer_version = m.producer_version();
  for (const auto& kv : m.metadata_props()) r.metadata.emplace_back(kv.key(), kv.value());

  bool has_default_opset = false;
  for (const auto& op : m.opset_import()) {
    const std::string domain = op.domain() == "ai.onnx" ? "" : op.domain();
    const bool pare_own = domain == "pare" || domain.rfind("pare.", 0) == 0;
    if (!domain.empty() && domain != "ai.onnx.ml" && domain != "com.microsoft" && !pare_own) {
      std::string user;  // the first node of that domain, to name in the message
      for (const auto& n : gp.node())
        if (n.domain() == domain) {
          user = "; node " + n.op_type() + " '" + n.name() + "' is of that domain";
          break;
        }
      throw InputError("the model imports domain '" + domain + "', which pare does not implement (known: " +
                       known_domains() + ")" + user);
    }
    r.opsets[domain] = op.version();
    if (domain.empty()) {
      PARE_CHECK((op.version() >= 1 && op.version() < kMinOpset) || (op.version() >= kMinOpset && op.version() <= kMaxOpset),
                 "the model imports opset ", op.version(),
                 " of the default ONNX domain; pare implements opsets ", kMinOpset, " to ", kMaxOpset,
                 op.version() > kMaxOpset ? " (re-export it with an older opset, e.g. torch.onnx.export(..., "
                                            "opset_version=17))"
                                          : "");
      r.opset = op.version();
      has_default_opset = true;
    }
  }
  PARE_CHECK(has_default_opset, "the model imports no opset of the default ONNX domain");

  std::set<std::string> names;
  for (const auto& tp : gp.initializer()) {
    PARE_CHECK(!tp.name().empty(), "an initializer has no name");
    PARE_CHECK(names.insert(tp.name()).second, "initializer '", tp.name(), "' is defined twice");
    r.initializers.emplace_back(tp.name(), tensor_from_proto(tp, "initializer '" + tp.name() + "'", model_dir));
  }
  for (const auto& sp : gp.sparse_initializer()) {
    const std::string& name = sp.values().name();
    PARE_CHECK(!name.empty(), "a sparse initializer has no name (its values tensor names it)");
    PARE_CHECK(names.insert(name).second, "initializer '", name, "' is defined twice");
    r.initializers.emplace_back(name, tensor_from_sparse(sp, "sparse initializer '" + name + "'", model_dir));
    r.sparse_initializers.push_back(name);
  }
  for (const auto& vp : gp.input()) {
    if (names.count(vp.name())) continue;  // old exporters list weights as inputs too
    r.inputs.push_back(value_info_from_proto(vp, "graph input"));
  }
  for (const auto& vp : gp.output()) r.outputs.push_back(value_info_from_proto(vp, "graph output"));
  for (const auto& vp : gp.value_info()) r.value_info.push_back(value_info_from_proto(vp, "value_info"));

  for (int i = 0; i < gp.node_size(); ++i) {
    const onnx::NodeProto& np = gp.node(i);
    Node n;
    n.op_type = np.op_type();
    n.name = np.name();
    n.domain = np.domain() == "ai.onnx" ? "" : np.domain();
    n.inputs.assign(np.input().begin(), np.input().end());
    n.outputs.assign(np.output().begin(), np.output().end());
    n.index = i;
    const std::string label = n.label();
    std::set<std::string> seen;
    for (const auto& ap : np.attribute()) {
      PARE_CHECK(seen.insert(ap.name()).second, "node ", label, " has attribute '", ap.name(), "' twice");
      n.attrs.emplace_back(ap.name(), attr_from_proto(ap, label, model_dir));
    }
    r.nodes.push_back(std::move(n));
  }
  check_old_opset(r);
  return r;
}

}  // namespace

int64_t elem_size(int t) {
  switch (t) {
    case kFloat: case kInt32: return 4;
    case kUInt8: case kInt8: case kBool: return 1;
    case kInt16: case kFloat16: case kBFloat16: return 2;
    case kInt64: case kDouble: return 8;
    default: return 0;
  }
}

std::string elem_type_name(int t) {
  switch (t) {
    case kFloat: return "float32";
    case kUInt8: return "uint8";
    case kInt8: return "int8";
    case kInt16: return "int16";
    case kInt32: return "int32";
    case kInt64: return "int64";
    case kBool: return "bool";
    case kFloat16: return "float16";
    case kDouble: return "float64";
    case kBFloat16: return "bfloat16";
    default: return "type " + std::to_string(t);
  }
}

const char* supported_types() {
  return "float32, float16, bfloat16, float64, int8, uint8, int16, int32, int64, bool";
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

std::string Node::label() const {
  if (!name.empty()) return op_type + " '" + name + "'";
  return op_type + " #" + std::to_string(index);
}

const char* known_domains() { return "the default ai.onnx, ai.onnx.ml, com.microsoft, pare and pare.*"; }

Model parse_model(const std::string& bytes, const std::string& origin) {
  const std::string where = "'" + origin + "'";
  PARE_CHECK(bytes.size() <= static_cast<size_t>(INT_MAX), where, " is not a loadable ONNX model: ", bytes.size(),
             " bytes exceed protobuf's 2 GB limit (store weights as external data)");
  onnx::ModelProto m;
  bool parsed = false;
  try {
    parsed = m.ParseFromString(bytes);
  } catch (const std::exception& e) {
    throw InputError(where + " is not a valid ONNX model: " + e.what());
  }
  PARE_CHECK(parsed, where, " is not a valid ONNX model: its ", bytes.size(),
             " bytes do not parse as an ONNX ModelProto (truncated or not ONNX)");
  try {
    Model r = model_from_proto(m, dir_name(origin));
    r.origin = origin;
    return r;
  } catch (const InputError& e) {
    throw InputError(where + ": " + e.what());
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {  // std::bad_alloc, protobuf's own exceptions
    throw InputError(where + ": " + e.what());
  }
}

Model read_model(const std::string& path) { return parse_model(read_file(path), path); }

Tensor parse_tensor(const std::string& bytes, const std::string& origin) {
  onnx::TensorProto tp;
  PARE_CHECK(bytes.size() <= static_cast<size_t>(INT_MAX) && tp.ParseFromString(bytes), "'", origin,
             "' is not an ONNX TensorProto (truncated, or another kind of file)");
  return tensor_from_proto(tp, "'" + origin + "'", dir_name(origin));
}

}  // namespace pare::reader
