// Warnings bnb gives instead of failing (a config file it refuses, a broken cache setting, a cache it cannot use):
// each topic once.
#pragma once

#include <functional>
#include <mutex>
#include <set>
#include <string>

namespace bnb::core {

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

// Once per topic per process (e.g. a refused config file, named by its absolute path).
bool WarnOnce(const std::string& topic, const std::string& message);

// Sends the process-wide warnings (WarnOnce) to `sink` (null: stderr again), for tests; returns the previous sink.
WarningSink SetProcessWarningSink(WarningSink sink);

}  // namespace bnb::core
