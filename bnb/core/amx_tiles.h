// AMX's tile state, for the AMX kernels (gemm4_packed_amx.cc, int8_gemm_amx.cc): Linux grants a process the tile
// data (8 KB more of state to save per thread) on request only (arch_prctl(ARCH_REQ_XCOMP_PERM,
// XFEATURE_XTILEDATA); torch's oneDNN asks the same), asked here once per process; and the tile configuration both
// kernels load, every tile's rows 64 bytes.
#pragma once

#include <cstdint>

namespace bnb::core {

// Whether this process may use AMX tiles: the processor has AMX-TILE and Linux granted the tile data (asked on the
// first call). False on other architectures.
bool AmxTileStateGranted();

// Loads palette 1 with tile i of rows[i] rows of 64 bytes (i < 8), and releases it. Only where AmxTileStateGranted().
void ConfigureTiles(const uint8_t (&rows)[8]);
void ReleaseTiles();

// GCC's _tile_loadd and _tile_stored name no memory operand: the kernels call this between plain stores and tile
// loads of the same memory (and tile stores and plain loads), so that none moves past the other or vanishes as dead.
inline void CompilerSeesTileLoads() { asm volatile("" ::: "memory"); }

}  // namespace bnb::core
