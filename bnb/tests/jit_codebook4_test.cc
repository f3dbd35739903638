// The numerics the 4-bit CUDA kernels run (bnb/jit/kernels/codebook4.cuh, compiled here as host C++: the same
// text, so nothing can drift) against bnb/core's definition: the code tables equal bnb::core::GetCodebook4 bit for
// bit; the bucket table gives NearestCode4's code for every scaled value; ScaleFast is x / a correctly rounded
// wherever its result matters; and the kernel's per-element choice between the two divisions reproduces
// QuantizeBlockwise4Scalar. No GPU needed; the check of NVRTC's own evaluation of the tables skips without NVRTC.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bnb/core/blockwise4.h"
#include "bnb/core/blockwise8.h"
#include "bnb/core/dtype.h"
#include "bnb/jit/codebook4_host.h"
#include "bnb/jit/cuda/nvrtc.h"
#include "bnb/jit/cuda/nvrtc_compiler.h"
#include "bnb/jit/kernel_sources.h"
#include "bnb/tests/special_values.h"
#include "bnb/tests/test_nvrtc.h"
#include "gtest/gtest.h"

namespace bnb::cb4 {
namespace {

using core::Quant4;

// Evaluated by the compiler, as NVRTC evaluates it in the kernels.
constexpr Codebook4Tables kNF4Tables = MakeCodebook4Tables(kNF4);
constexpr Codebook4Tables kFP4Tables = MakeCodebook4Tables(kFP4);
static_assert(kNF4Tables.value[0] == -1.0f && kNF4Tables.value[15] == 1.0f, "NF4 ends");
static_assert(kFP4Tables.s2c[7] == 0 && kFP4Tables.s2c[8] == 0, "FP4: +0 and -0 both map to code 0");

const Codebook4Tables& TablesFor(Quant4 q) { return q == Quant4::kNF4 ? kNF4Tables : kFP4Tables; }

uint32_t Bits(float f) { return core::FloatToBits(f); }
float FromBits(uint32_t b) { return core::BitsToFloat(b); }

// The shared-memory table as the kernels fill it: slot UsedKey(i) - kKeyMin = MakeKeyTable(q).entry[i], computed by
// the compiler.
constexpr KeyTable kNF4Keys = MakeKeyTable(kNF4);
constexpr KeyTable kFP4Keys = MakeKeyTable(kFP4);

std::vector<unsigned long long> KeyTableFor(const Codebook4Tables& t) {
  const KeyTable& k = &t == &kNF4Tables ? kNF4Keys : kFP4Keys;
  std::vector<unsigned long long> table(kKeyTableSize);
  for (int i = 0; i < kKeysUsed; ++i) {
    table[UsedKey(i) - kKeyMin] = k.entry[i];
    EXPECT_EQ(k.entry[i], PackKeyEntry(MakeKeyEntry(t, UsedKey(i)))) << "compile-time and run-time entries differ";
  }
  return table;
}

TEST(Codebook4Tables, EqualCoreBitForBit) {
  for (Quant4 q : {Quant4::kNF4, Quant4::kFP4}) {
    SCOPED_TRACE(std::string(core::Quant4Name(q)));
    const Codebook4Tables& t = TablesFor(q);
    const core::Codebook4& cb = core::GetCodebook4(q);
    for (int i = 0; i < 16; ++i) {
      EXPECT_EQ(Bits(t.value[i]), Bits(core::Code4(q)[i])) << "value " << i;
      EXPECT_EQ(Bits(t.value[i]), Bits(cb.values[i])) << "value " << i;
      EXPECT_EQ(t.s2c[i], cb.sorted_to_code[i]) << "sorted_to_code " << i;
    }
    for (int i = 0; i < 15; ++i) EXPECT_EQ(Bits(t.mid[i]), Bits(cb.midpoints[i])) << "midpoint " << i;
  }
}

TEST(Codebook4Tables, SortedPositionEqualsCore) {
  std::mt19937 rng(1);
  for (Quant4 q : {Quant4::kNF4, Quant4::kFP4}) {
    const core::Codebook4& cb = core::GetCodebook4(q);
    for (int i = 0; i < 100000; ++i) {
      const float v = FromBits(rng());
      ASSERT_EQ(SortedPosition(TablesFor(q), v), core::SortedPosition4(cb, v)) << v;
    }
  }
}

TEST(KeyTable, EveryUsedBucketHasAtMostOneCodeChange) {
  EXPECT_EQ(kKeyMin, 460u);
  EXPECT_EQ(kKeysUsed, 104);
  for (Quant4 q : {Quant4::kNF4, Quant4::kFP4}) {
    for (int i = 0; i < kKeysUsed; ++i) {
      EXPECT_TRUE(MakeKeyEntry(TablesFor(q), UsedKey(i)).valid) << core::Quant4Name(q) << " key " << UsedKey(i);
    }
  }
}

// Every scaled value the kernels can look up: [-1, 1] (the keys of [1, 2) are filled in too).
TEST(KeyTable, LookupEqualsNearestCode4) {
  for (Quant4 q : {Quant4::kNF4, Quant4::kFP4}) {
    SCOPED_TRACE(std::string(core::Quant4Name(q)));
    const core::Codebook4& cb = core::GetCodebook4(q);
    const std::vector<unsigned long long> table = KeyTableFor(TablesFor(q));
    int64_t bad = 0, checked = 0;
    const auto check = [&](uint32_t b) {
      const float s = FromBits(b);
      if (std::isnan(s) || std::fabs(s) >= 2.0f) return;
      ++checked;
      const unsigned got = LookupCode(table.data(), s), want = core::NearestCode4(cb, s);
      if (got != want && bad++ < 5) ADD_FAILURE() << "s=" << s << " (0x" << std::hex << b << std::dec << "): got "
                                                  << got << " want " << want;
    };
    // A sweep over all magnitudes below 2 (every 97th bit pattern, both signs) ...
    for (uint32_t b = 0; b < 0x40000000u; b += 97) {
      check(b);
      check(b | 0x80000000u);
    }
    // ... every float within 4096 ulps of each midpoint, bucket edge and the clamp, and the tiny values.
    std::vector<uint32_t> centers;
    for (int i = 0; i < 15; ++i) centers.push_back(Bits(cb.midpoints[i]) & 0x7FFFFFFFu);
    for (uint32_t key = kKeyMin; key <= kKeyPosEnd; ++key) centers.push_back(key << kKeyShift);
    for (uint32_t c : centers) {
      for (uint32_t b = c > 4096 ? c - 4096 : 0; b < c + 4096; ++b) {
        check(b);
        check(b | 0x80000000u);
      }
    }
    for (uint32_t b = 0; b < (1u << 20); ++b) {
      check(b);
      check(b | 0x80000000u);
    }
    EXPECT_EQ(bad, 0) << "of " << checked;
  }
}

// ScaleFast against the host's correctly rounded division: equal bit for bit when |x / a| >= 2^-20; below, the
// code (all that is used) is equal and the result stays in the clamped bottom bucket.
void CheckScale(float x, float a, const std::vector<unsigned long long>& table, const core::Codebook4& cb,
                int64_t* bad) {
  const float y = 1.0f / a;
  const float got = ScaleFast(x, a, y);
  const float want = x / a;
  if (std::fabs(want) >= 0x1p-20f) {
    if (Bits(got) != Bits(want) && (*bad)++ < 5) {
      ADD_FAILURE() << std::hexfloat << "x=" << x << " a=" << a << ": got " << got << " want " << want;
    }
  } else {
    const bool same = LookupCode(table.data(), got) == core::NearestCode4(cb, want) && std::fabs(got) < 0x1p-12f;
    if (!same && (*bad)++ < 5) {
      ADD_FAILURE() << std::hexfloat << "tiny x=" << x << " a=" << a << ": got " << got << " want " << want;
    }
  }
}

TEST(ScaleFast, CorrectlyRoundedWhereItMatters) {
  std::mt19937 rng(20240611);
  for (Quant4 q : {Quant4::kNF4, Quant4::kFP4}) {
    const core::Codebook4& cb = core::GetCodebook4(q);
    const std::vector<unsigned long long> table = KeyTableFor(TablesFor(q));
    int64_t bad = 0;
    std::uniform_int_distribution<int> exp_dist(-60, 59);
    std::uniform_int_distribution<uint32_t> mant(0, (1u << 23) - 1);
    std::vector<float> as = {0x1p-60f, 0x1p60f, 0x1.fffffep-1f, 1.0f, 0x1.000002p0f, 0x1.fffffep59f, 0x1.8p-60f,
                             12.0f, 3.0f, 0x1.555556p-2f};
    for (int i = 0; i < 3000; ++i) as.push_back(FromBits((uint32_t(exp_dist(rng) + 127) << 23) | mant(rng)));
    for (float a : as) {
      ASSERT_TRUE(FastScaleOk(a)) << a;
      const uint32_t ab = Bits(a);
      std::uniform_int_distribution<uint32_t> below(0, ab);
      // Uniform bit patterns in [-a, a] (every magnitude range), the ends, and values at and around each midpoint
      // times a (where a one-ulp error would change the code).
      for (int j = 0; j < 2000; ++j) {
        const float x = FromBits(below(rng) | (rng() & 0x80000000u));
        CheckScale(x, a, table, cb, &bad);
      }
      for (float x : {a, -a, 0.0f, -0.0f, FromBits(1), FromBits(0x80000001u), FromBits(ab - 1)}) {
        CheckScale(x, a, table, cb, &bad);
      }
      for (int i = 0; i < 15; ++i) {
        const float c = cb.midpoints[i] * a;
        for (int d = -40; d <= 40; ++d) {
          const uint32_t cb_bits = Bits(c);
          const float x = FromBits(static_cast<uint32_t>(static_cast<int64_t>(cb_bits) + d));
          if (std::fabs(x) <= a) CheckScale(x, a, table, cb, &bad);
        }
      }
    }
    EXPECT_EQ(bad, 0);
  }
}

TEST(ScaleFast, NotUsedOutsideItsRange) {
  for (float a : {0.0f, 0x1.fffffep-61f, 0x1.000002p60f, INFINITY, NAN, 1e-40f, 3e38f}) EXPECT_FALSE(FastScaleOk(a));
}

// The kernel's per-block choice, modeled on the host with the same functions: ScaleFast for FastScaleOk(absmax),
// else the exact ScaleToUnit with NaN -> the lowest value's code. Equals the scalar CPU quantizer, specials
// included, for every dtype.
TEST(QuantizeModel, EqualsQuantizeBlockwise4Scalar) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  for (Quant4 q : {Quant4::kNF4, Quant4::kFP4}) {
    const Codebook4Tables& t = TablesFor(q);
    const std::vector<unsigned long long> table = KeyTableFor(t);
    for (core::DType dt : {core::DType::kFloat32, core::DType::kFloat16, core::DType::kBFloat16}) {
      SCOPED_TRACE(std::string(core::Quant4Name(q)) + " " + std::string(core::DTypeName(dt)));
      const int64_t bs = 64, n = 64 * 4000 + 33;
      std::vector<uint8_t> x(n * core::DTypeSize(dt));
      for (int64_t i = 0; i < n; ++i) {
        const int64_t blk = i / bs;
        float v = normal(rng) * std::ldexp(1.0f, static_cast<int>(blk % 200) - 100);  // absmax from 2^-100 up
        v = tests::MaybeSpecial(rng, v);
        if (blk % 37 == 5) v = 0.0f;  // all-zero blocks
        core::StoreFromFloat(dt, x.data(), i, v);
      }
      const int64_t nb = core::NumBlocks(n, bs);
      std::vector<uint8_t> want(core::PackedSize4(n)), got(core::PackedSize4(n));
      std::vector<float> absmax(nb);
      core::QuantizeBlockwise4Scalar(dt, x.data(), q, {n, bs, 0, nb}, want.data(), absmax.data());
      for (int64_t b = 0; b < nb; ++b) {
        const float amax = absmax[b];
        const bool fast = FastScaleOk(amax);
        const float y = fast ? 1.0f / amax : 0.0f;
        for (int64_t i = b * bs; i < std::min(n, (b + 1) * bs); ++i) {
          const float v = core::LoadAsFloat(dt, x.data(), i);
          unsigned c;
          if (fast) {
            c = LookupCode(table.data(), ScaleFast(v, amax, y));
          } else {
            const float s = core::ScaleToUnit(v, amax);
            c = std::isnan(s) ? t.s2c[0] : LookupCode(table.data(), s);
          }
          if ((i & 1) == 0) got[i >> 1] = static_cast<uint8_t>(c << 4);
          else got[i >> 1] = static_cast<uint8_t>(got[i >> 1] | c);
        }
      }
      if (n & 1) got[n >> 1] |= LookupCode(table.data(), 0.0f);  // the kernel's pad: the code of 0.0
      int64_t bad = 0;
      for (size_t i = 0; i < want.size() && bad < 5; ++i) {
        if (got[i] != want[i]) {
          ++bad;
          ADD_FAILURE() << "byte " << i << ": got " << int{got[i]} << " want " << int{want[i]} << " absmax "
                        << absmax[2 * i / bs];
        }
      }
    }
  }
}

// The 4-bit code tables as NVRTC's front end evaluates them (constexpr, in the kernels) equal bnb::core's, bit for
// bit: static_asserts generated from core's values, compiled by NVRTC. (jit_codebook4_test checks the same header
// as the host compiler evaluates it.) Skipped, with the reason, where libnvrtc cannot be opened.
TEST(Nvrtc, TablesAsNvrtcComputesThemEqualCore) {
  absl::StatusOr<const jit::cuda::Nvrtc*> nv = tests::TestNvrtc();
  if (!nv.ok()) GTEST_SKIP() << std::string(nv.status().message());
  std::string src = "#include \"codebook4.cuh\"\nusing namespace bnb::cb4;\n";
  for (core::Quant4 q : {core::Quant4::kNF4, core::Quant4::kFP4}) {
    const core::Codebook4& cb = core::GetCodebook4(q);
    const std::string t = absl::StrCat("bnb_t", q == core::Quant4::kNF4 ? "0" : "1");
    absl::StrAppend(&src, "constexpr Codebook4Tables ", t, " = MakeCodebook4Tables(",
                    q == core::Quant4::kNF4 ? "kNF4" : "kFP4", ");\n");
    const auto same_float = [&](const std::string& expr, float v) {
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      absl::StrAppend(&src, "static_assert(__builtin_bit_cast(unsigned, ", expr, ") == ", bits, "u, \"", expr,
                      " == ", absl::StrFormat("%a", static_cast<double>(v)), "\");\n");
    };
    for (int i = 0; i < 16; ++i) {
      same_float(absl::StrCat(t, ".value[", i, "]"), cb.values[i]);
      absl::StrAppend(&src, "static_assert(", t, ".s2c[", i, "] == ", int{cb.sorted_to_code[i]}, ", \"s2c\");\n");
    }
    for (int i = 0; i < 15; ++i) same_float(absl::StrCat(t, ".mid[", i, "]"), cb.midpoints[i]);
    // The bucket table the quantize kernels load, as NVRTC computes it, against the host compiler's (whose lookups
    // jit_codebook4_test checks against core::NearestCode4).
    const KeyTable keys = MakeKeyTable(q == core::Quant4::kNF4 ? kNF4 : kFP4);
    absl::StrAppend(&src, "constexpr KeyTable ", t, "k = MakeKeyTable(",
                    q == core::Quant4::kNF4 ? "kNF4" : "kFP4", ");\n");
    for (int i = 0; i < kKeysUsed; ++i) {
      absl::StrAppend(&src, "static_assert(", t, "k.entry[", i, "] == ", keys.entry[i], "ull, \"key entry ", i,
                      "\");\n");
    }
  }
  src += "template <int I> __global__ void bnb_codebook4_check() {}\n";
  jit::KernelSpec spec;
  spec.template_name = "codebook4_check";
  spec.entry = "bnb_codebook4_check";
  spec.template_args = {{"I", "0"}};
  spec.arch = "sm_90";
  std::vector<jit::SourceFile> headers;
  for (const jit::EmbeddedFile& f : jit::KernelFiles()) headers.push_back({f.name, f.text});
  jit::cuda::NvrtcCompiler compiler;
  absl::StatusOr<jit::Binary> b = compiler.Compile(spec, src, headers, *compiler.Options(spec));
  EXPECT_TRUE(b.ok()) << b.status() << "\n" << src;
}

}  // namespace
}  // namespace bnb::cb4
