#include "bnb/jit/warnings.h"

#include <cstdio>

namespace bnb::jit {

void WarnToStderr(const std::string& message) { std::fprintf(stderr, "bnb: warning: %s\n", message.c_str()); }

OnceWarner::OnceWarner(WarningSink sink) : sink_(sink ? std::move(sink) : WarningSink(WarnToStderr)) {}

bool OnceWarner::Warn(const std::string& topic, const std::string& message) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!seen_.insert(topic).second) return false;
  }
  sink_(message);
  return true;
}

}  // namespace bnb::jit
