#include "bnb/core/bf16_codes.h"

namespace bnb::core {

std::shared_ptr<const Bf16Codes> Bf16Codes::Create(float boundary) {
  // Row d holds quotients below 2^(1 - d): the last row is the first that lies wholly below the boundary.
  constexpr int kMaxLastRow = 100;  // the quotients of the rows above it stay far inside the normal range
  int last = 0;
  while (!(std::ldexp(1.0f, 1 - last) <= boundary)) {
    if (++last > kMaxLastRow) return nullptr;
  }
  // A subnormal or zero x (exponent field 0) lands at row exponent(a), and its quotient lies below 2^(1 -
  // exponent(a)): the last row's range once exponent(a) >= last.
  return std::shared_ptr<const Bf16Codes>(new Bf16Codes(last + 1, std::max(last, 1)));
}

const uint8_t* Bf16Codes::BuildOnce(int mantissa, Fill fill) const {
  std::lock_guard<std::mutex> lock(mu_);
  const uint8_t* table = tables_[mantissa].load(std::memory_order_relaxed);
  if (table == nullptr) {
    table = Build(mantissa, fill);
    tables_[mantissa].store(table, std::memory_order_release);
  }
  return table;
}

// Every (sign, d, mantissa) for absmax 1.m * 2^0, laid out as Index lays them out: position 2 * (row * 128 + m) +
// sign, row = rows - 1 - d. Entries above the absmax (d = 0 with a larger mantissa) are never looked up; they hold
// the code of the absmax.
const uint8_t* Bf16Codes::Build(int mantissa, Fill fill) const {
  const int64_t entries = int64_t{2} * rows_ * 128;
  const float amax = 1.0f + static_cast<float>(mantissa) / 128.0f;
  std::vector<float> x(entries);
  for (int64_t j = 0; j < entries; ++j) {
    const int64_t r = j / 2;
    const int d = rows_ - 1 - static_cast<int>(r / 128), m = static_cast<int>(r % 128);
    // 1.m * 2^-d by its bits (d <= kMaxLastRow keeps it normal): a libm ldexp per entry made a table cost ~80 us,
    // 10 ms of an op's first call when its blocks' absmaxes take all 128 mantissas.
    const float magnitude = std::min(BF16ToFloat(static_cast<uint16_t>((127 - d) << 7 | m)), amax);
    x[j] = j % 2 == 0 ? magnitude : -magnitude;
  }
  // kPadding bytes past the last entry (zeroed, as make_unique zeroes all): gathers read a 32-bit word at each entry.
  auto table = std::make_unique<uint8_t[]>(entries + kPadding);
  fill(amax, x.data(), entries, table.get());
  storage_.push_back(std::move(table));
  return storage_.back().get();
}

}  // namespace bnb::core
