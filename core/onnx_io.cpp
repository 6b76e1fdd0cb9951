// Converts between ONNX ModelProto (libonnx's protobuf schema) and core::Graph, in both directions,
// with external data files, the ONNX checker, and atomic writes.
#include "core/onnx_io.h"

#include <fcntl.h>
#include <onnx/checker.h>
#include <onnx/onnx_pb.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <utility>

#include "core/dtype.h"
#include "core/error.h"
#include "core/file_util.h"
#include "core/zoo.h"

#ifndef PARE_VERSION
#define PARE_VERSION "0.1.0"
#endif

namespace pare::core {
namespace {

// raw_data and external data are little-endian by the ONNX spec; pare copies bytes as they are.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "pare's ONNX I/O assumes a little-endian host");

constexpr int64_t kIrVersion = 8;
// Protobuf refuses messages over 2 GiB; above this many initializer bytes, weights go external.
constexpr int64_t kForceExternalBytes = 1800LL * 1000 * 1000;
constexpr const char* kSupportedTypes =
    "float32, float16, bfloat16, float64, int8, uint8, int16, int32, int64, bool";

std::string dims_str(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? "," : "") + std::to_string(dims[i]);
  return s + "]";
}

std::string base_name(const std::string& path) {
  auto slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// "Gemm 'fc1'" (or "Gemm #3" when the node has no name) for messages before the Node exists.
std::string node_label(const onnx::NodeProto& np, int index) {
  if (!np.name().empty()) return np.op_type() + " '" + np.name() + "'";
  return np.op_type() + " #" + std::to_string(index);
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

// ---------------------------------------------------------------------------------------------
// Reading

// The tensor's bytes are copied into a fresh, owning CPU tensor only after the source is known to
// hold exactly that many bytes, so a file that lies about a shape cannot trigger a huge allocation.
struct ExternalRef {
  std::string file;
  int64_t offset = 0;
  int64_t length = 0;
};

ExternalRef external_ref(const onnx::TensorProto& tp, const std::string& what,
                         const std::string& model_dir, int64_t nbytes) {
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
  std::ifstream in(ref.file, std::ios::binary | std::ios::ate);
  PARE_CHECK(in.good(), what, " is stored in external file '", ref.file,
             "', which cannot be opened");
  const int64_t size = static_cast<int64_t>(in.tellg());
  PARE_CHECK(offset >= 0 && offset <= size, what, " has external data offset ", offset, " but '",
             ref.file, "' holds only ", size, " bytes");
  if (length < 0) length = size - offset;  // no length: the rest of the file, as onnx does
  PARE_CHECK(length <= size - offset, what, " has external data [", offset, ", ", offset, "+",
             length, ") past the end of '", ref.file, "' (", size, " bytes)");
  PARE_CHECK(length == nbytes, what, " has ", length, " bytes of external data in '", ref.file,
             "' but its shape and type need ", nbytes);
  ref.offset = offset;
  ref.length = length;
  return ref;
}

// External data is mapped rather than read: a tensor's pages come from disk when first touched,
// so a process that keeps only some of the weights (a pipeline stage, a tensor-parallel slice of
// each) never reads the others. The mapping is private (copy on write), so training may change the
// weights in place; it lives as long as the tensor. pare replaces files by rename, which leaves a
// mapped file intact.
at::Tensor map_external(const ExternalRef& ref, const std::vector<int64_t>& dims, const at::TensorOptions& opts,
                        const std::string& what) {
  const int fd = ::open(ref.file.c_str(), O_RDONLY | O_CLOEXEC);
  PARE_CHECK(fd >= 0, what, " is stored in external file '", ref.file, "', which cannot be opened");
  const int64_t page = ::sysconf(_SC_PAGE_SIZE);
  const int64_t start = ref.offset / page * page, skip = ref.offset - start;
  const size_t span = static_cast<size_t>(skip + ref.length);
  void* base = ::mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, start);
  ::close(fd);
  PARE_CHECK(base != MAP_FAILED, "cannot map ", ref.length, " bytes of ", what, " from '", ref.file, "'");
  return at::from_blob(static_cast<char*>(base) + skip, dims, [base, span](void*) { ::munmap(base, span); }, opts);
}

at::Tensor tensor_from_proto(const onnx::TensorProto& tp, const std::string& what,
                             const std::string& model_dir) {
  const auto st = scalar_type_from_onnx(tp.data_type());
  PARE_CHECK(st.has_value(), what, " has ONNX data type ", tp.data_type(), " (",
             onnx::TensorProto_DataType_Name(tp.data_type()), "), which pare does not support (",
             kSupportedTypes, ")");
  PARE_CHECK(!tp.has_segment(), what, " is a segment of a tensor, which pare does not support");
  std::vector<int64_t> dims(tp.dims().begin(), tp.dims().end());
  const int64_t elem = static_cast<int64_t>(c10::elementSize(*st));
  int64_t numel = 1;
  for (int64_t d : dims) {
    PARE_CHECK(d >= 0, what, " has a negative dimension in shape ", dims_str(dims));
    PARE_CHECK(d == 0 || numel <= std::numeric_limits<int64_t>::max() / elem / d, what,
               " has shape ", dims_str(dims), ", too large to address");
    numel *= d;
  }
  const int64_t nbytes = numel * elem;
  const auto opts = at::TensorOptions().dtype(*st);

  if (tp.data_location() == onnx::TensorProto_DataLocation_EXTERNAL) {
    ExternalRef ref = external_ref(tp, what, model_dir, nbytes);
    if (nbytes == 0) return at::empty(dims, opts);
    return map_external(ref, dims, opts, what);
  }
  if (tp.has_raw_data()) {
    PARE_CHECK(static_cast<int64_t>(tp.raw_data().size()) == nbytes, what, " has ",
               tp.raw_data().size(), " bytes of raw_data but shape ", dims_str(dims), " of ",
               dtype_name(*st), " needs ", nbytes);
    at::Tensor t = at::empty(dims, opts);
    if (nbytes > 0) std::memcpy(t.data_ptr(), tp.raw_data().data(), nbytes);
    return t;
  }

  // Typed fields: which one holds the values depends on the type (onnx.proto, TensorProto).
  auto expect_count = [&](int count, const char* field) {
    PARE_CHECK(count == numel, what, " has ", count, " values in ", field, " but shape ",
               dims_str(dims), " needs ", numel);
  };
  at::Tensor t;
  switch (*st) {
    case at::kFloat:
      expect_count(tp.float_data_size(), "float_data");
      t = at::empty(dims, opts);
      std::copy(tp.float_data().begin(), tp.float_data().end(), t.data_ptr<float>());
      break;
    case at::kDouble:
      expect_count(tp.double_data_size(), "double_data");
      t = at::empty(dims, opts);
      std::copy(tp.double_data().begin(), tp.double_data().end(), t.data_ptr<double>());
      break;
    case at::kLong:
      expect_count(tp.int64_data_size(), "int64_data");
      t = at::empty(dims, opts);
      std::copy(tp.int64_data().begin(), tp.int64_data().end(), t.data_ptr<int64_t>());
      break;
    case at::kInt:
      expect_count(tp.int32_data_size(), "int32_data");
      t = at::empty(dims, opts);
      std::copy(tp.int32_data().begin(), tp.int32_data().end(), t.data_ptr<int32_t>());
      break;
    case at::kShort:
    case at::kChar:
    case at::kByte:
    case at::kBool:
    case at::kHalf:
    case at::kBFloat16: {
      // Narrow types are widened to int32 in int32_data; float16/bfloat16 hold their bit patterns.
      expect_count(tp.int32_data_size(), "int32_data");
      t = at::empty(dims, opts);
      char* dst = static_cast<char*>(t.data_ptr());
      for (int64_t i = 0; i < numel; ++i) {
        const int32_t v = tp.int32_data(static_cast<int>(i));
        if (elem == 1) {
          dst[i] = *st == at::kBool ? static_cast<char>(v != 0) : static_cast<char>(v);
        } else {
          const uint16_t bits = static_cast<uint16_t>(v);
          std::memcpy(dst + 2 * i, &bits, 2);
        }
      }
      break;
    }
    default:
      PARE_ASSERT(false, "unhandled type ", dtype_name(*st));
  }
  return t;
}

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

AttrValue attr_from_proto(const onnx::AttributeProto& ap, const std::string& node,
                          const std::string& model_dir) {
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
      throw InputError(what + " has kind " + A::AttributeType_Name(ap.type()) +
                       ", which pare does not support (INT, FLOAT, STRING, TENSOR, INTS, FLOATS, "
                       "STRINGS)");
  }
}

// std::nullopt for an optional entry (value_info) pare cannot represent; required ones throw.
std::optional<ValueInfo> value_info_from_proto(const onnx::ValueInfoProto& vp,
                                               const std::string& role, bool required) {
  const std::string what = role + " '" + vp.name() + "'";
  if (!vp.type().has_tensor_type()) {
    PARE_CHECK(!required, what, " is not a tensor (sequence, map and optional types are not supported)");
    return std::nullopt;
  }
  const auto& tt = vp.type().tensor_type();
  const auto st = scalar_type_from_onnx(tt.elem_type());
  if (!st) {
    PARE_CHECK(!required, what, " has element type ", tt.elem_type(), " (",
               onnx::TensorProto_DataType_Name(tt.elem_type()), "), which pare does not support (",
               kSupportedTypes, ")");
    return std::nullopt;
  }
  ValueInfo vi;
  vi.name = vp.name();
  vi.dtype = *st;
  vi.has_shape = tt.has_shape();
  for (const auto& d : tt.shape().dim()) {
    if (d.has_dim_value()) {
      PARE_CHECK(d.dim_value() >= 0, what, " has negative dimension ", d.dim_value());
      vi.shape.emplace_back(d.dim_value());
    } else {
      vi.shape.push_back(Dim::sym(d.dim_param()));  // "" when the dim is unknown and unnamed
    }
  }
  return vi;
}

Graph graph_from_proto(const onnx::ModelProto& m, const std::string& model_dir) {
  PARE_CHECK(m.has_graph(), "not an ONNX model: it has no graph");
  const onnx::GraphProto& gp = m.graph();
  Graph g;
  g.name = gp.name().empty() ? g.name : gp.name();
  g.doc = !m.doc_string().empty() ? m.doc_string() : gp.doc_string();
  for (const auto& kv : m.metadata_props()) g.metadata[kv.key()] = kv.value();

  bool has_default_opset = false;
  for (const auto& op : m.opset_import()) {
    if (op.domain().empty() || op.domain() == "ai.onnx") {
      g.opset = op.version();
      has_default_opset = true;
    }
  }
  PARE_CHECK(has_default_opset, "the model imports no opset of the default ONNX domain");

  PARE_CHECK(gp.sparse_initializer_size() == 0, "sparse initializers (first: '",
             gp.sparse_initializer_size() ? gp.sparse_initializer(0).values().name() : "",
             "') are not supported");
  for (const auto& tp : gp.initializer()) {
    PARE_CHECK(!tp.name().empty(), "an initializer has no name");
    PARE_CHECK(!g.initializers.count(tp.name()), "initializer '", tp.name(), "' is defined twice");
    g.initializers[tp.name()] = tensor_from_proto(tp, "initializer '" + tp.name() + "'", model_dir);
  }
  for (const auto& vp : gp.input()) {
    if (g.initializers.count(vp.name())) continue;  // old exporters list weights as inputs too
    g.inputs.push_back(*value_info_from_proto(vp, "graph input", true));
  }
  for (const auto& vp : gp.output()) g.outputs.push_back(*value_info_from_proto(vp, "graph output", true));
  for (const auto& vp : gp.value_info()) {
    if (auto vi = value_info_from_proto(vp, "value_info", false)) g.value_info.push_back(std::move(*vi));
  }

  for (int i = 0; i < gp.node_size(); ++i) {
    const onnx::NodeProto& np = gp.node(i);
    const std::string label = node_label(np, i);
    std::map<std::string, AttrValue> attrs;
    for (const auto& ap : np.attribute()) {
      PARE_CHECK(!attrs.count(ap.name()), "node ", label, " has attribute '", ap.name(), "' twice");
      attrs.emplace(ap.name(), attr_from_proto(ap, label, model_dir));
    }
    Node& n = g.add_node(np.op_type(), {np.input().begin(), np.input().end()},
                         {np.output().begin(), np.output().end()}, std::move(attrs), np.name());
    n.domain = np.domain() == "ai.onnx" ? "" : np.domain();
  }
  return g;
}

// ---------------------------------------------------------------------------------------------
// Writing

void tensor_to_proto(const at::Tensor& src, onnx::TensorProto* tp) {
  const at::Tensor t = src.detach().to(at::kCPU).contiguous();
  tp->set_data_type(onnx_type_from_scalar(t.scalar_type()));
  for (int64_t d : t.sizes()) tp->add_dims(d);
  const size_t nbytes = t.nbytes();
  if (nbytes == 0) tp->set_raw_data(std::string());
  else tp->set_raw_data(static_cast<const char*>(t.data_ptr()), nbytes);
}

void value_info_to_proto(const ValueInfo& vi, onnx::ValueInfoProto* vp) {
  vp->set_name(vi.name);
  auto* tt = vp->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(onnx_type_from_scalar(vi.dtype));
  if (!vi.has_shape) return;
  auto* shape = tt->mutable_shape();
  for (const Dim& d : vi.shape) {
    auto* dp = shape->add_dim();
    if (d.is_fixed()) dp->set_dim_value(d.value);
    else if (!d.symbol.empty()) dp->set_dim_param(d.symbol);
  }
}

void attr_to_proto(const std::string& name, const AttrValue& v, onnx::AttributeProto* ap) {
  using A = onnx::AttributeProto;
  ap->set_name(name);
  switch (attr_kind(v)) {
    case AttrKind::kInt:
      ap->set_type(A::INT);
      ap->set_i(std::get<int64_t>(v));
      break;
    case AttrKind::kFloat:
      ap->set_type(A::FLOAT);
      ap->set_f(std::get<float>(v));
      break;
    case AttrKind::kString:
      ap->set_type(A::STRING);
      ap->set_s(std::get<std::string>(v));
      break;
    case AttrKind::kTensor:
      ap->set_type(A::TENSOR);
      tensor_to_proto(std::get<at::Tensor>(v), ap->mutable_t());
      break;
    case AttrKind::kInts:
      ap->set_type(A::INTS);
      for (int64_t x : std::get<std::vector<int64_t>>(v)) ap->add_ints(x);
      break;
    case AttrKind::kFloats:
      ap->set_type(A::FLOATS);
      for (float x : std::get<std::vector<float>>(v)) ap->add_floats(x);
      break;
    case AttrKind::kStrings:
      ap->set_type(A::STRINGS);
      for (const auto& x : std::get<std::vector<std::string>>(v)) ap->add_strings(x);
      break;
  }
}

onnx::ModelProto model_from_graph(const Graph& g) {
  onnx::ModelProto m;
  m.set_ir_version(kIrVersion);
  m.set_producer_name("pare");
  m.set_producer_version(PARE_VERSION);
  if (!g.doc.empty()) m.set_doc_string(g.doc);
  auto* op = m.add_opset_import();
  op->set_domain("");
  op->set_version(g.opset);
  std::set<std::string> domains;
  for (const Node& n : g.nodes)
    if (!n.domain.empty() && n.domain != "ai.onnx") domains.insert(n.domain);
  for (const auto& d : domains) {
    auto* o = m.add_opset_import();
    o->set_domain(d);
    o->set_version(1);
  }
  for (const auto& [k, v] : g.metadata) {
    auto* p = m.add_metadata_props();
    p->set_key(k);
    p->set_value(v);
  }

  auto* gp = m.mutable_graph();
  gp->set_name(g.name);
  for (const auto& vi : g.inputs) value_info_to_proto(vi, gp->add_input());
  for (const auto& vi : g.outputs) value_info_to_proto(vi, gp->add_output());
  for (const auto& vi : g.value_info) value_info_to_proto(vi, gp->add_value_info());
  for (const auto& [name, t] : g.initializers) {
    auto* tp = gp->add_initializer();
    tp->set_name(name);
    tensor_to_proto(t, tp);
  }
  for (const Node& n : g.nodes) {
    auto* np = gp->add_node();
    np->set_op_type(n.op_type);
    if (!n.name.empty()) np->set_name(n.name);
    if (!n.domain.empty()) np->set_domain(n.domain);
    for (const auto& in : n.inputs) np->add_input(in);
    for (const auto& out : n.outputs) np->add_output(out);
    for (const auto& [k, v] : n.attrs) attr_to_proto(k, v, np->add_attribute());
  }
  return m;
}

void run_checker(const onnx::ModelProto& m, const std::string& what) {
  // The checker's own words for this ("Field 'shape' of 'type' is required") name no value.
  const auto& gp = m.graph();
  for (const auto* list : {&gp.input(), &gp.output()})
    for (const auto& vp : *list)
      if (!vp.type().tensor_type().has_shape())
        throw Error("the ONNX checker rejects " + what + ": graph " +
                    (list == &gp.input() ? "input '" : "output '") + vp.name() +
                    "' has no shape, which ONNX requires of graph inputs and outputs "
                    "(core::infer_shapes fills them in)");
  try {
    onnx::checker::check_model(m);
  } catch (const std::exception& e) {  // onnx::checker::ValidationError, or onnx's runtime_error
    throw Error("the ONNX checker rejects " + what + ": " + e.what());
  }
}

std::string serialize(const onnx::ModelProto& m, const std::string& what) {
  const size_t size = m.ByteSizeLong();
  if (size > static_cast<size_t>(INT_MAX))
    throw Error("cannot serialize " + what + ": " + std::to_string(size) +
                " bytes exceed protobuf's 2 GB limit (save it with external data)");
  std::string bytes;
  if (!m.SerializeToString(&bytes)) throw Error("cannot serialize " + what);
  return bytes;
}

}  // namespace

// ---------------------------------------------------------------------------------------------

Graph parse_onnx(const std::string& bytes, const std::string& origin) {
  return parse_onnx(bytes, origin, OnnxLoadOptions());
}

Graph parse_onnx(const std::string& bytes, const std::string& origin, const OnnxLoadOptions& opts) {
  const std::string where = "'" + origin + "'";
  PARE_CHECK(bytes.size() <= static_cast<size_t>(INT_MAX), where, " is not a loadable ONNX model: ",
             bytes.size(), " bytes exceed protobuf's 2 GB limit (store weights as external data)");
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
    Graph g = graph_from_proto(m, dir_name(origin));
    if (opts.verify_) g.verify();
    return g;
  } catch (const InputError& e) {
    throw InputError(where + ": " + e.what());
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {  // c10::Error, std::bad_alloc, onnx's own exceptions
    throw InputError(where + ": " + e.what());
  }
}

Graph load_onnx(const std::string& path) { return load_onnx(path, OnnxLoadOptions()); }

Graph load_onnx(const std::string& path, const OnnxLoadOptions& opts) {
  return parse_onnx(read_file(path), path, opts);
}

std::string serialize_onnx(const Graph& g, bool check) {
  const onnx::ModelProto m = model_from_graph(g);
  const std::string what = "model '" + g.name + "'";
  if (check) run_checker(m, what);
  return serialize(m, what);
}

void save_onnx(const Graph& g, const std::string& path, const OnnxSaveOptions& opts) {
  onnx::ModelProto m = model_from_graph(g);
  const std::string what = "model '" + path + "'";
  // Checked while every tensor is still inline: the checker would look for external files
  // relative to the working directory.
  if (opts.check_) run_checker(m, what);

  int64_t total = 0;
  for (const auto& tp : m.graph().initializer()) total += static_cast<int64_t>(tp.raw_data().size());
  const bool external = opts.external_data_ || total > kForceExternalBytes;

  std::vector<std::string> moved;  // bytes of the tensors that go to the data file, in order
  const std::string data_name = base_name(path) + ".data";
  if (external) {
    int64_t offset = 0;
    for (auto& tp : *m.mutable_graph()->mutable_initializer()) {
      const int64_t n = static_cast<int64_t>(tp.raw_data().size());
      if (n < opts.external_threshold_) continue;
      moved.emplace_back();
      tp.mutable_raw_data()->swap(moved.back());
      tp.clear_raw_data();
      tp.set_data_location(onnx::TensorProto_DataLocation_EXTERNAL);
      auto add = [&tp](const char* key, const std::string& value) {
        auto* e = tp.add_external_data();
        e->set_key(key);
        e->set_value(value);
      };
      add("location", data_name);
      add("offset", std::to_string(offset));
      add("length", std::to_string(n));
      offset += n;
    }
  }
  const std::string bytes = serialize(m, what);  // fails before anything is written
  if (!moved.empty()) {
    // The data first: a model file never points at data that is not there yet.
    write_file_atomic(join_path(dir_name(path), data_name), [&](std::ostream& out) {
      for (const auto& b : moved) out.write(b.data(), static_cast<std::streamsize>(b.size()));
    });
  }
  write_file_atomic(path, bytes);
}

Graph load_model(const std::string& path_or_spec, uint64_t seed) {
  if (is_zoo_spec(path_or_spec)) return build_zoo_model(path_or_spec, seed);
  if (file_exists(path_or_spec)) return load_onnx(path_or_spec);
  std::string known;
  for (const auto& line : zoo_help())  // the spec part of each help line
    known += (known.empty() ? "" : ", ") + line.substr(0, line.find(' '));
  throw InputError("'" + path_or_spec + "' is neither an ONNX file nor a zoo model (known: " +
                   known + ")");
}

}  // namespace pare::core
