// A buffer of n values from a 64-byte boundary (AMX tile rows and vector loads: whole cache lines), not
// initialized: every user writes the values before it reads them.
#pragma once

#include <cstdint>
#include <memory>

namespace bnb::core {

template <class T>
class Aligned64 {
 public:
  explicit Aligned64(int64_t n) : values_(new T[n + 64 / sizeof(T)]) {}
  T* data() { return reinterpret_cast<T*>((reinterpret_cast<uintptr_t>(values_.get()) + 63) & ~uintptr_t{63}); }

 private:
  std::unique_ptr<T[]> values_;
};

}  // namespace bnb::core
