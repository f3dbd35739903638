// The process-wide warnings (bnb::core::WarnOnce) sent to a test instead of stderr while an object of this class
// lives: the config and kernel-cache tests check which refusals were warned of.
#pragma once

#include <mutex>
#include <string>
#include <vector>

#include "bnb/core/warnings.h"

namespace bnb::tests {

class CapturedWarnings {
 public:
  CapturedWarnings() {
    previous_ = core::SetProcessWarningSink([this](const std::string& m) {
      std::lock_guard<std::mutex> lock(mu_);
      warnings_.push_back(m);
    });
  }
  ~CapturedWarnings() { core::SetProcessWarningSink(previous_); }
  CapturedWarnings(const CapturedWarnings&) = delete;
  CapturedWarnings& operator=(const CapturedWarnings&) = delete;

  // How many warnings hold `fragment`.
  int Count(const std::string& fragment) {
    std::lock_guard<std::mutex> lock(mu_);
    int n = 0;
    for (const std::string& w : warnings_) n += w.find(fragment) != std::string::npos;
    return n;
  }

  // Every warning, one a line (for failure messages).
  std::string All() {
    std::lock_guard<std::mutex> lock(mu_);
    std::string all;
    for (const std::string& w : warnings_) all += w + "\n";
    return all;
  }

 private:
  core::WarningSink previous_;
  std::mutex mu_;
  std::vector<std::string> warnings_;
};

}  // namespace bnb::tests
