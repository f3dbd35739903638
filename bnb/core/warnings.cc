#include "bnb/core/warnings.h"

#include <cstdio>

namespace bnb::core {
namespace {

std::mutex process_sink_mu;
WarningSink& ProcessSink() {
  static WarningSink* const sink = new WarningSink;  // never destroyed: warnings may come during process exit
  return *sink;
}

}  // namespace

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

bool WarnOnce(const std::string& topic, const std::string& message) {
  // Routed through ProcessSink at each message, so a test's sink applies to topics seen before it was set.
  static OnceWarner* const warner = new OnceWarner([](const std::string& m) {
    WarningSink sink;
    {
      std::lock_guard<std::mutex> lock(process_sink_mu);
      sink = ProcessSink();
    }
    sink ? sink(m) : WarnToStderr(m);
  });
  return warner->Warn(topic, message);
}

WarningSink SetProcessWarningSink(WarningSink sink) {
  std::lock_guard<std::mutex> lock(process_sink_mu);
  WarningSink previous = std::move(ProcessSink());
  ProcessSink() = std::move(sink);
  return previous;
}

}  // namespace bnb::core
