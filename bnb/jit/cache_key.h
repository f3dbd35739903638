// The cache key of a kernel: 64 hex digits of SHA-256 over NUL-separated fields, in this order:
//   cache format version, bnb version, template name, template text, the header count and each header's
//   name and text (sorted by name), entry, the template-argument count and each name and value (in order),
//   arch, the knob count and each name=value (sorted), the compiler's version, the option count and each option
//   (sorted). Counts keep the field list unambiguous; no field may hold a NUL byte.
// Any change to any of these gives another key, so a stale kernel is never loaded.
#pragma once

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "bnb/jit/compiler.h"
#include "bnb/jit/kernel_spec.h"

namespace bnb::jit {

std::string CacheKey(const KernelSpec& spec, absl::string_view template_text, const std::vector<SourceFile>& headers,
                     absl::string_view compiler_version, const std::vector<std::string>& options);

}  // namespace bnb::jit
