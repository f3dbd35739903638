// Every tuning knob bnb has, declared once: name, type, default, allowed values, one-line doc, and whether it
// names code to load. A knob that shapes kernel code does so through the kernel's spec (bnb/jit: a template
// argument, as cuda.threads_per_block is, or a spec knob), and every spec field is part of the kernel's cache key,
// so no flag here has to say which knobs do.
#pragma once

#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"
#include <variant>
#include <vector>

#include "absl/status/status.h"

namespace bnb::core {

enum class KnobType { kInt, kBool, kString };

using KnobValue = std::variant<int64_t, bool, std::string>;

struct KnobSpec {
  absl::string_view name;  // "section.key"; TOML [section] key, env BNB_SECTION_KEY
  KnobType type;
  KnobValue default_value;
  int64_t min = 0;  // kInt: inclusive range
  int64_t max = 0;
  absl::string_view doc;
  // Extra check for values of the right type and range (e.g. a known instruction set); may be null.
  absl::Status (*validate)(const KnobValue&) = nullptr;
  // The value names code bnb loads (a library to dlopen): it must be an absolute path, and a project's ./bnb.toml
  // may not set it (whoever can write the working directory would choose what runs); see config.h.
  bool loads_code = false;
};

const std::vector<KnobSpec>& AllKnobs();

// What cuda.threads_per_block = 0 stands for: the threads per block the blockwise CUDA kernels launch with unless
// the knob says otherwise. bnb::jit::ThreadsPerBlock resolves the knob with it; the knob's doc quotes it.
inline constexpr int kCudaThreadsPerBlockDefault = 256;

// cuda.optim8_per_thread's default: the elements of a state block each thread of the CUDA 8-bit optimizer update
// takes (kernels/optim.cuh); 8 (a warp a block, no barrier) was the fastest on an H200 (tools/bench/gpu_optim.py).
inline constexpr int kCudaOptim8PerThreadDefault = 8;
// Its allowed values (the kernel's PER): 1, 2, 4 or 8.
inline constexpr bool IsOptim8PerThread(int64_t k) { return k == 1 || k == 2 || k == 4 || k == 8; }

// Whether a broken setting of the knob (a bad value in a file or the environment) fails what reads it: the cpu
// knobs', as CPU work must not run otherwise than configured. Every other knob serves the kernel cache or CUDA,
// which CPU work never uses: a broken one gives a warning and its default instead, so it cannot stop CPU work.
bool BrokenSettingFails(const KnobSpec& spec);

// nullptr when no knob has that name.
const KnobSpec* FindKnob(absl::string_view name);

// The environment variable that sets a knob: "cpu.isa" -> "BNB_CPU_ISA".
std::string KnobEnvName(absl::string_view name);

absl::string_view KnobTypeName(KnobType t);
std::string KnobValueToString(const KnobValue& v);

// Checks type, range and the knob's own rule; the message names the knob, the value and what was expected.
absl::Status ValidateKnob(const KnobSpec& spec, const KnobValue& v);

// Parses text (an environment variable's value) as the knob's type, then validates it.
absl::Status ParseKnob(const KnobSpec& spec, absl::string_view text, KnobValue* out);

}  // namespace bnb::core
