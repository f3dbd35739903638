// Host side of kernels/blockwise4.cuh: the kernel specs, launch shapes and launches the ops layer needs for
// blockwise 4-bit quantization (NF4, FP4) and the 4-bit matrix-vector product on CUDA. Pointers are device
// pointers; `stream` is the runtime's stream handle (a CUstream) as void*. Results equal bnb/core's CPU kernels:
// quantize and dequantize bit for bit (bnb/core/blockwise4.h), gemv up to float32 summation order
// (bnb/core/gemv4.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bnb/core/blockwise4.h"
#include "bnb/core/dtype.h"
#include "bnb/jit/kernel_cache.h"
#include "bnb/jit/kernel_spec.h"
#include "bnb/jit/runtime.h"

namespace bnb::jit {

// gemv4's own shape: it does not take the cuda.threads_per_block knob.
inline constexpr int kDefaultGemv4Threads = 256;
inline constexpr int kDefaultGemv4Rows = 2;  // rows per warp

// The spec of quantize_blockwise4<T, blocksize, threads, quant>. `threads` here and below (but gemv's) is the
// cuda.threads_per_block knob's value (0: its default; threads_per_block.h). Errors name a bad blocksize (power
// of two in [32, 4096]) or thread count (power of two in [32, 1024]). An empty arch is filled in by
// KernelCache::GetKernel from the device.
absl::StatusOr<KernelSpec> Quantize4Spec(core::DType dtype, int64_t blocksize, core::Quant4 quant, int threads,
                                         const std::string& arch);
// The spec of dequantize_blockwise4<T, blocksize, threads> (any 16-value code map: it is a kernel argument).
absl::StatusOr<KernelSpec> Dequantize4Spec(core::DType dtype, int64_t blocksize, int threads,
                                           const std::string& arch);
// The spec of gemv4<T, threads, rows> (blocksize and code map are kernel arguments). 0 means the defaults; rows
// per warp in [1, 8].
absl::StatusOr<KernelSpec> Gemv4Spec(core::DType dtype, int threads, int rows, const std::string& arch);

// Every quantize / dequantize spec for every dtype, blocksize and quant type, and gemv for every dtype, with
// default shapes; registered as the blockwise4 family (kernel_registry.h).
std::vector<KernelSpec> AllBlockwise4Specs(const std::string& arch, int threads = 0);

// Grid for n elements: one CTA per tile of quant blocks, at most as many as the device holds at once when each
// multiprocessor holds `ctas_per_sm` of them (ResidentCtasPerSm).
Dim3 Blockwise4Grid(int64_t n, int64_t blocksize, int threads, core::DType dtype, const DeviceInfo& device,
                    int ctas_per_sm);
// Grid for N rows: one CTA per threads / 32 * rows rows. Fails past the grid limit.
absl::StatusOr<Dim3> Gemv4Grid(int64_t N, int threads, int rows);

// Get (compile or load) and launch. x, out: n elements of dtype; packed: core::PackedSize4(n) bytes; absmax:
// core::NumBlocks(n, blocksize) floats; code16: 16 floats in code order (core::Code4(q) for NF4 / FP4; any finite
// map). n == 0 launches nothing.
absl::Status LaunchQuantizeBlockwise4(KernelCache& cache, int device, core::DType dtype, core::Quant4 quant,
                                      const void* x, uint8_t* packed, float* absmax, int64_t n, int64_t blocksize,
                                      void* stream, int threads = 0);
absl::Status LaunchDequantizeBlockwise4(KernelCache& cache, int device, core::DType dtype, const uint8_t* packed,
                                        const float* code16, const float* absmax, void* out, int64_t n,
                                        int64_t blocksize, void* stream, int threads = 0);
// out (N elements of dtype) = W A, A: K elements of dtype; W: N x K quantized as one flat tensor of N * K elements
// (packed: PackedSize4(N * K) bytes, absmax: NumBlocks(N * K, blocksize) floats), as bnb::core::Gemv4. N == 0
// launches nothing; K == 0 writes zeros.
absl::Status LaunchGemv4(KernelCache& cache, int device, core::DType dtype, const void* A, const uint8_t* packed,
                         const float* absmax, const float* code16, void* out, int64_t N, int64_t K,
                         int64_t blocksize, void* stream, int threads = 0, int rows = 0);

}  // namespace bnb::jit
