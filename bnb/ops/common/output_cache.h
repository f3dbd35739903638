// Large CPU outputs from a cache of blocks that earlier outputs freed.
//
// A fresh mapping costs its first touch: the kernel zeroes every page, and in a VM the host may fault it in too
// (tools/bench/NOTES.md, 'Output cache'). An allocating op called in a loop - dequantize_4bit as users call it,
// or a batch's product - would pay that on every call. Here a freed output's memory goes back to a small cache
// (at most cpu.output_cache_mb, released after kIdleRelease unused) and the next output of about its size reuses
// it. The tensors are ordinary CPU tensors: resizable, their storage allocated by this allocator.
#pragma once

#include <c10/core/Allocator.h>

#include <cstdint>

namespace bnb::ops {

// Outputs from this size up come from the cache; smaller ones fault in few pages and stay with torch's allocator.
inline constexpr size_t kOutputCacheFrom = size_t{8} << 20;

// The allocator for such outputs. Reads cpu.output_cache_mb and cpu.huge_pages as it allocates.
c10::Allocator* OutputCacheAllocator();

struct OutputCacheStats {
  int64_t cached_bytes = 0;   // held for reuse now, mapped but owned by no tensor
  int64_t cached_blocks = 0;
  int64_t reuses = 0;         // allocations served from the cache since the process started
  int64_t mappings = 0;       // allocations that mapped fresh memory
};
OutputCacheStats GetOutputCacheStats();

// Unmaps every cached block now (tensors still alive are untouched).
void ReleaseOutputCache();

}  // namespace bnb::ops
