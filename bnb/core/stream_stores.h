// How the CPU kernels stream large data: when they write their output with streaming (non-temporal) stores, around
// the caches (no read of each output line before it is overwritten, which on Sapphire / Emerald Rapids halves a
// large output's write rate), and how far ahead the dequantize kernels prefetch their codes.
#pragma once

#include <cstdint>

namespace bnb::core {

// Ops that move (read and write) this many bytes in all: too many for their output to stay cached for its reader.
// 16 MB: on an Emerald Rapids class VM a 4096 x 4096 bfloat16 dequantize (40 MB moved) ran 1.8x faster streamed,
// 4M float32 outputs (18 MB) 1.3x; at 8 MB the two stores tie (tools/bench/NOTES.md, 'Streaming stores').
inline constexpr int64_t kStreamFromBytes = int64_t{16} << 20;

// How many elements ahead of their reads the AVX-512 dequantize kernels (blockwise8_x86.cc, blockwise4_x86.cc)
// prefetch their codes: one byte or half a byte an element, a thin stream beside an output two to eight times as
// wide, which the hardware prefetcher alone left behind (8-bit into 16 bits 12-40% faster, float32 15-25% at two
// threads, 4-bit into 16 bits 2-20%: tools/bench/NOTES.md, 'Dequantize: the codes prefetched').
inline constexpr int64_t kCodesAhead = 4096;

// Whether an op that moves `moved` bytes streams its output at `out`: it moves enough, and the output is 64-byte
// aligned, so that every vector store at a multiple of 64 bytes from the start is aligned as streaming stores need.
inline bool StreamsOutput(const void* out, int64_t moved) {
  return moved >= kStreamFromBytes && reinterpret_cast<uintptr_t>(out) % 64 == 0;
}

}  // namespace bnb::core
