/* pare_rt's C interface: load an ONNX model written by pare and run it, from C or any language
 * with a C FFI. Wraps pare::rt::Model (rt/rt.h).
 *
 *   char err[512];
 *   pare_rt_model* m = pare_rt_load("student.int8.onnx", 0, err, sizeof err);
 *   if (!m) { fprintf(stderr, "%s\n", err); return 2; }
 *   int64_t dims[4] = {1, 1, 28, 28};
 *   pare_rt_tensor in = {PARE_RT_FLOAT32, 4, dims, pixels}, out;
 *   if (pare_rt_run(m, &in, 1, &out, 1, err, sizeof err) != 0) ...   // out.data: [1, 10] floats
 *   pare_rt_free(m);
 *
 * Functions that can fail return NULL or a nonzero code (2: bad file or input, 1: other failure)
 * and write a message naming the file, node or input into `err` (when not NULL). */
#ifndef PARE_RT_H_
#define PARE_RT_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pare_rt_model pare_rt_model;

typedef enum {
  PARE_RT_FLOAT32 = 0,
  PARE_RT_UINT8 = 1,
  PARE_RT_INT8 = 2,
  PARE_RT_INT32 = 3,
  PARE_RT_INT64 = 4,
  PARE_RT_BOOL = 5
} pare_rt_dtype;

/* A dense row-major tensor. Inputs: owned by the caller. Outputs: owned by the model, valid until
 * the next pare_rt_run or pare_rt_free on it. */
typedef struct {
  pare_rt_dtype dtype;
  int64_t ndim;
  const int64_t* dims;
  void* data;
} pare_rt_tensor;

/* Loads an ONNX file; `threads` 0 uses every core. NULL on failure. */
pare_rt_model* pare_rt_load(const char* path, int threads, char* err, size_t err_len);
void pare_rt_free(pare_rt_model* model);

int pare_rt_num_inputs(const pare_rt_model* model);
int pare_rt_num_outputs(const pare_rt_model* model);
/* Name of input / output i, NULL when out of range. */
const char* pare_rt_input_name(const pare_rt_model* model, int i);
const char* pare_rt_output_name(const pare_rt_model* model, int i);

/* Runs the model: one tensor per input, in order; fills `outputs` (n_outputs of them, at most
 * pare_rt_num_outputs). Returns 0, or 2 / 1 with `err` filled. */
int pare_rt_run(pare_rt_model* model, const pare_rt_tensor* inputs, int n_inputs, pare_rt_tensor* outputs,
                int n_outputs, char* err, size_t err_len);

/* Threads of later runs (0: every core). */
int pare_rt_set_threads(pare_rt_model* model, int threads, char* err, size_t err_len);

/* "pare_rt 0.1.0, oneDNN 2.6.3 (avx2)" */
const char* pare_rt_version(void);

#ifdef __cplusplus
}
#endif

#endif /* PARE_RT_H_ */
