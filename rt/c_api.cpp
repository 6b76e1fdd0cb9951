// The C interface (pare_rt.h) over pare::rt::Model: exceptions become return codes and messages.
#include "rt/pare_rt.h"

#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "rt/rt.h"

#ifndef PARE_VERSION
#define PARE_VERSION "0.1.0"
#endif

struct pare_rt_model {
  pare::rt::Model model;
  std::vector<pare::rt::TensorView> inputs;  // reused: a run at the same shapes allocates nothing
};

namespace {

void say(char* err, size_t len, const std::string& msg) {
  if (!err || len == 0) return;
  const size_t n = std::min(len - 1, msg.size());
  std::memcpy(err, msg.data(), n);
  err[n] = '\0';
}

// Runs f, turning exceptions into (code, message).
template <class F>
int guarded(char* err, size_t len, F f) {
  try {
    f();
    say(err, len, "");
    return 0;
  } catch (const pare::Error& e) {
    say(err, len, e.what());
    return e.exit_code();
  } catch (const std::exception& e) {
    say(err, len, e.what());
    return 1;
  }
}

}  // namespace

extern "C" {

pare_rt_model* pare_rt_load(const char* path, int threads, char* err, size_t err_len) {
  pare_rt_model* m = nullptr;
  guarded(err, err_len, [&] {
    PARE_CHECK(path != nullptr, "pare_rt_load: path is NULL");
    m = new pare_rt_model{pare::rt::Model::load(path, pare::rt::Options().threads(threads)), {}};
  });
  return m;
}

void pare_rt_free(pare_rt_model* model) { delete model; }

int pare_rt_num_inputs(const pare_rt_model* m) { return m ? static_cast<int>(m->model.inputs().size()) : 0; }
int pare_rt_num_outputs(const pare_rt_model* m) { return m ? static_cast<int>(m->model.outputs().size()) : 0; }

const char* pare_rt_input_name(const pare_rt_model* m, int i) {
  if (!m || i < 0 || i >= pare_rt_num_inputs(m)) return nullptr;
  return m->model.inputs()[static_cast<size_t>(i)].name.c_str();
}

const char* pare_rt_output_name(const pare_rt_model* m, int i) {
  if (!m || i < 0 || i >= pare_rt_num_outputs(m)) return nullptr;
  return m->model.outputs()[static_cast<size_t>(i)].name.c_str();
}

int pare_rt_run(pare_rt_model* m, const pare_rt_tensor* inputs, int n_inputs, pare_rt_tensor* outputs, int n_outputs,
                char* err, size_t err_len) {
  return guarded(err, err_len, [&] {
    PARE_CHECK(m != nullptr, "pare_rt_run: model is NULL");
    PARE_CHECK(n_inputs >= 0 && (n_inputs == 0 || inputs), "pare_rt_run: inputs are NULL");
    PARE_CHECK(n_outputs >= 0 && n_outputs <= pare_rt_num_outputs(m) && (n_outputs == 0 || outputs),
               "pare_rt_run: n_outputs must be 0..", pare_rt_num_outputs(m), ", got ", n_outputs);
    m->inputs.resize(static_cast<size_t>(n_inputs));
    for (int k = 0; k < n_inputs; ++k) {
      const pare_rt_tensor& t = inputs[k];
      PARE_CHECK(t.dtype >= PARE_RT_FLOAT32 && t.dtype <= PARE_RT_BOOL, "input ", k, " has an unknown dtype ", t.dtype);
      PARE_CHECK(t.ndim >= 0 && t.ndim <= 16 && (t.ndim == 0 || t.dims), "input ", k, " has a bad rank ", t.ndim);
      auto& v = m->inputs[static_cast<size_t>(k)];
      v.dtype = static_cast<pare::rt::DType>(t.dtype);
      v.dims.assign(t.dims, t.dims + t.ndim);
      v.data = t.data;
    }
    const std::vector<pare::rt::TensorView>& out = m->model.run(m->inputs);
    for (int k = 0; k < n_outputs; ++k) {
      const auto& o = out[static_cast<size_t>(k)];
      outputs[k] = {static_cast<pare_rt_dtype>(o.dtype), static_cast<int64_t>(o.dims.size()), o.dims.data(), o.data};
    }
  });
}

int pare_rt_set_threads(pare_rt_model* m, int threads, char* err, size_t err_len) {
  return guarded(err, err_len, [&] {
    PARE_CHECK(m != nullptr, "pare_rt_set_threads: model is NULL");
    m->model.set_threads(threads);
  });
}

const char* pare_rt_version(void) {
  static const std::string v = std::string("pare_rt ") + PARE_VERSION + ", " + pare::rt::backend_version();
  return v.c_str();
}

}  // extern "C"
