// Runs bnb's CUDA kernel templates (bnb/jit/kernels/*.cuh, as the host headers bnb/jit/BUILD.bazel makes of them)
// on the CPU, so their logic is tested bit for bit against bnb/core without a GPU. Include this first, then the
// kernel's <name>_host.h, and launch with bnb::emu::Launch.
//
// Each CUDA thread is a fiber; a CTA's fibers run in turn, in a random order each round, until each reaches a barrier
// (__syncthreads, or the warp barrier inside a shuffle), which releases when every thread it waits for has arrived
// (so an access that races another thread's between two barriers can come out wrong); CTAs run one after another,
// so __shared__ (here: static) variables serve one CTA at a time. A barrier some threads never reach, or a shuffle
// some lanes of its warp skip, aborts with a message. 16-byte accesses through the PTX wrappers check their alignment
// (a GPU faults where the host would not); plain Vec16 loads are checked by the sanitizer the tests build with.
// Nothing here models timing, memory ordering between threads without a barrier, or the GPU's NaN payloads (the
// kernels handle NaN explicitly where bnb defines it).
#pragma once

#include <math.h>

#include <cstdint>
#include <cstring>
#include <functional>

#define BNB_CUDA_EMULATION 1
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define BNB_NOINLINE __attribute__((noinline))
#define __launch_bounds__(...)
#define __shared__ static
#define __align__(n) alignas(n)

namespace bnb::emu {

struct Dim3 {
  unsigned x = 0, y = 0, z = 0;
};

// The running CUDA thread's coordinates (set by the scheduler before it resumes a fiber).
inline Dim3 thread_idx, block_idx, block_dim, grid_dim;

// Runs body once per CUDA thread of a grid (x and y) of 1-D CTAs of `threads` (a multiple of 32, at most 1024).
void RunGrid(Dim3 grid, unsigned threads, const std::function<void()>& body);

// kernel(args...) over `ctas` CTAs, or a 2-D grid.
template <class Kernel, class... Args>
void Launch(Dim3 grid, unsigned threads, Kernel kernel, Args... args) {
  RunGrid(grid, threads, [&] { kernel(args...); });
}
template <class Kernel, class... Args>
void Launch(unsigned ctas, unsigned threads, Kernel kernel, Args... args) {
  Launch(Dim3{ctas, 1, 1}, threads, kernel, args...);
}

// Device memory stand-in for the emulated kernels: `bytes` starting `misalign` bytes past a 16-byte boundary and
// ending within 15 bytes of an inaccessible page, so a kernel that reads or writes past the end (a 16-byte vector
// beyond the last, or any access reaching the next page) faults as it would on a GPU. Zero-filled.
class GuardedBuffer {
 public:
  explicit GuardedBuffer(size_t bytes, size_t misalign = 0);
  ~GuardedBuffer();
  GuardedBuffer(const GuardedBuffer&) = delete;
  GuardedBuffer& operator=(const GuardedBuffer&) = delete;
  unsigned char* data() { return data_; }
  size_t size() const { return bytes_; }

 private:
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  unsigned char* data_ = nullptr;
  size_t bytes_ = 0;
};

void SyncThreads();
int SyncThreadsAnd(int predicate);
// The lane `lane_mask` away (xor) in the caller's warp: its `bits` as it passed them.
uint64_t ShuffleXor(uint64_t bits, int lane_mask);
// Aborts unless p is aligned to `bytes` (what a GPU's vector access needs).
void CheckAligned(const void* p, unsigned bytes, const char* what);

}  // namespace bnb::emu

#define threadIdx (::bnb::emu::thread_idx)
#define blockIdx (::bnb::emu::block_idx)
#define blockDim (::bnb::emu::block_dim)
#define gridDim (::bnb::emu::grid_dim)

// The CUDA intrinsics the kernels call, with their device semantics (each a single IEEE rounding, nearest even; the
// tests build with -ffp-contract=off, so no two are fused).
inline unsigned int __float_as_uint(float f) { return __builtin_bit_cast(unsigned int, f); }
inline float __uint_as_float(unsigned int u) { return __builtin_bit_cast(float, u); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __frcp_rn(float a) { return 1.0f / a; }
inline float __fsqrt_rn(float a) { return sqrtf(a); }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline float __int2float_rn(int i) { return static_cast<float>(i); }
inline int __ffs(int x) { return __builtin_ffs(x); }
template <class T>
inline T __ldg(const T* p) { return *p; }
// Byte i of the result is byte (s >> 4i) & 7 of the 8 bytes {y:x} (x the low four).
inline unsigned int __byte_perm(unsigned int x, unsigned int y, unsigned int s) {
  const uint64_t both = (uint64_t{y} << 32) | x;
  unsigned int r = 0;
  for (int i = 0; i < 4; ++i) r |= static_cast<unsigned int>((both >> (8 * ((s >> (4 * i)) & 7u))) & 0xFFu) << (8 * i);
  return r;
}
inline unsigned int max(unsigned int a, unsigned int b) { return a > b ? a : b; }
inline unsigned int min(unsigned int a, unsigned int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline int min(int a, int b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
// Atomics: the CTAs run one at a time, each thread to its next barrier, so plain updates are atomic here.
inline double atomicAdd(double* p, double v) {
  const double old = *p;
  *p = old + v;
  return old;
}
inline unsigned int atomicMax(unsigned int* p, unsigned int v) {
  const unsigned int old = *p;
  *p = old > v ? old : v;
  return old;
}
inline void __syncthreads() { ::bnb::emu::SyncThreads(); }
inline int __syncthreads_and(int predicate) { return ::bnb::emu::SyncThreadsAnd(predicate); }
template <class T>
inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask) {
  static_assert(sizeof(T) <= 8, "32- and 64-bit shuffles");
  if (mask != 0xFFFFFFFFu) __builtin_trap();  // the kernels shuffle whole warps only
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  bits = ::bnb::emu::ShuffleXor(bits, lane_mask);
  T r;
  std::memcpy(&r, &bits, sizeof(T));
  return r;
}
