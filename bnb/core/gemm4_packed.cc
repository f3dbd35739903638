// The packed layout (gemm4_packed.h): packing, and the product's dispatch to the kernels of gemm4_packed_x86.cc.
#include "bnb/core/gemm4_packed.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "bnb/core/aligned64.h"
#include "bnb/core/blockwise4.h"
#include "bnb/core/cpu_isa.h"
#include "bnb/core/gemm4_packed_x86.h"
#include "bnb/core/gemv4.h"
#include "bnb/core/int8_gemm.h"
#include "bnb/core/stream_stores.h"

namespace bnb::core {

bool Packed4Fits(int64_t N, int64_t K, int64_t blocksize) {
  const bool power_of_two = blocksize > 0 && (blocksize & (blocksize - 1)) == 0;
  return N >= 1 && K >= kPackCols && K % kPackCols == 0 && power_of_two && blocksize >= kPackCols &&
         K % blocksize == 0;
}

namespace {

// Which kernel a call takes: the bfloat16 ones where gemv4's dispatch would take its bfloat16 kernel, the float32
// one where it would take its AVX-512 float32 kernel (K = 128 stands for any multiple of 128: the packed kernels
// take any multiple of 64).
// kAmx: where the bfloat16 ones would run, on AMX tiles where the CPU has them (cpu.amx), from kAmxFromRows rows of
// A: its weight costs more to make into B tiles (scaled, in float32) than vdpbf16ps takes for a row or two
// (tools/bench/NOTES.md, 'AMX').
// kF32Blocked: where the float32 one would run, from kBlockedFromRows rows of A: a dense product's blocking, which
// reads each code once per block of A's rows and multiplies at ~95% of the FMA ceiling, where the float32 kernel
// looks each up once per 8 rows (its FMAs ~78% of its operations); from 24 rows it beat it, and at 128-512 rows it
// took 0.84-1.05x the time of torch's float32 and float16 products (tools/bench/NOTES.md, 'Blocked float32
// product').
enum class PackedKernel { kNone, kBf16, kAmx, kF32, kF32Blocked };
constexpr int64_t kAmxFromRows = 3;
constexpr int64_t kBlockedFromRows = 24;

// The kernel for any number of rows (kAmx: from kAmxFromRows; kF32: from kBlockedFromRows kF32Blocked), and for M
// rows.
PackedKernel Choose(DType dtype, bool bf16_products) {
  switch (ActiveGemv4Kernel(dtype, 128, bf16_products)) {
    case Gemv4Kernel::kAvx512Bf16:
#if BNB_GEMV4_X86
      if (AmxAllowed() && packed4_x86::HasAmxBf16()) return PackedKernel::kAmx;
#endif
      return PackedKernel::kBf16;
    case Gemv4Kernel::kAvx512: return PackedKernel::kF32;
    case Gemv4Kernel::kHighway:
    case Gemv4Kernel::kHighwayBf16: break;
  }
  return PackedKernel::kNone;
}

PackedKernel Choose(DType dtype, int64_t M, bool bf16_products) {
  const PackedKernel kernel = Choose(dtype, bf16_products);
  if (kernel == PackedKernel::kAmx && M < kAmxFromRows) return PackedKernel::kBf16;
  return kernel == PackedKernel::kF32 && M >= kBlockedFromRows ? PackedKernel::kF32Blocked : kernel;
}

// Pack4 and Unpack4 take vector code for whole tiles where the AVX-512 kernels run (the same bytes as the loops).
bool VectorPacking() { return Choose(DType::kFloat32, true) != PackedKernel::kNone; }

// Rows per call, beyond which the gemm_4bit CPU path (dequantize + addmm in bands) wins, at 4096x4096 on Zen 4
// (tools/bench/NOTES.md, 'Tiled CPU layout'). bfloat16 products: oneDNN's bfloat16 product runs near the vdpbf16ps
// ceiling, these kernels at ~84% of it: faster to 64 rows, a tie at 128, slower from 256. float32 products: no
// bound (the blocked kernel takes A a block of rows at a time).
constexpr int64_t kMaxBf16Rows = 64;
// AMX: at 128 rows 0.67-0.90x oneDNN's bfloat16 product on the dequantized weight, which runs on AMX too; slices
// of 256 rows (the pair kernel's K blocks keep their A in L2) decode the weight half as often as slices of 128 and
// measured 0.78-1.00x at 256-512 rows against 0.82-1.12x (tools/bench/NOTES.md, 'AMX: tile pairs').
constexpr int64_t kMaxAmxRows = 256;

// Tile t's sums for rows [r0, r0 + rows) (sums[(r - r0) * sums_ld + j]) plus bias, each rounded once into out.
void StoreTile(DType dtype, const float* sums, int64_t r0, int64_t rows, const Packed4& w, int64_t t,
               const void* bias, void* out, int64_t sums_ld = kPackRows) {
  const int64_t tile_rows = std::min(kPackRows, w.N - t * kPackRows);
  float add[kPackRows] = {};
  if (bias != nullptr) {
    for (int64_t j = 0; j < tile_rows; ++j) add[j] = LoadAsFloat(dtype, bias, t * kPackRows + j);
  }
#if BNB_GEMV4_X86  // every caller runs on AVX-512
  void* first = static_cast<char*>(out) + (r0 * w.N + t * kPackRows) * DTypeSize(dtype);
  if (tile_rows == kPackRows) {
    return packed4_x86::StoreTileRows(dtype, sums, sums_ld, rows, bias == nullptr ? nullptr : add, first, w.N);
  }
#endif
  // Row by row: each row's 16 outputs are adjacent in out (a column at a time would touch a line per value).
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = sums + r * sums_ld;
    const int64_t at = (r0 + r) * w.N + t * kPackRows;
    for (int64_t j = 0; j < tile_rows; ++j) {
      StoreFromFloat(dtype, out, at + j, bias == nullptr ? row[j] : row[j] + add[j]);
    }
  }
}

#if BNB_GEMV4_X86
// The bytes of A's arranged copy the AMX pair kernel's passes read per K block: they stay in L2 (2 MB a core on
// Sapphire Rapids) across a thread's tiles, each tile pair's sums carried between blocks in memory.
constexpr int64_t kAmxBlockBytes = int64_t{1} << 20;

// The AMX kernels over tiles [t0, t1): a tile at a time for up to 4 row tiles of A, pairs of tiles for more, by
// blocks of K (all pairs over one block, then the next).
void AmxProduct(DType dtype, const void* A, int64_t M, const Packed4& w, const float* code16, const void* bias,
                void* out, int64_t t0, int64_t t1) {
  Aligned64<uint16_t> a(packed4_x86::AmxArrangedValues(M, w.K)), b(packed4_x86::kAmxWorkValues);
  packed4_x86::AmxArrange(static_cast<const uint16_t*>(A), M, w.K, a.data());
  const int64_t sums_size = packed4_x86::AmxRowTiles(M) * kPackRows * kPackRows;
  const packed4_x86::AmxTiles tiles(packed4_x86::AmxTileRows(M));
  int64_t t = t0;
  if (packed4_x86::AmxRowTiles(M) > 4) {
    const int64_t pairs = (t1 - t0) / 2, groups = w.K / kPackCols;
    const int64_t group_bytes = packed4_x86::AmxArrangedValues(M, kPackCols) * static_cast<int64_t>(sizeof(uint16_t));
    const int64_t block = std::max<int64_t>(1, kAmxBlockBytes / group_bytes / packed4_x86::kAmxChunk) *
                          packed4_x86::kAmxChunk;
    Aligned64<float> sums(2 * pairs * sums_size);
    for (int64_t g0 = 0; g0 < groups; g0 += block) {
      for (int64_t p = 0; p < pairs; ++p) {
        packed4_x86::TilePairBf16Amx(a.data(), M, w, code16, t0 + 2 * p, g0, std::min(groups, g0 + block), b.data(),
                                     sums.data() + 2 * p * sums_size, sums.data() + (2 * p + 1) * sums_size);
      }
    }
    for (int64_t p = 0; p < 2 * pairs; ++p) StoreTile(dtype, sums.data() + p * sums_size, 0, M, w, t0 + p, bias, out);
    t += 2 * pairs;
  }
  Aligned64<float> sums(sums_size);
  for (; t < t1; ++t) {
    packed4_x86::TileBf16Amx(a.data(), M, w, code16, t, b.data(), sums.data());
    StoreTile(dtype, sums.data(), 0, M, w, t, bias, out);
  }
}
#endif

// Rows of A per block of the blocked product (at most; blocks of equal size): its arranged columns (kBlockedCols
// of each row: 512 KB) stay in L2 while a thread's panels pass over them; each block dequantizes the weight once.
constexpr int64_t kBlockedBlockRows = 512;

#if BNB_GEMV4_X86
// The most bytes of sums a thread keeps (128 a row per pair of tiles, in L3 between a panel's passes): a wider
// share of the weight runs as groups of tile pairs, each arranging the block's A again (~1.5% of the product's
// time at 512 rows and 2048 columns a group).
constexpr int64_t kBlockedSumsBytes = int64_t{4} << 20;

// Tiles [t0, t1) by the blocked kernels: for each block of A's rows, group of tile pairs and kBlockedCols columns
// of K, the block's columns arranged, then each pair of tiles dequantized into a panel (in L1) and multiplied into
// its sums; the sums rounded into out once the group has all of K.
void BlockedProduct(DType dtype, const void* A, int64_t M, const Packed4& w, const float* code16, const void* bias,
                    void* out, int64_t t0, int64_t t1) {
  const int64_t blocks = (M + kBlockedBlockRows - 1) / kBlockedBlockRows, block_rows = (M + blocks - 1) / blocks;
  const int64_t padded = (block_rows + kBlockedRows - 1) / kBlockedRows * kBlockedRows;
  const int64_t strip_floats = padded * 32;  // one tile pair's sums
  const int64_t group = std::max<int64_t>(1, kBlockedSumsBytes / (strip_floats * 4));
  Aligned64<float> a(padded * kBlockedCols), panel(kBlockedCols * 32);
  Aligned64<float> sums(std::min(group, (t1 - t0 + 1) / 2) * strip_floats);
  for (int64_t r0 = 0; r0 < M; r0 += block_rows) {
    const int64_t rows = std::min(block_rows, M - r0);
    for (int64_t g0 = t0; g0 < t1; g0 += 2 * group) {
      const int64_t g1 = std::min(t1, g0 + 2 * group);
      for (int64_t k0 = 0; k0 < w.K; k0 += kBlockedCols) {
        const int64_t kc = std::min(kBlockedCols, w.K - k0);
        packed4_x86::BlockedArrange(dtype, A, w.K, r0, rows, k0, kc, a.data());
        for (int64_t t = g0; t < g1; t += 2) {
          packed4_x86::BlockedPanel(w, code16, t, std::min<int64_t>(2, g1 - t), k0, kc, panel.data());
          packed4_x86::BlockedRows(a.data(), rows, panel.data(), kc, sums.data() + (t - g0) / 2 * strip_floats,
                                   k0 > 0);
        }
      }
      for (int64_t t = g0; t < g1; ++t) {
        const float* tile_sums = sums.data() + (t - g0) / 2 * strip_floats + (t - g0) % 2 * kPackRows;
        StoreTile(dtype, tile_sums, r0, rows, w, t, bias, out, 32);
      }
    }
  }
}
#endif

// Rows of int8 activations per sweep over a thread's tiles: their 64 KB per 1024 columns stay in L2 while the
// weight streams past.
constexpr int64_t kInt8SweepRows = 64;

}  // namespace

void Pack4(const uint8_t* B, const float* absmax, int64_t N, int64_t K, int64_t blocksize, uint8_t* codes,
           float* scales, int64_t t0, int64_t t1) {
  const int64_t groups = K / kPackCols, blocks = K / blocksize;
  // Whole tiles by vector code (VectorPacking); the rest, and other CPUs, by these loops.
  [[maybe_unused]] const bool vector = VectorPacking();
  // A weight large enough to leave the caches streams its tiled codes (each pass reads N * K / 2 bytes, writes as
  // many): pack_4bit's repack of a 14336 x 4096 weight ran ~30% faster with this and PackTileCodes' prefetch
  // (tools/bench/NOTES.md, 'Repack: prefetch and streaming stores').
  [[maybe_unused]] const bool stream = StreamsOutput(codes, N * K);
  for (int64_t t = t0; t < t1; ++t) {
    for (int64_t c = 0; c < blocks; ++c) {
      for (int64_t j = 0; j < kPackRows; ++j) {
        const int64_t n = t * kPackRows + j;
        scales[(t * blocks + c) * kPackRows + j] = n < N ? absmax[n * blocks + c] : 0.0f;
      }
    }
#if BNB_GEMV4_X86
    if (vector && (t + 1) * kPackRows <= N) {
      packed4_x86::PackTileCodes(B, K, t, codes, stream);
      continue;
    }
#endif
    // Group by group: each row's 32 bytes (B's byte i: column 2i in its high nibble, 2i + 1 in its low one) become
    // 16 pairs of bytes, pair p holding columns 2p + e (low nibbles) and 32 + 2p + e (high), e = 0, 1; the group's
    // runs are those pairs transposed, run p = pair p of rows 0..15.
    for (int64_t g = 0; g < groups; ++g) {
      uint8_t pairs[kPackRows][32];
      for (int64_t j = 0; j < kPackRows; ++j) {
        const int64_t n = t * kPackRows + j;
        if (n >= N) {
          std::memset(pairs[j], 0, sizeof(pairs[j]));
          continue;
        }
        const uint8_t* row = B + (n * K + g * kPackCols) / 2;
        for (int p = 0; p < 16; ++p) {
          const unsigned first = row[p], second = row[16 + p];
          pairs[j][2 * p] = static_cast<uint8_t>((first >> 4) | (second & 0xF0));
          pairs[j][2 * p + 1] = static_cast<uint8_t>((first & 0x0F) | ((second << 4) & 0xF0));
        }
      }
      uint8_t* group = codes + (t * groups + g) * kPackGroupBytes;
      for (int p = 0; p < 16; ++p) {
        for (int64_t j = 0; j < kPackRows; ++j) std::memcpy(group + 32 * p + 2 * j, &pairs[j][2 * p], 2);
      }
    }
  }
}

namespace {

// Tile t's rows below N as bitsandbytes' bytes, row j at rows + j * K / 2.
void UnpackTile(const uint8_t* codes, int64_t N, int64_t K, int64_t t, uint8_t* rows, bool vector) {
#if BNB_GEMV4_X86
  if (vector && (t + 1) * kPackRows <= N) return packed4_x86::UnpackTileCodes(codes, K, t, rows);
#else
  (void)vector;
#endif
  const int64_t groups = K / kPackCols, tile_rows = std::min(kPackRows, N - t * kPackRows);
  for (int64_t g = 0; g < groups; ++g) {
    const uint8_t* group = codes + (t * groups + g) * kPackGroupBytes;
    for (int64_t j = 0; j < tile_rows; ++j) {
      uint8_t* row = rows + j * K / 2 + g * kPackCols / 2;
      for (int p = 0; p < 16; ++p) {  // Pack4's pair p of row j: bytes a, b
        const unsigned a = group[32 * p + 2 * j], b = group[32 * p + 2 * j + 1];
        row[p] = static_cast<uint8_t>(((a << 4) & 0xF0) | (b & 0x0F));
        row[16 + p] = static_cast<uint8_t>((a & 0xF0) | (b >> 4));
      }
    }
  }
}

}  // namespace

void Unpack4(const uint8_t* codes, int64_t N, int64_t K, uint8_t* B, int64_t t0, int64_t t1) {
  const bool vector = VectorPacking();
  for (int64_t t = t0; t < t1; ++t) UnpackTile(codes, N, K, t, B + t * kPackRows * K / 2, vector);
}

void DequantizePacked4(DType dtype, const Packed4& w, const float* code16, void* out, int64_t t0, int64_t t1) {
  const int64_t K = w.K, blocks = K / w.blocksize;
  const bool vector = VectorPacking();
  std::vector<uint8_t> bytes(kPackRows * K / 2);
  std::vector<float> absmax(kPackRows * blocks);
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t rows = std::min(kPackRows, w.N - t * kPackRows);
    UnpackTile(w.codes, w.N, K, t, bytes.data(), vector);
    for (int64_t c = 0; c < blocks; ++c) {
      for (int64_t j = 0; j < rows; ++j) absmax[j * blocks + c] = w.scales[(t * blocks + c) * kPackRows + j];
    }
    void* tile_out = static_cast<char*>(out) + (t - t0) * kPackRows * K * static_cast<int64_t>(DTypeSize(dtype));
    DequantizeBlockwise4(dtype, bytes.data(), absmax.data(), code16,
                         Blockwise4Range{rows * K, w.blocksize, 0, rows * blocks}, tile_out);
  }
}

bool Gemm4PackedInt8Runs() {
#if BNB_GEMV4_X86
  const Int8GemmKernel kernel = ActiveInt8GemmKernel();  // AMX-INT8 comes with AVX512-VNNI
  return kernel == Int8GemmKernel::kAvx512Vnni || kernel == Int8GemmKernel::kAmxInt8;
#else
  return false;
#endif
}

bool Int8CodeValues(const float* code16, int8_t* values16, int* bad) {
  int8_t v[16];
  for (int i = 0; i < 16; ++i) {
    if (!(code16[i] >= -1.0f && code16[i] <= 1.0f)) {
      *bad = i;
      return false;
    }
    v[i] = static_cast<int8_t>(std::nearbyint(127.0f * code16[i]));  // the default rounding: ties to even
  }
  std::memcpy(values16, v, sizeof(v));
  return true;
}

Int8Activations QuantizeActivationsInt8(DType dtype, const void* A, int64_t M, int64_t K) {
  Int8Activations a{M, K, std::vector<int8_t>(M * K), std::vector<float>(M * K / kPackCols),
                    std::vector<int32_t>(M * K / kPackCols)};
#if BNB_GEMV4_X86
  packed4_x86::QuantizeInt8(dtype, A, a);
#else
  (void)dtype, (void)A;
#endif
  return a;
}

void Gemm4PackedInt8(DType dtype, const Int8Activations& a, const Packed4& w, const int8_t* values16,
                     const void* bias, void* out, int64_t t0, int64_t t1) {
#if BNB_GEMV4_X86
  uint8_t table64[64];  // the values biased to unsigned bytes, in each 16-byte lane
  for (int i = 0; i < 64; ++i) table64[i] = static_cast<uint8_t>(values16[i % 16] + 128);
  std::vector<float> sums(std::min(a.M, kInt8SweepRows) * kPackRows);
  for (int64_t r0 = 0; r0 < a.M; r0 += kInt8SweepRows) {
    const int64_t rows = std::min(kInt8SweepRows, a.M - r0);
    for (int64_t t = t0; t < t1; ++t) {
      packed4_x86::TileInt8Rows(a, r0, rows, w, table64, t, sums.data());
      StoreTile(dtype, sums.data(), r0, rows, w, t, bias, out);
    }
  }
#else
  (void)dtype, (void)a, (void)w, (void)values16, (void)bias, (void)out, (void)t0, (void)t1;
#endif
}

const char* Gemm4PackedKernelName(DType dtype, int64_t M, bool bf16_products) {
  if (!Gemm4PackedRuns(dtype, M, bf16_products)) return "none";
  switch (Choose(dtype, M, bf16_products)) {
    case PackedKernel::kBf16: return "avx512bf16";
    case PackedKernel::kAmx: return "amx";
    case PackedKernel::kF32: return "avx512";
    case PackedKernel::kF32Blocked: return "avx512-blocked";
    case PackedKernel::kNone: break;
  }
  return "none";
}

int64_t Gemm4PackedMaxRows(DType dtype, bool bf16_products) {
  switch (Choose(dtype, bf16_products)) {
    case PackedKernel::kBf16: return kMaxBf16Rows;
    case PackedKernel::kAmx: return kMaxAmxRows;
    case PackedKernel::kF32:
    case PackedKernel::kF32Blocked: return std::numeric_limits<int64_t>::max();
    case PackedKernel::kNone: break;
  }
  return 0;
}

int64_t Gemm4PackedDenseFrom(DType dtype, bool bf16_products) {
  // bfloat16 products: oneDNN's bfloat16 matmul runs nearer the vdpbf16ps ceiling than slices of 64 rows, which
  // tie at 128 rows and lose from 256 (tools/bench/NOTES.md, 'Linear4bit's repack in place'). AMX: slices ran
  // 0.78-1.09x oneDNN's product at 256-1024 rows, the dense path 1.13-2.45x ('AMX: tile pairs'). float32 products:
  // never (the blocked kernel ran 0.94-1.04x torch's float32 and float16 products at 128-1024 rows, the dense path
  // 1.05-1.21x: 'Blocked float32 product').
  return Choose(dtype, bf16_products) == PackedKernel::kBf16 ? 2 * kMaxBf16Rows + 1 : 0;
}

Packed4Split Gemm4PackedSplit(DType dtype, int64_t M, int64_t N, int64_t tasks, bool bf16_products) {
  const int64_t tiles = Packed4Tiles(N);
  tasks = std::max<int64_t>(1, std::min(tasks, tiles));
  Packed4Split best{1, M, tasks};
  if (Choose(dtype, M, bf16_products) != PackedKernel::kF32Blocked) return best;
  // A task's time per column of K, in ns (gemm4_packed.h): its share of the products, of the arranging and of the
  // panels (once per block of its rows); the slowest task's counts.
  const auto cost = [](int64_t rows, int64_t cols) {
    const double blocks = static_cast<double>((rows + kBlockedBlockRows - 1) / kBlockedBlockRows);
    return static_cast<double>(rows) * (static_cast<double>(cols) * 0.0125 + 0.37) + blocks * cols * 0.09;
  };
  double best_cost = std::numeric_limits<double>::infinity();
  for (int64_t parts = 1; parts <= tasks; ++parts) {
    const int64_t tile_parts = tasks / parts;
    // Slices of whole micro-blocks where there are enough rows.
    const int64_t rows = (M + parts - 1) / parts, row_rows = std::min(M, (rows + kBlockedRows - 1) / kBlockedRows *
                                                                             kBlockedRows);
    const int64_t cols = (tiles + tile_parts - 1) / tile_parts * kPackRows;
    const double c = cost(row_rows, cols);
    if (c < best_cost) best_cost = c, best = Packed4Split{(M + row_rows - 1) / row_rows, row_rows, tile_parts};
  }
  return best;
}

bool Gemm4PackedRuns(DType dtype, int64_t M, bool bf16_products) {
  return M >= 1 && M <= Gemm4PackedMaxRows(dtype, bf16_products);
}

void Gemm4Packed(DType dtype, const void* A, int64_t M, const Packed4& w, const float* code16, const void* bias,
                 void* out, int64_t t0, int64_t t1, bool bf16_products) {
#if BNB_GEMV4_X86
  const PackedKernel kernel = Choose(dtype, M, bf16_products);
  const int64_t K = w.K;
  if (kernel == PackedKernel::kAmx) return AmxProduct(dtype, A, M, w, code16, bias, out, t0, t1);
  if (kernel == PackedKernel::kF32Blocked) return BlockedProduct(dtype, A, M, w, code16, bias, out, t0, t1);
  // A as the kernels read it: one row as it is (float32 kernels: converted from float16 / bfloat16), several rows
  // arranged by group (group g's row r at (g * M + r) * 64): K apart, rows of 4 KB multiples share L1 sets.
  std::vector<uint16_t> a16;
  std::vector<float> a32;
  const void* a = A;
  const int64_t groups = K / kPackCols;
  if (kernel == PackedKernel::kBf16 && M > 1) {
    a16.resize(M * K);
    for (int64_t g = 0; g < groups; ++g) {
      for (int64_t r = 0; r < M; ++r) {
        std::memcpy(&a16[(g * M + r) * kPackCols], static_cast<const uint16_t*>(A) + r * K + g * kPackCols,
                    kPackCols * sizeof(uint16_t));
      }
    }
    a = a16.data();
  } else if (kernel == PackedKernel::kF32 && (M > 1 || dtype != DType::kFloat32)) {
    a32.resize(M * K);
    for (int64_t g = 0; g < groups; ++g) {
      for (int64_t r = 0; r < M; ++r) {
        float* dst = &a32[(g * M + r) * kPackCols];
        for (int64_t k = 0; k < kPackCols; ++k) dst[k] = LoadAsFloat(dtype, A, r * K + g * kPackCols + k);
      }
    }
    a = a32.data();
  }
  uint16_t table32[32];  // once per call, not per tile
  if (kernel == PackedKernel::kBf16) packed4_x86::Bf16CodeTable(code16, table32);
  std::vector<float> sums(3 * M * kPackRows);  // TileF32Rows works in the rest
  for (int64_t t = t0; t < t1; ++t) {
    if (kernel == PackedKernel::kBf16 && M == 1) {
      packed4_x86::TileBf16One(static_cast<const uint16_t*>(a), w, table32, t, sums.data());
    } else if (kernel == PackedKernel::kBf16) {
      packed4_x86::TileBf16Rows(static_cast<const uint16_t*>(a), M, w, table32, t, sums.data());
    } else if (M == 1) {
      packed4_x86::TileF32One(static_cast<const float*>(a), w, code16, t, sums.data());
    } else {
      packed4_x86::TileF32Rows(static_cast<const float*>(a), M, w, code16, t, sums.data());
    }
    StoreTile(dtype, sums.data(), 0, M, w, t, bias, out);
  }
#else
  (void)dtype, (void)A, (void)M, (void)w, (void)code16, (void)bias, (void)out, (void)t0, (void)t1;
  (void)bf16_products;
#endif
}

}  // namespace bnb::core
