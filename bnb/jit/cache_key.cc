#include "bnb/jit/cache_key.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "bnb/jit/sha256.h"

namespace bnb::jit {

std::string CacheKey(const KernelSpec& spec, absl::string_view template_text, const std::vector<SourceFile>& headers,
                     absl::string_view compiler_version, const std::vector<std::string>& options) {
  Sha256 h;
  const auto field = [&h](absl::string_view s) {
    h.Update(s);
    h.Update("\0", 1);
  };
  field(absl::StrCat("bnb-jit-format=", kCacheFormatVersion));
  field(kBnbVersion);
  field(spec.template_name);
  field(template_text);
  std::vector<const SourceFile*> sorted;
  for (const SourceFile& f : headers) sorted.push_back(&f);
  std::sort(sorted.begin(), sorted.end(), [](const SourceFile* a, const SourceFile* b) { return a->name < b->name; });
  field(absl::StrCat(sorted.size()));
  for (const SourceFile* f : sorted) {
    field(f->name);
    field(f->text);
  }
  field(spec.entry);
  field(absl::StrCat(spec.template_args.size()));
  for (const auto& [name, value] : spec.template_args) {
    field(name);
    field(value);
  }
  field(spec.arch);
  std::vector<std::string> knobs;
  for (const auto& [name, value] : spec.knobs) knobs.push_back(absl::StrCat(name, "=", value));
  std::sort(knobs.begin(), knobs.end());
  field(absl::StrCat(knobs.size()));
  for (const std::string& k : knobs) field(k);
  field(compiler_version);
  std::vector<std::string> opts = options;
  std::sort(opts.begin(), opts.end());
  field(absl::StrCat(opts.size()));
  for (const std::string& o : opts) field(o);
  return h.HexDigest();
}

}  // namespace bnb::jit
