// Converts between ONNX files and core::Graph: reading through the torch-free reader
// (core/onnx_reader.h), writing a ModelProto with sparse initializers (COO) and external data
// files, the ONNX checker and atomic writes.
#include "core/onnx_io.h"

#include <onnx/checker.h>
#include <onnx/defs/schema.h>
#include <onnx/onnx_pb.h>

#include <climits>
#include <optional>
#include <set>
#include <type_traits>
#include <utility>

#include "core/dtype.h"
#include "core/error.h"
#include "core/file_util.h"
#include "core/onnx_reader.h"
#include "core/op_registry.h"
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

std::string base_name(const std::string& path) {
  auto slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// ---------------------------------------------------------------------------------------------
// Reading: reader::Model (torch-free, validated) into a Graph

// The reader's block becomes the tensor's storage: no copy.
at::Tensor to_torch(const reader::Tensor& t) {
  const auto st = scalar_type_from_onnx(t.elem_type);
  PARE_ASSERT(st.has_value(), "the ONNX reader decoded ", reader::elem_type_name(t.elem_type));
  const auto opts = at::TensorOptions().dtype(*st);
  if (t.nbytes == 0) return at::empty(t.dims, opts);
  std::shared_ptr<void> storage = t.storage;
  return at::from_blob(t.data, t.dims, [storage](void*) mutable { storage.reset(); }, opts);
}

AttrValue to_attr(const reader::AttrValue& v) {
  return std::visit(
      [](const auto& x) -> AttrValue {
        if constexpr (std::is_same_v<std::decay_t<decltype(x)>, reader::Tensor>) return to_torch(x);
        else return x;
      },
      v);
}

// std::nullopt for an optional entry (value_info) pare cannot represent; required ones throw.
std::optional<ValueInfo> to_value_info(const reader::ValueInfo& v, const std::string& role, bool required) {
  const std::string what = role + " '" + v.name + "'";
  if (!v.is_tensor) {
    PARE_CHECK(!required, what, " is not a tensor (sequence, map and optional types are not supported)");
    return std::nullopt;
  }
  const auto st = scalar_type_from_onnx(v.elem_type);
  if (!st) {
    PARE_CHECK(!required, what, " has element type ", reader::elem_type_name(v.elem_type),
               ", which pare does not support (", reader::supported_types(), ")");
    return std::nullopt;
  }
  ValueInfo vi;
  vi.name = v.name;
  vi.dtype = *st;
  vi.has_shape = v.has_shape;
  for (const auto& d : v.dims) vi.shape.push_back(d.value >= 0 ? Dim(d.value) : Dim::sym(d.symbol));
  return vi;
}

// The rank of value `name` where the model declares it (graph input or output, value_info), or -1.
int64_t declared_rank(const Graph& g, const std::string& name) {
  for (const auto* list : {&g.inputs, &g.outputs, &g.value_info})
    for (const auto& v : *list)
      if (v.name == name && v.has_shape) return static_cast<int64_t>(v.shape.size());
  return -1;
}

// Before opset 13, Softmax, LogSoftmax and Hardmax flatten their input to 2-D at `axis` (default
// 1) and normalise each row; from 13 on they work along one axis, as pare's forwards do. Where
// the two differ (the axis is not the last dim, or the rank is unknown), an old node is imported
// as Flatten -> op over the rows -> Reshape back to the input's shape, the same function in ops
// of every opset.
bool add_coerced_softmax(Graph& g, const reader::Node& n, std::map<std::string, AttrValue>& attrs) {
  static const std::set<std::string> coerced = {"Softmax", "LogSoftmax", "Hardmax"};
  if (g.opset >= 13 || !n.domain.empty() || !coerced.count(n.op_type) || n.inputs.size() != 1 || n.outputs.size() != 1)
    return false;
  const int64_t axis = attrs.count("axis") && std::holds_alternative<int64_t>(attrs.at("axis"))
                           ? std::get<int64_t>(attrs.at("axis"))
                           : 1;
  int64_t rank = declared_rank(g, n.inputs[0]);
  if (rank < 0) rank = declared_rank(g, n.outputs[0]);
  if (axis == -1 || (rank >= 0 && axis == rank - 1)) return false;
  const std::string base = n.name.empty() ? n.outputs[0] : n.name;
  const std::string shape = g.unique_name(base + "/shape"), rows = g.unique_name(base + "/rows"),
                    out = g.unique_name(base + "/rows_out");
  g.add_node("Shape", {n.inputs[0]}, {shape}, {}, base + "/shape");
  g.add_node("Flatten", {n.inputs[0]}, {rows}, {{"axis", axis}}, base + "/flatten");
  attrs["axis"] = int64_t{1};
  g.add_node(n.op_type, {rows}, {out}, std::move(attrs), n.name);
  g.add_node("Reshape", {out, shape}, {n.outputs[0]}, {}, base + "/reshape");
  return true;
}

Graph graph_from_model(const reader::Model& m) {
  Graph g;
  g.name = m.graph_name.empty() ? g.name : m.graph_name;
  g.doc = m.doc;
  for (const auto& [k, v] : m.metadata) g.metadata[k] = v;
  g.opset = m.opset;
  for (const auto& [name, t] : m.initializers) g.initializers[name] = to_torch(t);
  for (const auto& v : m.inputs) g.inputs.push_back(*to_value_info(v, "graph input", true));
  for (const auto& v : m.outputs) g.outputs.push_back(*to_value_info(v, "graph output", true));
  for (const auto& v : m.value_info)
    if (auto vi = to_value_info(v, "value_info", false)) g.value_info.push_back(std::move(*vi));
  for (const auto& n : m.nodes) {
    std::map<std::string, AttrValue> attrs;
    for (const auto& [k, v] : n.attrs) attrs.emplace(k, to_attr(v));
    if (add_coerced_softmax(g, n, attrs)) continue;
    Node& node = g.add_node(n.op_type, n.inputs, n.outputs, std::move(attrs), n.name);
    node.domain = n.domain;
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

// COO parts of a tensor: the int64 linear positions (ascending, as the checker requires) of the
// elements whose bits are not all zero, and those elements. Comparing bits rather than values
// keeps -0.0 (and NaN payloads) exact through a round trip.
std::pair<at::Tensor, at::Tensor> coo_of(const at::Tensor& src) {
  const at::Tensor flat = src.detach().to(at::kCPU).contiguous().reshape({-1});
  at::ScalarType bits = at::kByte;
  switch (flat.element_size()) {
    case 1: bits = at::kByte; break;
    case 2: bits = at::kShort; break;
    case 4: bits = at::kInt; break;
    case 8: bits = at::kLong; break;
    default: PARE_ASSERT(false, "no integer type of ", flat.element_size(), " bytes for ", flat.scalar_type());
  }
  const at::Tensor as_bits = flat.scalar_type() == bits ? flat : flat.view(bits);
  at::Tensor idx = at::nonzero(as_bits).reshape({-1}).contiguous();
  return {idx, flat.index_select(0, idx)};
}

// `t` as a sparse_initializer: values [NNZ] named `name`, int64 linear indices [NNZ], the dense dims.
void sparse_to_proto(const std::string& name, const at::Tensor& t, onnx::SparseTensorProto* sp) {
  const auto [idx, values] = coo_of(t);
  tensor_to_proto(values, sp->mutable_values());
  sp->mutable_values()->set_name(name);
  tensor_to_proto(idx, sp->mutable_indices());
  for (int64_t d : t.sizes()) sp->add_dims(d);
}

// Bytes a length-delimited field of `n` bytes with a one-byte tag takes in its parent message.
int64_t field_bytes(size_t n) {
  int64_t varint = 1;
  for (size_t v = n; v >= 0x80; v >>= 7) ++varint;
  return 1 + varint + static_cast<int64_t>(n);
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

// The default-domain opset a graph is written with: its own, raised to the first opset that has
// every op it uses (a graph built with RMSNormalization, RotaryEmbedding or Attention needs 23).
int64_t written_opset(const Graph& g) {
  int64_t opset = g.opset;
  for (const Node& n : g.nodes)
    if (n.domain.empty() || n.domain == "ai.onnx")
      if (const OpDef* op = OpRegistry::global().find(n.op_type)) opset = std::max(opset, op->since_opset);
  return opset;
}

onnx::ModelProto model_from_graph(const Graph& g, const std::set<std::string>& sparse = {}) {
  for (const auto& name : sparse) {
    auto it = g.initializers.find(name);
    PARE_CHECK(it != g.initializers.end(), "cannot write '", name, "' of model '", g.name,
               "' as a sparse initializer: the model has no initializer of that name");
    PARE_CHECK(it->second.dim() >= 1 && it->second.numel() > 0, "cannot write initializer '", name, "' of model '",
               g.name, "' as a sparse initializer: its shape is ", it->second.sizes(),
               "; ONNX sparse initializers need rank >= 1 and positive dims");
  }
  onnx::ModelProto m;
  m.set_ir_version(kIrVersion);
  m.set_producer_name("pare");
  m.set_producer_version(PARE_VERSION);
  if (!g.doc.empty()) m.set_doc_string(g.doc);
  auto* op = m.add_opset_import();
  op->set_domain("");
  op->set_version(written_opset(g));
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
    if (sparse.count(name)) {
      sparse_to_proto(name, t, gp->add_sparse_initializer());
      continue;
    }
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
  // The linked ONNX (Debian's 1.12) knows opsets up to 17: it would refuse every op of a newer
  // model as unregistered, so such a model gets the structural checks above only.
  const auto& known = onnx::OpSchemaRegistry::DomainToVersionRange::Instance().Map();
  for (const auto& op : m.opset_import())
    if ((op.domain().empty() || op.domain() == "ai.onnx") && op.version() > known.at("").second) return;
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

// A Graph from what the reader read; errors name `origin`.
Graph graph_of(const reader::Model& m, const std::string& origin, const OnnxLoadOptions& opts) {
  try {
    Graph g = graph_from_model(m);
    if (opts.verify_) g.verify();
    return g;
  } catch (const InputError& e) {
    throw InputError("'" + origin + "': " + e.what());
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {  // c10::Error, std::bad_alloc
    throw InputError("'" + origin + "': " + e.what());
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------

Graph parse_onnx(const std::string& bytes, const std::string& origin) {
  return parse_onnx(bytes, origin, OnnxLoadOptions());
}

Graph parse_onnx(const std::string& bytes, const std::string& origin, const OnnxLoadOptions& opts) {
  return graph_of(reader::parse_model(bytes, origin), origin, opts);  // the reader names `origin`
}

Graph load_onnx(const std::string& path) { return load_onnx(path, OnnxLoadOptions()); }

at::Tensor load_tensor_pb(const std::string& path) { return to_torch(reader::parse_tensor(read_file(path), path)); }

Graph load_onnx(const std::string& path, const OnnxLoadOptions& opts) {
  return parse_onnx(read_file(path), path, opts);
}

Graph load_onnx(const std::string& path, const OnnxLoadOptions& opts, OnnxFileInfo* info) {
  const std::string bytes = read_file(path);
  const reader::Model m = reader::parse_model(bytes, path);
  if (info) {
    info->file_bytes = static_cast<int64_t>(bytes.size());
    info->sparse_initializers = m.sparse_initializers;
  }
  return graph_of(m, path, opts);
}

SparseCost sparse_cost(const std::string& name, const at::Tensor& t) {
  PARE_CHECK(t.dim() >= 1 && t.numel() > 0, "initializer '", name, "' has shape ", t.sizes(),
             "; ONNX sparse initializers need rank >= 1 and positive dims");
  onnx::TensorProto dense;
  dense.set_name(name);
  tensor_to_proto(t, &dense);
  onnx::SparseTensorProto sp;
  sparse_to_proto(name, t, &sp);
  SparseCost c;
  c.elements = t.numel();
  c.nonzeros = sp.values().dims(0);
  // GraphProto's initializer (5) and sparse_initializer (15) both have one-byte tags.
  c.dense_bytes = field_bytes(dense.ByteSizeLong());
  c.sparse_bytes = field_bytes(sp.ByteSizeLong());
  return c;
}

std::string serialize_onnx(const Graph& g, bool check) { return serialize_onnx(g, OnnxSaveOptions().check(check)); }

std::string serialize_onnx(const Graph& g, const OnnxSaveOptions& opts) {
  const onnx::ModelProto m = model_from_graph(g, opts.sparse_);
  const std::string what = "model '" + g.name + "'";
  if (opts.check_) run_checker(m, what);
  return serialize(m, what);
}

void save_onnx(const Graph& g, const std::string& path, const OnnxSaveOptions& opts) {
  onnx::ModelProto m = model_from_graph(g, opts.sparse_);
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

namespace {

struct ModelSource {
  std::string prefix;
  ModelLoader load;
  std::function<bool(const std::string&)> claims;
};

std::vector<ModelSource>& model_sources() {
  static std::vector<ModelSource> sources;
  return sources;
}

}  // namespace

void register_model_source(const std::string& prefix, ModelLoader load,
                           std::function<bool(const std::string& path)> claims) {
  for (const ModelSource& s : model_sources())
    if (s.prefix == prefix) return;
  model_sources().push_back({prefix, std::move(load), std::move(claims)});
}

Graph load_model(const std::string& path_or_spec, uint64_t seed) {
  for (const ModelSource& s : model_sources()) {
    if (path_or_spec.rfind(s.prefix + ":", 0) == 0) return s.load(path_or_spec.substr(s.prefix.size() + 1), seed);
    if (s.claims && s.claims(path_or_spec)) return s.load(path_or_spec, seed);
  }
  if (is_zoo_spec(path_or_spec)) return build_zoo_model(path_or_spec, seed);
  if (file_exists(path_or_spec)) return load_onnx(path_or_spec);
  std::string known;
  for (const auto& line : zoo_help())  // the spec part of each help line
    known += (known.empty() ? "" : ", ") + line.substr(0, line.find(' '));
  throw InputError("'" + path_or_spec + "' is neither an ONNX file nor a zoo model (known: " +
                   known + ")");
}

}  // namespace pare::core
