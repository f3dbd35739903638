// Warnings bnb/jit gives instead of failing (a cache it cannot use, a corrupt cache file): each topic once.
#pragma once

#include <functional>
#include <mutex>
#include <set>
#include <string>

namespace bnb::jit {

// Receives one finished message. The default prints "bnb: warning: <message>" to stderr.
using WarningSink = std::function<void(const std::string& message)>;

// Reports a message the first time its topic is seen by this object; later ones with the same topic are dropped.
class OnceWarner {
 public:
  explicit OnceWarner(WarningSink sink = nullptr);
  // Returns true when the message was reported.
  bool Warn(const std::string& topic, const std::string& message);

 private:
  std::mutex mu_;
  std::set<std::string> seen_;
  WarningSink sink_;
};

void WarnToStderr(const std::string& message);

}  // namespace bnb::jit
