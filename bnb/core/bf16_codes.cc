#include "bnb/core/bf16_codes.h"

#include <cmath>

#include "bnb/core/blockwise8.h"
#include "bnb/core/codebook.h"

namespace bnb::core {

std::shared_ptr<const Bf16Codes> Bf16Codes::Create(const PreparedCodebook& cb) {
  float smallest = INFINITY;  // midpoint magnitude
  for (float m : cb.midpoints) smallest = std::min(smallest, std::fabs(m));
  // Row d holds quotients below 2^(1 - d): the last row is the first that lies wholly below `smallest`.
  constexpr int kMaxLastRow = 100;  // quotients of the rows above stay far inside the normal range
  int last = 0;
  while (std::ldexp(1.0f, 1 - last) > smallest) {
    if (++last > kMaxLastRow) return nullptr;
  }
  // A subnormal or zero x (exponent field 0) lands at row exponent(a) >= last, and its quotient lies below
  // 2^(1 - exponent(a)): in the last row's range.
  return std::shared_ptr<const Bf16Codes>(new Bf16Codes(last + 1, std::max(last, 1)));
}

const uint8_t* Bf16Codes::Table(const PreparedCodebook& cb, uint16_t amax_bits) const {
  if ((amax_bits >> 7) < min_exponent_) return nullptr;
  const int mantissa = amax_bits & 0x7F;
  const uint8_t* table = tables_[mantissa].load(std::memory_order_acquire);
  if (table != nullptr) return table;
  std::lock_guard<std::mutex> lock(mu_);
  table = tables_[mantissa].load(std::memory_order_relaxed);
  if (table == nullptr) {
    table = Build(cb, mantissa);
    tables_[mantissa].store(table, std::memory_order_release);
  }
  return table;
}

// Codes of every (sign, d, mantissa) for absmax 1.m * 2^0, by the float32 kernel: entries sit in blocks of 4096
// whose first element is the absmax itself, so every block's absmax is exactly it. Entries above the absmax
// (d = 0 with a larger mantissa) are never looked up and quantize 0 instead.
const uint8_t* Bf16Codes::Build(const PreparedCodebook& cb, int mantissa) const {
  constexpr int64_t kBlock = 4096;
  const int64_t entries = int64_t{2} * rows_ * 128;
  const int64_t blocks = (entries + kBlock - 2) / (kBlock - 1);
  const float amax = 1.0f + static_cast<float>(mantissa) / 128.0f;
  std::vector<float> x(blocks * kBlock, 0.0f);
  for (int64_t j = 0; j < entries; ++j) {
    const int64_t r = j % (rows_ * 128);
    const int d = static_cast<int>(r / 128), m = 127 - static_cast<int>(r % 128);
    const float magnitude = std::ldexp(1.0f + static_cast<float>(m) / 128.0f, -d);
    const float v = j < rows_ * 128 ? magnitude : -magnitude;
    x[(j / (kBlock - 1)) * kBlock + 1 + j % (kBlock - 1)] = magnitude <= amax ? v : 0.0f;
  }
  for (int64_t b = 0; b < blocks; ++b) x[b * kBlock] = amax;
  std::vector<uint8_t> codes(x.size());
  std::vector<float> absmax(blocks);
  QuantizeBlockwise8(DType::kFloat32, x.data(), cb, Blockwise8Range{blocks * kBlock, kBlock, 0, blocks},
                     codes.data(), absmax.data());
  auto table = std::make_unique<uint8_t[]>(entries);
  for (int64_t j = 0; j < entries; ++j) table[j] = codes[(j / (kBlock - 1)) * kBlock + 1 + j % (kBlock - 1)];
  storage_.push_back(std::move(table));
  return storage_.back().get();
}

}  // namespace bnb::core
