// The 8-bit CUDA quantizer's numerics (bnb/jit/kernels/codebook8.cuh, compiled here as host C++: the same text the
// GPU runs) against bnb/core's definition: the bucket table gives NearestCode's code for every scaled value it is
// trusted with, and the kernel's per-element choice (ScaleFast and the table, else the exact division and the
// search) reproduces QuantizeBlockwise8Scalar. No GPU needed.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "bnb/core/blockwise8.h"
#include "bnb/core/codebook.h"
#include "bnb/core/dtype.h"
#include "bnb/jit/blockwise8.h"
#include "bnb/jit/codebook8_host.h"
#include "bnb/tests/special_values.h"
#include "gtest/gtest.h"

namespace bnb::cb8 {
namespace {

// A codebook as each CTA prepares it, and its bucket table as the CTA fills it.
struct Prepared {
  core::PreparedCodebook cb;
  std::vector<unsigned char> s2c;
  std::vector<float> mid;  // the 255 midpoints and +inf, as the kernel's s_mid
  std::vector<unsigned> table;
  int marked = 0;
};

Prepared Prepare(const std::vector<float>& code) {
  Prepared p{*core::PrepareCodebook(code.data(), 256), {}, {}, {}, 0};
  for (int32_t c : p.cb.sorted_to_code) p.s2c.push_back(static_cast<unsigned char>(c));
  p.mid.assign(p.cb.midpoints.begin(), p.cb.midpoints.end());
  p.mid.push_back(INFINITY);
  // As a CTA of 256 threads fills it: runs of 21 entries.
  p.table.assign(kTableSize, 0u);
  constexpr int kRun = (kTableSize + 255) / 256;
  for (int begin = 0; begin < kTableSize; begin += kRun) {
    MakeEntries(p.mid.data(), p.s2c.data(), begin, std::min(begin + kRun, kTableSize), p.table.data());
  }
  for (unsigned e : p.table) p.marked += static_cast<int>(e >> 24);
  return p;
}

std::vector<float> Uniform() {
  std::vector<float> c;
  for (int k = -127; k <= 128; ++k) c.push_back(static_cast<float>(k) / 127.0f);
  return c;
}

// Unsorted, duplicates, a dense cluster (several changes in one bucket) and values around 0 below 2^-20.
std::vector<float> Awkward() {
  std::vector<float> code(256);
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (auto& c : code) c = u(rng);
  for (int i = 0; i < 40; ++i) code[i] = 0.5f + i * 1e-5f;
  code[50] = code[60];
  code[70] = 1e-10f;
  code[71] = -1e-10f;
  code[72] = 3e-7f;
  return code;
}

// Every entry is the same whatever run it is filled in and wherever its searches start.
// The kernels' SplitPoint (numerics.cuh, host-compiled) is its bnb::core twin, bit for bit: the dynamic maps'
// neighbours and random pairs across the exponent range, subnormals and neighbouring floats among them.
TEST(SplitPoint, KernelTwinEqualsCore) {
  std::vector<std::pair<float, float>> pairs;
  for (const bool is_signed : {true, false}) {
    auto map = core::CreateDynamicMap(is_signed);
    ASSERT_TRUE(map.ok());
    std::sort(map->begin(), map->end());
    for (size_t i = 0; i + 1 < map->size(); ++i) pairs.push_back({(*map)[i], (*map)[i + 1]});
  }
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-149, 127);
  for (int k = 0; k < 100000; ++k) {
    const float scale = std::ldexp(1.0f, exponent(rng));
    const float a = unit(rng) * scale, b = k % 2 ? std::nextafter(a, INFINITY) : a + unit(rng) * scale;
    if (std::isfinite(a) && std::isfinite(b)) pairs.push_back({std::min(a, b), std::max(a, b)});
  }
  int moved = 0;
  for (const auto& [lo, hi] : pairs) {
    const float core_split = core::SplitPoint(lo, hi);
    ASSERT_EQ(core::FloatToBits(bnb::SplitPoint(lo, hi)), core::FloatToBits(core_split)) << lo << " " << hi;
    ASSERT_EQ(core::FloatToBits(bnb::SplitPointOf(lo, hi, (lo + hi) * 0.5f)), core::FloatToBits(core_split));
    moved += core_split != (lo + hi) * 0.5f;
  }
  EXPECT_GT(moved, 1000);
}

TEST(Codebook8Table, EntriesDoNotDependOnTheWalk) {
  for (const std::vector<float>& code : {*core::CreateDynamicMap(), Awkward()}) {
    const Prepared p = Prepare(code);
    std::mt19937 rng(9);
    for (int i = 0; i < kTableSize; ++i) {
      int pos = static_cast<int>(rng() % 256);
      ASSERT_EQ(MakeEntry(p.mid.data(), p.s2c.data(), i, &pos), p.table[i]) << "entry " << i;
    }
  }
}

// The host's size of the scratch buffer is the kernel's sizeof(bw8::Prepared): table, 256 midpoints, 256 codes.
TEST(Codebook8Table, ScratchHoldsThePreparedCodebook) {
  EXPECT_EQ(jit::kQuantizeBlockwise8ScratchBytes, kTableSize * 4 + 256 * 4 + 256);
  EXPECT_EQ(jit::kQuantizeBlockwise8ScratchBytes % 16, 0);
}

TEST(Codebook8Table, KeysCoverEveryScaledValue) {
  EXPECT_EQ(KeyIndex(0.0f), 0);
  EXPECT_EQ(KeyIndex(0x1p-30f), 0);  // clamped into the bottom bucket
  EXPECT_EQ(KeyIndex(-0.0f), kPerSign);
  EXPECT_EQ(KeyIndex(1.0f), kPerSign - 128);
  EXPECT_EQ(KeyIndex(std::nextafter(2.0f, 0.0f)), kPerSign - 1);
  EXPECT_EQ(KeyIndex(-1.0f), kTableSize - 128);
  EXPECT_EQ(kTableSize, 5376);
}

TEST(Codebook8Table, DynamicMapsNeedNoSearch) {
  EXPECT_EQ(Prepare(*core::CreateDynamicMap()).marked, 0);
  // The unsigned map has two midpoints below 2^-20 (1.6e-7, 5.5e-7): only its bottom bucket is searched.
  const Prepared u = Prepare(*core::ComputeDynamicMap(false, 7, 8));
  EXPECT_EQ(u.marked, 1);
  EXPECT_EQ(u.table[0] >> 24, 1u);
  EXPECT_EQ(Prepare(Uniform()).marked, 0);
  EXPECT_GT(Prepare(Awkward()).marked, 0);  // the fallback is exercised below
}

// Every value the table answers for (unmarked buckets) gets NearestCode's code: all midpoints and 16 ulps around
// them, both signs, zeros, subnormals, the ends, and a sweep of bit patterns over [-1, 1].
TEST(Codebook8Table, EqualsNearestCode) {
  for (const std::vector<float>& code : {*core::CreateDynamicMap(), *core::ComputeDynamicMap(false, 7, 8), Uniform(),
                                         Awkward()}) {
    const Prepared p = Prepare(code);
    std::vector<float> vals = {0.0f, -0.0f, 1.0f, -1.0f, 1e-45f, -1e-45f, 0x1p-20f, -0x1p-20f, 1e-30f};
    for (float m : p.cb.midpoints) {
      float up = m, down = m;
      for (int k = 0; k < 16; ++k, up = std::nextafter(up, 2.0f), down = std::nextafter(down, -2.0f)) {
        for (float v : {up, down, -up, -down}) {
          if (std::fabs(v) <= 1.0f) vals.push_back(v);
        }
      }
    }
    for (uint32_t bits = 0; bits <= 0x3F800000u; bits += 509) {
      vals.push_back(core::BitsToFloat(bits));
      vals.push_back(-core::BitsToFloat(bits));
    }
    int64_t bad = 0, answered = 0;
    for (float v : vals) {
      unsigned c;
      if (!LookupCode(p.table.data(), p.mid.data(), v, &c)) continue;
      ++answered;
      if (c != core::NearestCode(p.cb, v) && bad++ < 5) {
        ADD_FAILURE() << std::hexfloat << "s=" << v << ": table " << c << ", NearestCode "
                      << int{core::NearestCode(p.cb, v)};
      }
    }
    EXPECT_EQ(bad, 0);
    EXPECT_GT(answered, static_cast<int64_t>(vals.size()) / 2);
  }
}

// The kernel's per-element choice, modeled on the host with the same functions, equals the scalar CPU quantizer:
// absmax from 2^-100 to 2^27 (both divisions taken), NaN, +-inf, zeros, subnormals, every dtype.
TEST(QuantizeModel, EqualsQuantizeBlockwise8Scalar) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  for (const std::vector<float>& code : {*core::CreateDynamicMap(), Awkward()}) {
    const Prepared p = Prepare(code);
    for (core::DType dt : {core::DType::kFloat32, core::DType::kFloat16, core::DType::kBFloat16}) {
      SCOPED_TRACE(std::string(core::DTypeName(dt)));
      const int64_t bs = 64, n = 64 * 3000 + 17;
      std::vector<uint8_t> x(n * core::DTypeSize(dt));
      for (int64_t i = 0; i < n; ++i) {
        const int64_t blk = i / bs;
        float v = normal(rng) * std::ldexp(1.0f, static_cast<int>(blk % 128) - 100);
        v = tests::MaybeSpecial(rng, v);
        if (blk % 37 == 5) v = 0.0f;  // all-zero blocks
        core::StoreFromFloat(dt, x.data(), i, v);
      }
      const int64_t nb = core::NumBlocks(n, bs);
      std::vector<uint8_t> want(n), got(n);
      std::vector<float> absmax(nb);
      core::QuantizeBlockwise8Scalar(dt, x.data(), p.cb, {n, bs, 0, nb}, want.data(), absmax.data());
      for (int64_t b = 0; b < nb; ++b) {
        const float amax = absmax[b];
        const bool fast = FastScaleOk(amax);
        const float y = fast ? 1.0f / amax : 0.0f;
        for (int64_t i = b * bs; i < std::min(n, (b + 1) * bs); ++i) {
          const float xv = core::LoadAsFloat(dt, x.data(), i);
          unsigned c = 0;
          bool done = false;
          if (fast) {
            const float s = ScaleFast(xv, amax, y);
            done = LookupCode(p.table.data(), p.mid.data(), s, &c) && !(std::fabs(s) < 0x1p-19f && xv != 0.0f);
          }
          if (!done) c = p.s2c[SortedPosition(p.mid.data(), core::ScaleToUnit(xv, amax))];
          got[i] = static_cast<uint8_t>(c);
        }
      }
      int64_t bad = 0;
      for (int64_t i = 0; i < n && bad < 5; ++i) {
        if (got[i] != want[i]) {
          ++bad;
          ADD_FAILURE() << "element " << i << ": got " << int{got[i]} << " want " << int{want[i]} << " absmax "
                        << absmax[i / bs] << " x " << core::LoadAsFloat(dt, x.data(), i);
        }
      }
    }
  }
}

}  // namespace
}  // namespace bnb::cb8
