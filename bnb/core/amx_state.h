// AMX's tile state: Linux grants a process the tile data (8 KB more of state to save per thread) on request only
// (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)); torch's oneDNN asks the same. The AMX kernels
// (gemm4_packed_amx.cc, int8_gemm_amx.cc) ask here, once per process.
#pragma once

namespace bnb::core {

// Whether this process may use AMX tiles: the processor has AMX-TILE and Linux granted the tile data (asked on the
// first call). False on other architectures.
bool AmxTileStateGranted();

}  // namespace bnb::core
