#include "bnb/tests/device/kernels/calls.h"

#include <torch/library.h>

#include <map>
#include <mutex>
#include <string>

namespace bnbdev_kernels {
namespace {

std::mutex mu;
std::map<std::string, int64_t> calls;

int64_t Calls(c10::string_view op) {
  std::lock_guard<std::mutex> lock(mu);
  auto it = calls.find(std::string(op));
  return it == calls.end() ? 0 : it->second;
}

}  // namespace

void CountCall(const char* op) {
  std::lock_guard<std::mutex> lock(mu);
  ++calls[op];
}

TORCH_LIBRARY(bnbdev_kernels, m) {
  m.def("calls(str op) -> int", &Calls);  // op as bnb names it: "gemv_4bit", "dequantize_4bit.out", ...
}

}  // namespace bnbdev_kernels
