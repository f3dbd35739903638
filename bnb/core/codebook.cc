#include "bnb/core/codebook.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace bnb::core {
namespace {

// torch.linspace(start, end, steps, dtype=float32) on the CPU, element for element: a float step, and the
// second half counted back from `end` so that both ends are exact.
std::vector<float> LinspaceF32(float start, float end, int steps) {
  std::vector<float> out(steps);
  const float step = (end - start) / static_cast<float>(steps - 1);
  const int halfway = steps / 2;
  for (int i = 0; i < steps; ++i) {
    out[i] = i < halfway ? start + step * static_cast<float>(i)
                         : end - step * static_cast<float>(steps - i - 1);
  }
  return out;
}

// Appends scale * mean for each pair of neighbours, in float32 as bitsandbytes' tensor arithmetic does.
void AppendScaledMeans(std::vector<float>& data, int items, double scale, bool is_signed) {
  const std::vector<float> b = LinspaceF32(0.1f, 1.0f, items);
  const float s = static_cast<float>(scale);
  for (int sign = 0; sign < (is_signed ? 2 : 1); ++sign) {
    for (int i = 0; i + 1 < items; ++i) {
      const float mean = (b[i] + b[i + 1]) / 2.0f;
      data.push_back((sign ? -s : s) * mean);
    }
  }
}

}  // namespace

absl::StatusOr<std::vector<float>> CreateDynamicMap(bool is_signed, int max_exponent_bits, int total_bits) {
  if (total_bits < 2 || total_bits > 8) {
    return absl::InvalidArgumentError(absl::StrCat("create_dynamic_map: total_bits must be in 2..8, got ", total_bits));
  }
  const int non_sign_bits = total_bits - 1;
  if (max_exponent_bits < 1 || max_exponent_bits > non_sign_bits) {
    return absl::InvalidArgumentError(absl::StrCat("create_dynamic_map: max_exponent_bits must be in 1..",
                                                   non_sign_bits, " for total_bits=", total_bits, ", got ",
                                                   max_exponent_bits));
  }
  std::vector<float> data;
  const int additional_items = (1 << (non_sign_bits - max_exponent_bits)) - 1;
  for (int i = 0; i < max_exponent_bits; ++i) {
    const int fraction_items = is_signed ? (1 << (i + non_sign_bits - max_exponent_bits)) + 1
                                         : (1 << (i + non_sign_bits - max_exponent_bits + 1)) + 1;
    AppendScaledMeans(data, fraction_items, std::pow(10.0, -(max_exponent_bits - 1) + i), is_signed);
  }
  if (additional_items > 0) {
    AppendScaledMeans(data, additional_items + 1, std::pow(10.0, -(max_exponent_bits - 1) + max_exponent_bits - 1),
                      is_signed);
  }
  data.push_back(0.0f);
  data.push_back(1.0f);
  if (data.size() > kCodebookSize) {
    return absl::InvalidArgumentError(absl::StrCat("create_dynamic_map(signed=", is_signed, ", max_exponent_bits=",
                                                   max_exponent_bits, ", total_bits=", total_bits, ") has ",
                                                   data.size(), " values, more than 256"));
  }
  data.resize(kCodebookSize, 0.0f);
  std::sort(data.begin(), data.end());
  return data;
}

absl::StatusOr<PreparedCodebook> PrepareCodebook(const float* code, int64_t n) {
  if (n != kCodebookSize) {
    return absl::InvalidArgumentError(absl::StrCat("code must hold 256 float32 values, got ", n));
  }
  PreparedCodebook cb;
  for (int i = 0; i < kCodebookSize; ++i) {
    if (!std::isfinite(code[i])) {
      return absl::InvalidArgumentError(absl::StrCat("code[", i, "] is ", code[i], "; every entry must be finite"));
    }
    cb.values[i] = code[i];
  }
  std::iota(cb.sorted_to_code.begin(), cb.sorted_to_code.end(), 0);
  std::stable_sort(cb.sorted_to_code.begin(), cb.sorted_to_code.end(),
                   [&](int32_t a, int32_t b) { return cb.values[a] < cb.values[b]; });
  // Within a run of equal values every position maps to the run's first code, so ties pick the first code.
  for (int i = 1; i < kCodebookSize; ++i) {
    if (cb.values[cb.sorted_to_code[i]] == cb.values[cb.sorted_to_code[i - 1]]) {
      cb.sorted_to_code[i] = cb.sorted_to_code[i - 1];
    }
  }
  cb.is_sorted = true;
  for (int i = 0; i < kCodebookSize; ++i) cb.is_sorted &= cb.sorted_to_code[i] == i;
  for (int i = 0; i + 1 < kCodebookSize; ++i) {
    cb.midpoints[i] = (cb.values[cb.sorted_to_code[i]] + cb.values[cb.sorted_to_code[i + 1]]) * 0.5f;
  }
  return cb;
}

}  // namespace bnb::core
