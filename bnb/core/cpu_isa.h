// Which instruction set the vectorized CPU kernels run on, and a cap on it (knob cpu.isa).
#pragma once

#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/status.h"

namespace bnb::core {

// Lower-case names ("avx3", "avx2", "sse4", "emu128", ...) of the instruction sets compiled into bnb that this
// processor supports, best first. The last one always works.
std::vector<std::string> AvailableIsas();

// Every instruction set compiled into bnb, best first, whether this processor has it or not: tests that loop over
// AvailableIsas() never run the others here.
std::vector<std::string> CompiledIsas();

// The instruction set the kernels dispatch to now, by name and as Highway's target bit (HWY_AVX2, ...).
std::string ActiveIsa();
int64_t ActiveTarget();

// Caps dispatch at `name` ("best" lifts the cap): kernels use the best available set no better than it.
// Any set compiled into bnb is accepted, supported by this processor or not; otherwise fails listing the names.
absl::Status SetIsaCap(absl::string_view name);

// OK when SetIsaCap would accept `name`.
absl::Status ValidateIsaName(absl::string_view name);

// Whether this is an Intel processor: kernels tuned by vendor (a prefetch hint, which of two exact kernels runs)
// read it. Safe from static initializers (it initializes libgcc's CPU model first).
bool CpuIsIntel();

// Whether kernels may use AMX tiles where the CPU has them and the cap allows AVX-512 (knob cpu.amx; default true).
void SetAmxAllowed(bool allowed);
bool AmxAllowed();

}  // namespace bnb::core
