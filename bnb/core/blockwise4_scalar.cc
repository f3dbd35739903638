// The 4-bit codebooks and the scalar definition of blockwise 4-bit quantization.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "absl/strings/str_cat.h"
#include "bnb/core/blockwise4.h"

namespace bnb::core {
namespace {

// bitsandbytes' get_4bit_type("nf4"): the values it lists are float32 values printed in full, so these literals
// are exact.
constexpr std::array<float, kCodebook4Size> kNF4 = {
    -1.0f,
    -0.6961928009986877f,
    -0.5250730514526367f,
    -0.39491748809814453f,
    -0.28444138169288635f,
    -0.18477343022823334f,
    -0.09105003625154495f,
    0.0f,
    0.07958029955625534f,
    0.16093020141124725f,
    0.24611230194568634f,
    0.33791524171829224f,
    0.44070982933044434f,
    0.5626170039176941f,
    0.7229568362236023f,
    1.0f,
};

// bitsandbytes' get_4bit_type("fp4") builds these values in float32 and divides them by their absolute maximum,
// 12, in float32; the divisions here round the same way.
constexpr std::array<float, kCodebook4Size> kFP4 = {
    0.0f / 12.0f,  0.0625f / 12.0f,  8.0f / 12.0f,  12.0f / 12.0f,  4.0f / 12.0f,  6.0f / 12.0f,
    2.0f / 12.0f,  3.0f / 12.0f,     -0.0f / 12.0f, -0.0625f / 12.0f, -8.0f / 12.0f, -12.0f / 12.0f,
    -4.0f / 12.0f, -6.0f / 12.0f,    -2.0f / 12.0f, -3.0f / 12.0f,
};

Codebook4 Prepare(const std::array<float, kCodebook4Size>& values) {
  Codebook4 cb;
  cb.values = values;
  std::array<int, kCodebook4Size> order;
  std::iota(order.begin(), order.end(), 0);
  // Stable: equal values keep code order, so the lowest code comes first.
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return values[a] < values[b]; });
  for (int i = 0; i + 1 < kCodebook4Size; ++i) {
    cb.midpoints[i] = SplitPoint(values[order[i]], values[order[i + 1]]);
  }
  for (int i = 0; i < kCodebook4Size; ++i) {
    int code = 0;
    while (!(values[code] == values[order[i]])) ++code;  // == : +0 and -0 are one value
    cb.sorted_to_code[i] = static_cast<uint8_t>(code);
  }
  cb.bf16_codes = Bf16Codes::Create(
      Bf16Codes::SmallestCodeBoundary(cb.midpoints.data(), cb.sorted_to_code.data(), kCodebook4Size));
  return cb;
}

}  // namespace

absl::StatusOr<Quant4> ParseQuant4(absl::string_view name) {
  if (name == "nf4") return Quant4::kNF4;
  if (name == "fp4") return Quant4::kFP4;
  return absl::InvalidArgumentError(
      absl::StrCat("quant_type must be 'nf4' or 'fp4', got '", std::string(name), "'"));
}

absl::string_view Quant4Name(Quant4 q) { return q == Quant4::kNF4 ? "nf4" : "fp4"; }

const std::array<float, kCodebook4Size>& Code4(Quant4 q) { return q == Quant4::kNF4 ? kNF4 : kFP4; }

const Codebook4& GetCodebook4(Quant4 q) {
  static const Codebook4 nf4 = Prepare(kNF4);
  static const Codebook4 fp4 = Prepare(kFP4);
  return q == Quant4::kNF4 ? nf4 : fp4;
}

void QuantizeBlockwise4Scalar(DType dtype, const void* x, Quant4 q, const Blockwise4Range& r, uint8_t* packed,
                              float* absmax) {
  const Codebook4& cb = GetCodebook4(q);
  for (int64_t b = r.block_begin; b < r.block_end; ++b) {
    const int64_t lo = b * r.blocksize;
    const int64_t hi = std::min(lo + r.blocksize, r.n);
    const float amax = BlockAbsmaxScalar(dtype, x, lo, hi);
    absmax[b] = amax;
    for (int64_t i = lo; i < hi; ++i) {
      const uint8_t code = NearestCode4(cb, ScaleToUnit(LoadAsFloat(dtype, x, i), amax));
      // lo is even, so an element with an even index starts its byte; PadOddEnd4 fills an odd n's last nibble.
      if ((i & 1) == 0) {
        packed[i >> 1] = static_cast<uint8_t>(code << 4);
      } else {
        packed[i >> 1] = static_cast<uint8_t>(packed[i >> 1] | code);
      }
    }
  }
  PadOddEnd4(q, r, packed);
}

void DequantizeBlockwise4Scalar(DType dtype, const uint8_t* packed, const float* absmax, const float* code16,
                                const Blockwise4Range& r, void* out) {
  for (int64_t b = r.block_begin; b < r.block_end; ++b) {
    const int64_t lo = b * r.blocksize;
    const int64_t hi = std::min(lo + r.blocksize, r.n);
    for (int64_t i = lo; i < hi; ++i) StoreFromFloat(dtype, out, i, code16[PackedCode4(packed, i)] * absmax[b]);
  }
}

}  // namespace bnb::core
