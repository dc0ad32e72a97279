/*===- backend_plugin.h - The C boundary of a backend plugin ------*- C -*-===//
 *
 * A backend that lives in a shared library (the CUDA backend,
 * lib/libcleave_cuda.so) is reached through these plain C structs and
 * functions only: no C++ type crosses dlopen's boundary, so a plugin built by
 * another compiler or standard library, or a later build, either speaks this
 * version of the interface or is refused by its version number.
 *
 * A program crosses as a cleave_program: the plan's values, instructions and
 * constants as flat arrays the caller owns for the length of the call. The
 * plugin links the runtime's core (the loader, the schema's validator,
 * fusion) and loads it exactly as the host does; the host has also run the
 * CPU kernels' shape checks on it (runtime/cpu/cpu_kernel.h).
 *
 * Every function that can fail returns 0 on success and otherwise writes a
 * NUL-terminated message of at most error_size bytes to error.
 *
 *===----------------------------------------------------------------------===*/

#ifndef CLEAVE_RUNTIME_BACKEND_PLUGIN_H
#define CLEAVE_RUNTIME_BACKEND_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped whenever a struct or signature below changes. */
#define CLEAVE_PLUGIN_ABI_VERSION 1

/* Element types, as plan.proto numbers them. */
enum cleave_dtype {
  CLEAVE_F32 = 1,
  CLEAVE_I64 = 2,
  CLEAVE_I32 = 3,
  CLEAVE_BOOL = 4,
  /* Storage dtypes of a model's inputs and outputs: only cast reads them. */
  CLEAVE_F64 = 5,
  CLEAVE_F16 = 6,
  CLEAVE_BF16 = 7,
  CLEAVE_I8 = 8,
  CLEAVE_I16 = 9,
  CLEAVE_U8 = 10,
  CLEAVE_U16 = 11,
  CLEAVE_U32 = 12
};

/* Where a value's bytes live, as plan.proto's Value.Storage. */
enum cleave_storage {
  CLEAVE_ARENA = 0,
  CLEAVE_INPUT = 1,
  CLEAVE_CONSTANT = 2,
  CLEAVE_OUTPUT = 3
};

typedef struct cleave_value {
  int32_t dtype; /* enum cleave_dtype, or another number (refused) */
  int32_t rank;
  const int64_t *shape;
  int32_t storage; /* enum cleave_storage */
  int32_t index;   /* input, constant or output index */
  int64_t offset;  /* bytes into the arena, input, constant or output */
} cleave_value;

typedef struct cleave_attr {
  const char *name;
  const int64_t *ints;
  int64_t num_ints;
  const double *floats;
  int64_t num_floats;
} cleave_attr;

typedef struct cleave_instruction {
  const char *kernel;
  const char *location;
  const int32_t *operands; /* value ids; -1 for an absent optional one */
  int32_t num_operands;
  const int32_t *results;
  int32_t num_results;
  const cleave_attr *attrs;
  int32_t num_attrs;
} cleave_instruction;

typedef struct cleave_bytes {
  const void *data;
  int64_t size;
} cleave_bytes;

typedef struct cleave_program {
  const char *name;
  const cleave_value *values;
  int32_t num_values;
  const int32_t *inputs;
  int32_t num_inputs;
  const char *const *input_names; /* num_inputs of them, or null */
  int32_t num_input_names;
  const int32_t *outputs;
  int32_t num_outputs;
  const char *const *output_names;
  int32_t num_output_names;
  const cleave_bytes *constants;
  int32_t num_constants;
  int64_t arena_bytes;
  const cleave_instruction *instructions;
  int32_t num_instructions;
} cleave_program;

/* This rank's place in the device mesh, and the one host collective a
 * plugin needs: a broadcast over the group of mesh axes (NCCL's unique id).
 * The host's communicator stays on the host; context is its opaque handle. */
typedef struct cleave_mesh {
  int32_t rank;
  int32_t num_dims;
  const int64_t *shape;
  double timeout_seconds;
  void *context;
  int (*broadcast)(void *context, void *buf, int64_t bytes, int32_t root,
                   const int64_t *axes, int32_t num_axes, char *error,
                   size_t error_size);
} cleave_mesh;

/* A loaded program the plugin runs; runner is the plugin's handle. Inputs
 * and outputs are copied through host buffers of exactly their byte size. */
typedef struct cleave_runner {
  void *runner;
  int (*carry)(void *runner, int32_t input, int32_t output, char *error,
               size_t error_size);
  int (*set_input)(void *runner, int32_t input, const void *bytes, int64_t size,
                   char *error, size_t error_size);
  int (*run)(void *runner, char *error, size_t error_size);
  int (*get_input)(void *runner, int32_t input, void *bytes, int64_t size,
                   char *error, size_t error_size);
  int (*get_output)(void *runner, int32_t output, void *bytes, int64_t size,
                    char *error, size_t error_size);
  void (*destroy)(void *runner);
} cleave_runner;

/* The plugin's exports. */
typedef uint32_t (*cleave_plugin_abi_version_fn)(void);
/* The number of usable devices; 0 with a reason when there are none. */
typedef int (*cleave_plugin_probe_fn)(char *reason, size_t reason_size);
/* precision: 0 for f32, 1 for bf16 matmul operands. */
typedef int (*cleave_plugin_create_fn)(const cleave_program *program,
                                       const cleave_mesh *mesh,
                                       int32_t precision, cleave_runner *out,
                                       char *error, size_t error_size);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* CLEAVE_RUNTIME_BACKEND_PLUGIN_H */
