// Loads oneDNN (Debian's libdnnl.so.2) privately and forwards pare_rt's oneDNN calls to it.
//
// Why: libtorch_cpu.so carries its own oneDNN (3.x) and exports some of its inline functions, among
// them the std::call_once thunks of dnnl::impl::cpu::x64::gemm_info_t<...>::jit_init, which
// libdnnl.so.2 (2.6) defines and calls under the same names. Linked the ordinary way, in a process
// that also has libtorch (pare itself, its tests, an application using both), libdnnl's calls bind to
// libtorch's copies: oneDNN 2.6's gemm kernels are then never set up and its gemm-based
// convolutions fail to run ("unimplemented", RtLowering.GroupedAndDepthwiseConvsRunInt8). So
// libpare_rt.so does not link libdnnl: it opens it with RTLD_DEEPBIND, so that libdnnl's own
// definitions come first for its calls, and RTLD_LOCAL, so that libtorch never sees them.
//
// Each oneDNN C function pare_rt calls (dnnl.hpp wraps the C API) is defined here, hidden, as a jump
// through a pointer that load_dnnl() fills from the opened library. A function missing from the list
// fails the link of libpare_rt.so (-Wl,--no-undefined), naming it.
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

#include "rt/internal.h"

#define PARE_DNNL_FUNCTIONS(X)                                                                              \
  X(dnnl_binary_desc_init) X(dnnl_dilated_convolution_forward_desc_init) X(dnnl_eltwise_forward_desc_init) \
  X(dnnl_engine_create) X(dnnl_engine_destroy) X(dnnl_get_effective_cpu_isa)                               \
  X(dnnl_inner_product_forward_desc_init) X(dnnl_matmul_desc_init) X(dnnl_memory_create)                   \
  X(dnnl_memory_desc_equal) X(dnnl_memory_desc_get_size) X(dnnl_memory_desc_init_by_strides)               \
  X(dnnl_memory_desc_init_by_tag) X(dnnl_memory_destroy) X(dnnl_memory_get_engine)                         \
  X(dnnl_memory_get_memory_desc) X(dnnl_memory_set_data_handle_v2) X(dnnl_pooling_v2_forward_desc_init)    \
  X(dnnl_post_ops_append_eltwise) X(dnnl_post_ops_append_sum_v3) X(dnnl_post_ops_create)                   \
  X(dnnl_post_ops_destroy) X(dnnl_primitive_attr_create) X(dnnl_primitive_attr_destroy)                    \
  X(dnnl_primitive_attr_set_output_scales) X(dnnl_primitive_attr_set_post_ops)                             \
  X(dnnl_primitive_attr_set_zero_points) X(dnnl_primitive_create) X(dnnl_primitive_desc_destroy)           \
  X(dnnl_primitive_desc_iterator_create) X(dnnl_primitive_desc_iterator_destroy)                           \
  X(dnnl_primitive_desc_iterator_fetch) X(dnnl_primitive_desc_query_md) X(dnnl_primitive_destroy)          \
  X(dnnl_primitive_execute) X(dnnl_reorder_primitive_desc_create) X(dnnl_softmax_forward_desc_init)        \
  X(dnnl_stream_create) X(dnnl_stream_destroy) X(dnnl_stream_wait) X(dnnl_version)

#ifndef PARE_DNNL_PATH
#define PARE_DNNL_PATH "libdnnl.so.2"
#endif
#ifndef PARE_DNNL_SONAME
#define PARE_DNNL_SONAME "libdnnl.so.2"
#endif

namespace {

// What a forwarder reaches before load_dnnl() has filled its pointer: only a bug in pare_rt (every
// entry point loads oneDNN first) gets here.
[[noreturn]] void dnnl_not_loaded() {
  std::fputs("pare_rt: bug: a oneDNN function was called before oneDNN was loaded\n", stderr);
  std::abort();
}

}  // namespace

extern "C" {
#define PARE_DNNL_POINTER(name) \
  __attribute__((visibility("hidden"))) void* pare_dnnl_ptr_##name = reinterpret_cast<void*>(&dnnl_not_loaded);
PARE_DNNL_FUNCTIONS(PARE_DNNL_POINTER)
#undef PARE_DNNL_POINTER
}

// x86-64: the forwarder jumps, leaving the caller's arguments and return address as they are.
#define PARE_DNNL_FORWARDER(name)                                                           \
  asm(".text\n.globl " #name "\n.hidden " #name "\n.type " #name ", @function\n" #name ":\n" \
      "  jmp *pare_dnnl_ptr_" #name "(%rip)\n.size " #name ", .-" #name "\n");
PARE_DNNL_FUNCTIONS(PARE_DNNL_FORWARDER)
#undef PARE_DNNL_FORWARDER

namespace pare::rt {

void load_dnnl() {
  static std::once_flag once;
  static std::string error;
  std::call_once(once, [] {
    // AddressSanitizer refuses RTLD_DEEPBIND (google/sanitizers#611): a sanitized build opens
    // oneDNN the plain way, and then shares the clash described above when libtorch is loaded.
#if defined(__SANITIZE_ADDRESS__)
    const int flags = RTLD_NOW | RTLD_LOCAL;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
    const int flags = RTLD_NOW | RTLD_LOCAL;
#else
    const int flags = RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND;
#endif
#else
    const int flags = RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND;
#endif
    void* lib = dlopen(PARE_DNNL_PATH, flags);  // the one pare_rt was built against
    if (!lib) lib = dlopen(PARE_DNNL_SONAME, flags);
    if (!lib) {
      error = std::string("cannot load oneDNN (") + PARE_DNNL_SONAME + "): " + dlerror() +
              " (Debian: apt-get install libdnnl2)";
      return;
    }
#define PARE_DNNL_RESOLVE(name)                                                                  \
  if (void* f = dlsym(lib, #name)) pare_dnnl_ptr_##name = f;                                     \
  else if (error.empty()) error = std::string("oneDNN (") + PARE_DNNL_PATH + ") has no " #name;
    PARE_DNNL_FUNCTIONS(PARE_DNNL_RESOLVE)
#undef PARE_DNNL_RESOLVE
  });
  if (!error.empty()) throw Error(error);
}

}  // namespace pare::rt
