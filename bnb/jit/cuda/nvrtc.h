// NVRTC, opened at run time with dlopen: bnb does not link libnvrtc, so one build serves machines with and without
// the CUDA toolkit. Only the functions bnb uses are declared, with bnb's own types (ABI-compatible with nvrtc.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace bnb::jit::cuda {

using nvrtcResult = int;  // NVRTC_SUCCESS == 0
using nvrtcProgram = struct _nvrtcProgram*;

struct Nvrtc {
  std::string path;  // the library that was opened
  int major = 0, minor = 0;
  // The size of the file at `path` (-1 when it cannot be read): nvrtcVersion gives only major.minor, and a patch
  // release (13.0.48 -> 13.0.88) can change the code generated; its file size changes with it.
  int64_t library_bytes = -1;
  std::vector<int> supported_archs;  // e.g. {75, 80, 86, ..., 90, 100, 120}, ascending
  nvrtcResult (*nvrtcVersion)(int* major, int* minor);
  nvrtcResult (*nvrtcGetNumSupportedArchs)(int* n);
  nvrtcResult (*nvrtcGetSupportedArchs)(int* archs);
  nvrtcResult (*nvrtcCreateProgram)(nvrtcProgram* prog, const char* src, const char* name, int num_headers,
                                    const char* const* headers, const char* const* include_names);
  nvrtcResult (*nvrtcDestroyProgram)(nvrtcProgram* prog);
  nvrtcResult (*nvrtcCompileProgram)(nvrtcProgram prog, int num_options, const char* const* options);
  nvrtcResult (*nvrtcAddNameExpression)(nvrtcProgram prog, const char* name_expression);
  nvrtcResult (*nvrtcGetLoweredName)(nvrtcProgram prog, const char* name_expression, const char** lowered);
  nvrtcResult (*nvrtcGetCUBINSize)(nvrtcProgram prog, size_t* size);
  nvrtcResult (*nvrtcGetCUBIN)(nvrtcProgram prog, char* cubin);
  nvrtcResult (*nvrtcGetPTXSize)(nvrtcProgram prog, size_t* size);
  nvrtcResult (*nvrtcGetPTX)(nvrtcProgram prog, char* ptx);
  nvrtcResult (*nvrtcGetProgramLogSize)(nvrtcProgram prog, size_t* size);
  nvrtcResult (*nvrtcGetProgramLog)(nvrtcProgram prog, char* log);
  const char* (*nvrtcGetErrorString)(nvrtcResult result);
};

// A library file GetNvrtc tries right after the cuda.nvrtc_path knob's (so any config layer that sets the knob
// wins): the Python package passes the nvidia-cuda-nvrtc wheel's copy. Takes effect if NVRTC is not open yet.
void SetFallbackNvrtcPath(const std::string& path);

// NVRTC, opened once per process. Looks for, in order: the file the cuda.nvrtc_path knob names (env
// BNB_CUDA_NVRTC_PATH, or any config layer), SetFallbackNvrtcPath's; libnvrtc.so.13 and
// then libnvrtc.so.12 through the dynamic loader (LD_LIBRARY_PATH, an already-loaded copy such as torch's), then
// under $CUDA_HOME/lib64, $CUDA_HOME/lib and /usr/local/cuda/lib64. NVRTC's companion libnvrtc-builtins is
// preloaded from the same directory, so a copy outside the loader's path works. An error lists every place tried.
absl::StatusOr<const Nvrtc*> GetNvrtc();

}  // namespace bnb::jit::cuda
