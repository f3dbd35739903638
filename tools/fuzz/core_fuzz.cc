#include "tools/fuzz/core_fuzz.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "bnb/core/blockwise4.h"
#include "bnb/core/blockwise8.h"
#include "bnb/core/codebook.h"
#include "bnb/core/cpu_isa.h"
#include "bnb/core/dtype.h"

namespace bnb::fuzz {
namespace {

using namespace bnb::core;
using Rng = std::mt19937_64;

int64_t Uniform(Rng& rng, int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); }
double UniformReal(Rng& rng, double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng); }

// Values as real data and adversarial data come: normal at a random scale, log-uniform magnitudes, a few repeated
// values (ties at the absmax), zero runs, and now and then NaN, infinities, subnormals and the largest finite.
std::vector<float> RandomValues(Rng& rng, int64_t n) {
  std::vector<float> v(n);
  const int kind = static_cast<int>(Uniform(rng, 0, 4));
  const double scale = std::ldexp(1.0, static_cast<int>(Uniform(rng, -60, 60)));
  std::normal_distribution<double> normal(0.0, 1.0);
  for (auto& x : v) {
    switch (kind) {
      case 0: x = static_cast<float>(normal(rng) * scale); break;
      case 1: x = static_cast<float>((Uniform(rng, 0, 1) ? 1 : -1) * std::exp2(UniformReal(rng, -40, 0)) * scale);
        break;
      case 2: x = static_cast<float>(static_cast<double>(Uniform(rng, -8, 8)) * scale / 8); break;
      case 3: x = static_cast<float>(UniformReal(rng, -1, 1) * scale); break;
      default: x = static_cast<float>(normal(rng)); break;
    }
  }
  const int64_t specials = Uniform(rng, 0, 3) == 0 ? Uniform(rng, 1, 6) : 0;
  for (int64_t k = 0; k < specials && n > 0; ++k) {
    const float pick[] = {NAN, INFINITY, -INFINITY, std::ldexp(1.0f, -140), -std::ldexp(1.0f, -149), 3.4e38f, 0.0f};
    v[Uniform(rng, 0, n - 1)] = pick[Uniform(rng, 0, 6)];
  }
  if (n > 64 && Uniform(rng, 0, 4) == 0) {  // a zero run
    const int64_t at = Uniform(rng, 0, n - 64);
    std::fill(v.begin() + at, v.begin() + at + Uniform(rng, 1, 64), 0.0f);
  }
  return v;
}

// A codebook: the dynamic map (signed or not), random sorted values, or random values in any order with repeats.
std::vector<float> RandomCodebook(Rng& rng, std::string* name) {
  const int kind = static_cast<int>(Uniform(rng, 0, 3));
  if (kind <= 1) {
    *name = kind == 0 ? "dynamic signed" : "dynamic unsigned";
    return kind == 0 ? DefaultDynamicMap() : *CreateDynamicMap(false);
  }
  std::vector<float> c(256);
  for (auto& x : c) x = static_cast<float>(UniformReal(rng, -1, 1));
  c[Uniform(rng, 0, 255)] = 1.0f;
  c[Uniform(rng, 0, 255)] = -1.0f;
  c[Uniform(rng, 0, 255)] = 0.0f;
  if (kind == 2) {
    std::sort(c.begin(), c.end());
    *name = "random sorted";
  } else {
    for (int k = 0; k < 20; ++k) c[Uniform(rng, 0, 255)] = c[Uniform(rng, 0, 255)];
    *name = "random unsorted with repeats";
  }
  return c;
}

// The first n elements of a and b, of `dtype`, equal bit for bit (any NaN equals any NaN); else *at = the first that
// differs.
bool SameBits(DType dtype, const uint8_t* a, const uint8_t* b, int64_t n, int64_t* at) {
  for (int64_t i = 0; i < n; ++i) {
    const float x = LoadAsFloat(dtype, a, i), y = LoadAsFloat(dtype, b, i);
    if (std::isnan(x) && std::isnan(y)) continue;
    if (FloatToBits(x) != FloatToBits(y)) {
      *at = i;
      return false;
    }
  }
  return true;
}

// The absmax lists a and b equal bit for bit (any NaN equals any NaN); else *at = the first block that differs.
bool SameFloats(const std::vector<float>& a, const std::vector<float>& b, int64_t* at) {
  for (size_t i = 0; i < a.size(); ++i) {
    if (!(std::isnan(a[i]) && std::isnan(b[i])) && FloatToBits(a[i]) != FloatToBits(b[i])) {
      *at = static_cast<int64_t>(i);
      return false;
    }
  }
  return true;
}

// Now and then an absmax of NaN or inf for the dequantize kernels (a quantize gives them only where the input held
// one).
void AddSpecialAbsmax(Rng& rng, std::vector<float>& absmax) {
  if (Uniform(rng, 0, 3) != 0) return;
  absmax[Uniform(rng, 0, static_cast<int64_t>(absmax.size()) - 1)] = Uniform(rng, 0, 1) ? NAN : INFINITY;
}

// Blocks [0, blocks) cut into 1 to 4 ranges at random points, as threads take them.
std::vector<std::pair<int64_t, int64_t>> RandomRanges(Rng& rng, int64_t blocks) {
  std::vector<int64_t> cuts = {0, blocks};
  for (int64_t k = Uniform(rng, 0, 3); k > 0; --k) cuts.push_back(Uniform(rng, 0, blocks));
  std::sort(cuts.begin(), cuts.end());
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (size_t k = 0; k + 1 < cuts.size(); ++k) ranges.emplace_back(cuts[k], cuts[k + 1]);
  return ranges;
}

// Storage whose start sits `offset` bytes past a 64-byte boundary.
struct Buffer {
  std::vector<uint8_t> raw;
  uint8_t* data;
  Buffer(size_t bytes, size_t offset) : raw(bytes + 128) {
    data = raw.data() + (64 - reinterpret_cast<uintptr_t>(raw.data()) % 64) % 64 + offset;
  }
};

// One bit width's kernels over a block range (the dispatched ones and their scalar definitions), for Check.
struct Kernels {
  const char* name;     // "8-bit", "4-bit"
  int64_t bytes;        // of the quantized data
  std::function<void(const Blockwise8Range&, uint8_t* codes, float* absmax)> quantize, quantize_scalar;
  std::function<void(const Blockwise8Range&, const uint8_t* codes, const float* absmax, void* out)> dequantize,
      dequantize_scalar;
};

// The kernels run over `ranges` in turn (as threads take them) against their scalar definitions over the whole:
// absmax and codes, then the outputs of dequantizing those codes (with, now and then, a NaN or inf absmax).
// Empty, or what differed and where.
std::string Check(Rng& rng, const Kernels& k, DType dtype, int64_t n, int64_t bs,
                  const std::vector<std::pair<int64_t, int64_t>>& ranges, size_t out_offset) {
  const int64_t blocks = NumBlocks(n, bs);
  const auto where = [&](const char* what, int64_t at) { return absl::StrFormat("%s %s, at %d", k.name, what, at); };
  int64_t at = 0;
  Buffer codes(k.bytes, out_offset), codes_scalar(k.bytes, 0);
  std::vector<float> absmax(blocks), absmax_scalar(blocks);
  for (const auto& [b0, b1] : ranges) k.quantize({n, bs, b0, b1}, codes.data, absmax.data());
  k.quantize_scalar({n, bs, 0, blocks}, codes_scalar.data, absmax_scalar.data());
  if (!SameFloats(absmax, absmax_scalar, &at)) return where("quantize absmax", at);
  if (std::memcmp(codes.data, codes_scalar.data, k.bytes) != 0) {
    while (codes.data[at] == codes_scalar.data[at]) ++at;
    return where("quantize codes (byte)", at);
  }
  AddSpecialAbsmax(rng, absmax);
  Buffer out(n * DTypeSize(dtype), out_offset), out_scalar(n * DTypeSize(dtype), 0);
  for (const auto& [b0, b1] : ranges) k.dequantize({n, bs, b0, b1}, codes.data, absmax.data(), out.data);
  k.dequantize_scalar({n, bs, 0, blocks}, codes.data, absmax.data(), out_scalar.data);
  if (!SameBits(dtype, out.data, out_scalar.data, n, &at)) return where("dequantize", at);
  return "";
}

std::string RunCase(uint64_t seed, bool large) {
  Rng rng(seed);
  static const std::vector<std::string> isas = AvailableIsas();
  const std::string isa = isas[Uniform(rng, 0, static_cast<int64_t>(isas.size()) - 1)];
  if (absl::Status s = SetIsaCap(isa); !s.ok()) return std::string(s.message());
  const DType dtypes[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};
  const DType dtype = dtypes[Uniform(rng, 0, 2)];
  const int64_t bs = int64_t{32} << Uniform(rng, 0, 7);
  // Mostly small, sometimes past the streaming threshold (stream_stores.h; that takes long: rarely).
  const bool huge = Uniform(rng, 0, 200) == 0;  // drawn whether or not `large` allows it: seeds mean the same
  const int64_t n = huge && large ? Uniform(rng, (64 << 20) / 3, 40 << 20)
                                  : Uniform(rng, 1, Uniform(rng, 0, 1) ? 5000 : 300000);
  const std::vector<float> values = RandomValues(rng, n);
  Buffer x(n * DTypeSize(dtype), Uniform(rng, 0, 3) == 0 ? 2 * Uniform(rng, 0, 31) : 0);
  for (int64_t i = 0; i < n; ++i) StoreFromFloat(dtype, x.data, i, values[i]);
  const auto ranges = RandomRanges(rng, NumBlocks(n, bs));
  const size_t out_offset = Uniform(rng, 0, 3) == 0 ? Uniform(rng, 1, 63) : 0;

  std::string codebook, mismatch;
  if (Uniform(rng, 0, 2) != 0) {
    const std::vector<float> code = RandomCodebook(rng, &codebook);
    const auto cb = PrepareCodebook(code.data(), 256);
    if (!cb.ok()) return absl::StrFormat("seed %d: %s codebook: %s", seed, codebook, cb.status().ToString());
    const Kernels k{
        "8-bit", n,
        [&](const Blockwise8Range& r, uint8_t* c, float* a) { QuantizeBlockwise8(dtype, x.data, *cb, r, c, a); },
        [&](const Blockwise8Range& r, uint8_t* c, float* a) { QuantizeBlockwise8Scalar(dtype, x.data, *cb, r, c, a); },
        [&](const Blockwise8Range& r, const uint8_t* c, const float* a, void* o) {
          DequantizeBlockwise8(dtype, c, a, *cb, r, o);
        },
        [&](const Blockwise8Range& r, const uint8_t* c, const float* a, void* o) {
          DequantizeBlockwise8Scalar(dtype, c, a, cb->values.data(), r, o);
        }};
    mismatch = Check(rng, k, dtype, n, bs, ranges, out_offset);
  } else {
    const Quant4 q = Uniform(rng, 0, 1) ? Quant4::kNF4 : Quant4::kFP4;
    codebook = std::string(Quant4Name(q));
    const Kernels k{
        "4-bit", PackedSize4(n),
        [&](const Blockwise8Range& r, uint8_t* p, float* a) { QuantizeBlockwise4(dtype, x.data, q, r, p, a); },
        [&](const Blockwise8Range& r, uint8_t* p, float* a) { QuantizeBlockwise4Scalar(dtype, x.data, q, r, p, a); },
        [&](const Blockwise8Range& r, const uint8_t* p, const float* a, void* o) {
          DequantizeBlockwise4(dtype, p, a, Code4(q).data(), r, o);
        },
        [&](const Blockwise8Range& r, const uint8_t* p, const float* a, void* o) {
          DequantizeBlockwise4Scalar(dtype, p, a, Code4(q).data(), r, o);
        }};
    mismatch = Check(rng, k, dtype, n, bs, ranges, out_offset);
  }
  if (mismatch.empty()) return "";
  return absl::StrFormat("seed %d: %s, isa %s, %s, %s, blocksize %d, n %d, %d ranges, out offset %d", seed, mismatch,
                         isa, DTypeName(dtype), codebook, bs, n, ranges.size(), out_offset);
}

}  // namespace

std::string RunCoreCase(uint64_t seed, bool large) {
  std::string mismatch = RunCase(seed, large);
  (void)SetIsaCap("best");
  return mismatch;
}

CoreFuzzResult RunCoreFuzz(uint64_t first_seed, int64_t max_cases, double max_seconds, bool large) {
  const auto start = std::chrono::steady_clock::now();
  CoreFuzzResult result;
  while (result.cases < max_cases &&
         std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < max_seconds) {
    result.mismatch = RunCoreCase(first_seed + static_cast<uint64_t>(result.cases), large);
    ++result.cases;
    if (!result.mismatch.empty()) break;
  }
  return result;
}

}  // namespace bnb::fuzz

