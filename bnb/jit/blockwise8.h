// Host side of kernels/blockwise8.cuh: the kernel specs, launch shapes and launches the ops layer needs for
// blockwise 8-bit quantization on CUDA. Pointers are device pointers; `stream` is the runtime's stream handle (a
// CUstream) as void*.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bnb/core/dtype.h"
#include "bnb/jit/kernel_cache.h"
#include "bnb/jit/kernel_spec.h"
#include "bnb/jit/runtime.h"

namespace bnb::jit {

// The C++ type the templates use for `dtype`: "float", "bnb::half", "bnb::bf16".
const char* CudaTypeName(core::DType dtype);

// The spec of quantize_blockwise8<T, blocksize, threads> (quantize) or dequantize_blockwise8<...>. `threads` here
// and below is the cuda.threads_per_block knob's value (0: its default; threads_per_block.h). Errors name a bad blocksize (power of two in [32, 4096]) or thread count
// (power of two in [32, 1024]). An empty arch is filled in by KernelCache::GetKernel from the device.
absl::StatusOr<KernelSpec> Blockwise8Spec(bool quantize, core::DType dtype, int64_t blocksize, int threads,
                                          const std::string& arch);

// The spec of prepare_codebook8, the first of quantize's two launches: one CTA of kPrepareCodebook8Threads.
inline constexpr int kPrepareCodebook8Threads = 256;  // one per codebook entry
KernelSpec PrepareCodebook8Spec(const std::string& arch);

// Device bytes quantize needs for the prepared codebook (sizeof(bw8::Prepared) in kernels/blockwise8.cuh).
inline constexpr int64_t kQuantizeBlockwise8ScratchBytes = 22784;

// Every quantize and dequantize spec, for every dtype and blocksize, and the prepare spec; registered as the
// blockwise8 family (kernel_registry.h).
std::vector<KernelSpec> AllBlockwise8Specs(const std::string& arch, int threads = 0);

// Grid for n elements: one CTA per tile of quant blocks, at most as many as the device holds at once when each
// multiprocessor holds `ctas_per_sm` of them (ResidentCtasPerSm).
Dim3 Blockwise8Grid(int64_t n, int64_t blocksize, int threads, core::DType dtype, const DeviceInfo& device,
                    int ctas_per_sm);

// Get (compile or load) and launch. x, out: n elements of dtype; codes: n bytes; absmax: NumBlocks floats;
// code: the 256-entry codebook (finite floats; quantize with a non-finite entry writes NaN absmax everywhere, see
// bw8::Prepared in kernels/blockwise8.cuh); scratch: kQuantizeBlockwise8ScratchBytes, 16-byte aligned, free for
// the launches' use on `stream`. n == 0 launches nothing.
absl::Status LaunchQuantizeBlockwise8(KernelCache& cache, int device, core::DType dtype, const void* x,
                                      const float* code, uint8_t* codes, float* absmax, void* scratch, int64_t n,
                                      int64_t blocksize, void* stream, int threads = 0);
absl::Status LaunchDequantizeBlockwise8(KernelCache& cache, int device, core::DType dtype, const uint8_t* codes,
                                        const float* code, const float* absmax, void* out, int64_t n,
                                        int64_t blocksize, void* stream, int threads = 0);

}  // namespace bnb::jit
