// What to compile: a kernel template, its template arguments, the target architecture and the knobs that shape
// the generated code; and what compiling it gives (Binary).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace bnb::jit {

// Bumped whenever the meaning of a key field or of a cache file's layout changes.
inline constexpr uint32_t kCacheFormatVersion = 1;
// bnb's version; part of every key, so a new release never loads an old release's kernels.
extern const char kBnbVersion[];  // //:version.bzl's BNB_VERSION

struct KernelSpec {
  // Template file under bnb/jit/kernels without ".cuh", e.g. "blockwise8".
  std::string template_name;
  // The __global__ function template in it, e.g. "quantize_blockwise8".
  std::string entry;
  // Template arguments in declaration order: name (documentation and key) = value (C++ text placed in the
  // template argument list), e.g. {{"T", "bnb::bf16"}, {"BLOCKSIZE", "256"}, {"THREADS", "256"}}.
  std::vector<std::pair<std::string, std::string>> template_args;
  // The device target, as the GPU runtime names it and its compiler checks (Compiler::CheckTarget): "sm_90" for
  // CUDA; a ROCm runtime's would read "gfx942". Opaque to everything else.
  std::string arch;
  // Knobs that shape the generated code but are not template arguments; each becomes -DBNB_KNOB_<NAME>=<value>.
  // Names are C identifiers. Order does not matter (they are sorted into the options).
  std::vector<std::pair<std::string, std::string>> knobs;

  // The kernel as a C++ name expression: entry<v1, v2, ...> (just `entry` without template arguments).
  std::string NameExpression() const;
  // One line naming every field, for error messages: "blockwise8:quantize_blockwise8<T=float, ...> sm_90 {...}".
  std::string DebugString() const;
};

// Checks the fields are well formed (identifier names, a non-empty arch of letters, digits and _:+-. only,
// identifier knob names, no NUL bytes). Whether the arch names a real target is the compiler's to say.
absl::Status ValidateSpec(const KernelSpec& spec);

enum class BinaryKind : uint8_t { kCubin = 1, kPtx = 2 };

// A compiled kernel: a CUBIN for the spec's arch, or PTX the driver JIT-compiles when loading.
struct Binary {
  BinaryKind kind = BinaryKind::kCubin;
  std::string lowered_name;  // the symbol to look up in the module (NVRTC's lowered name of NameExpression())
  std::string image;         // CUBIN bytes, or PTX text with its terminating NUL
};

}  // namespace bnb::jit
