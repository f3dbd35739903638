#include "bnb/jit/kernel_spec.h"

#include <string_view>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace bnb::jit {

const char kBnbVersion[] = BNB_VERSION;  // set by bnb/jit/BUILD.bazel from //:version.bzl

namespace {

// Targets name devices across runtimes ("sm_90", "gfx90a:xnack-"); nothing that could end a key field or an option.
bool IsTargetName(const std::string& s) {
  if (s.empty()) return false;
  constexpr std::string_view kPunctuation = "_:+-.";
  for (char c : s) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && kPunctuation.find(c) == kPunctuation.npos) return false;
  }
  return true;
}

bool IsIdentifier(const std::string& s) {
  if (s.empty() || absl::ascii_isdigit(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

}  // namespace

std::string KernelSpec::NameExpression() const {
  if (template_args.empty()) return entry;
  std::vector<std::string> values;
  for (const auto& [name, value] : template_args) values.push_back(value);
  return absl::StrCat(entry, "<", absl::StrJoin(values, ", "), ">");
}

std::string KernelSpec::DebugString() const {
  std::vector<std::string> args, ks;
  for (const auto& [name, value] : template_args) args.push_back(absl::StrCat(name, "=", value));
  for (const auto& [name, value] : knobs) ks.push_back(absl::StrCat(name, "=", value));
  return absl::StrCat(template_name, ":", entry, "<", absl::StrJoin(args, ", "), "> ", arch, " knobs{",
                      absl::StrJoin(ks, ", "), "}");
}

absl::Status ValidateSpec(const KernelSpec& spec) {
  const auto bad = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("kernel spec ", spec.DebugString(), ": ", what));
  };
  if (!IsIdentifier(spec.template_name)) return bad("template_name must be a file stem like \"blockwise8\"");
  if (!IsIdentifier(spec.entry)) return bad("entry must be a C++ identifier");
  if (!IsTargetName(spec.arch)) {
    return bad(absl::StrCat("arch \"", spec.arch, "\" is not a device target name (letters, digits, _:+-.)"));
  }
  for (const auto& [name, value] : spec.template_args) {
    if (!IsIdentifier(name)) return bad(absl::StrCat("template argument name \"", name, "\" is not an identifier"));
    if (value.empty() || value.find('\0') != std::string::npos) {
      return bad(absl::StrCat("template argument ", name, " has an empty or NUL-holding value"));
    }
  }
  for (const auto& [name, value] : spec.knobs) {
    if (!IsIdentifier(name)) return bad(absl::StrCat("knob name \"", name, "\" is not an identifier"));
    if (value.find('\0') != std::string::npos || value.find(' ') != std::string::npos) {
      return bad(absl::StrCat("knob ", name, " value must hold no spaces or NUL bytes"));
    }
  }
  return absl::OkStatus();
}

}  // namespace bnb::jit
