// The 4-bit ops on the CPU: bnb/core's kernels over torch's thread pool.
#include <algorithm>
#include <numeric>

#include "bnb/core/blockwise4.h"
#include "bnb/core/codebook.h"
#include "bnb/core/cpu_settings.h"
#include "bnb/core/gemm4_packed.h"
#include "bnb/core/gemv4.h"
#include "bnb/ops/blockwise4/ops.h"
#include "bnb/ops/common/cpu_parallel.h"

namespace bnb::ops::blockwise4 {
namespace {

// The nested statistics as bnb/core's kernels read them, on contiguous copies kept alive here. The codebook is held
// to dequantize_blockwise's rule (every entry finite), with NestedScales' wording.
struct CpuNested {
  at::Tensor q, code, absmax;
  core::NestedAbsmax view;

  CpuNested(const char* op, const at::Tensor& scales, const Nested& nested)
      : q(nested.absmax_8bit->contiguous()), code(nested.absmax_code->contiguous()), absmax(scales.contiguous()) {
    const auto prepared = core::PrepareCodebookCached(code.data_ptr<float>(), code.numel());
    TORCH_CHECK(prepared.ok(), "bnb::", op, ": dequantizing absmax_8bit by absmax_code: ",
                prepared.status().message());
    view = core::NestedAbsmax{q.data_ptr<uint8_t>(), code.data_ptr<float>(), absmax.data_ptr<float>(),
                              nested.absmax_offset->to(at::kFloat).item<float>()};
  }
};

// A product's output shape: A's, with its last dimension (K) replaced by N.
std::vector<int64_t> ShapeWithLast(const at::Tensor& A, int64_t N) {
  std::vector<int64_t> shape(A.sizes().begin(), A.sizes().end());
  shape.back() = N;
  return shape;
}

struct Cpu {
  static constexpr bool kIsMeta = false;

  static void Quantize(const char* op, const at::Tensor& A, core::Quant4 q, int64_t blocksize, core::DType dtype,
                       at::Tensor& bytes, at::Tensor& absmax) {
    const at::Tensor x = A.contiguous();
    const int64_t n = x.numel();
    const void* xp = x.data_ptr();
    uint8_t* bp = bytes.data_ptr<uint8_t>();
    float* ap = absmax.data_ptr<float>();
    ParallelOverBlocks(op, absmax.numel(), blocksize, [&](int64_t b0, int64_t b1) {
      core::QuantizeBlockwise4(dtype, xp, q, core::Blockwise4Range{n, blocksize, b0, b1}, bp, ap);
    }, kQuantizeCost);
  }

  static void Dequantize(const char* op, const at::Tensor& packed, const at::Tensor& absmax, core::Quant4 q,
                         int64_t blocksize, core::DType out_type, at::Tensor& out) {
    const at::Tensor am = absmax.contiguous();
    const int64_t n = out.numel();
    const float* code16 = core::Code4(q).data();
    const uint8_t* bp = packed.data_ptr<uint8_t>();
    const float* ap = am.data_ptr<float>();
    void* op_out = out.data_ptr();
    ParallelOverBlocks(op, core::NumBlocks(n, blocksize), blocksize, [&](int64_t b0, int64_t b1) {
      core::DequantizeBlockwise4(out_type, bp, ap, code16, core::Blockwise4Range{n, blocksize, b0, b1}, op_out);
    });
  }

  static void Gemv(const char* op, const at::Tensor& A, const at::Tensor& packed, int64_t N, int64_t K,
                   const at::Tensor& absmax, const at::Tensor& code, int64_t blocksize, at::Tensor& out) {
    const at::Tensor am = absmax.contiguous();
    const float* amp = am.data_ptr<float>();
    GemvRows(op, A, packed, N, K, code, out,
             [&](core::DType dtype, const void* ap, const uint8_t* bp, const float* cp, void* outp, int64_t r0,
                 int64_t r1, bool bf16_products) {
               core::Gemv4(dtype, ap, bp, amp, cp, N, K, blocksize, outp, r0, r1, bf16_products);
             });
  }

  // The kernel reads the nested statistics itself, a band of rows' scales at a time (core::Gemv4Nested): no
  // absmax array of the whole weight is made per call.
  static void GemvNested(const char* op, const at::Tensor& A, const at::Tensor& packed, int64_t N, int64_t K,
                         const at::Tensor& absmax, const Nested& nested, const at::Tensor& code, int64_t blocksize,
                         at::Tensor& out) {
    const CpuNested stats(op, absmax, nested);
    GemvRows(op, A, packed, N, K, code, out,
             [&](core::DType dtype, const void* ap, const uint8_t* bp, const float* cp, void* outp, int64_t r0,
                 int64_t r1, bool bf16_products) {
               core::Gemv4Nested(dtype, ap, bp, stats.view, cp, N, K, blocksize, outp, r0, r1, bf16_products);
             });
  }

  // Small batches (up to 32 or 64 rows of A: core::Gemm4SmallRuns) in one pass over the weight's rows for a pass
  // of A's rows, where bnb/core has the kernel (AVX-512, or Highway's vector targets for K a multiple of 128): no
  // dequantized weight is made. W's rows split over threads.
  static c10::optional<at::Tensor> GemmDirect(const char* op, const at::Tensor& A, const at::Tensor& packed,
                                              int64_t N, int64_t K, const at::Tensor& absmax, const Nested& nested,
                                              core::Quant4 q, int64_t blocksize,
                                              const c10::optional<at::Tensor>& bias) {
    const core::DType dtype = FloatDType(op, "A", A.scalar_type());
    const int64_t M = K == 0 ? 0 : A.numel() / K;
    absl::StatusOr<core::CpuSettings> settings = core::CurrentCpuSettings();
    TORCH_CHECK(settings.ok(), "bnb::", op, ": ", settings.status().message());
    if (!core::Gemm4SmallRuns(dtype, M, K, settings->gemv_bf16_products)) {
      return GemmBanded(op, A, packed, N, K, NestedScales(op, absmax, nested).contiguous(), q, blocksize, bias);
    }
    const at::Tensor a = A.contiguous(), am = absmax.contiguous();
    const at::Tensor b = bias.has_value() ? bias->contiguous() : at::Tensor();
    at::Tensor out = EmptyOutput(ShapeWithLast(A, N), A.options());
    c10::optional<CpuNested> stats;
    if (nested.present()) stats.emplace(op, absmax, nested);
    const void* ap = a.data_ptr();
    const uint8_t* bp = packed.data_ptr<uint8_t>();
    const float* amp = am.data_ptr<float>();
    const void* biasp = b.defined() ? b.data_ptr() : nullptr;
    void* outp = out.data_ptr();
    const float* code16 = core::Code4(q).data();
    const core::Gemm4SmallA arranged = core::ArrangeGemm4Small(dtype, ap, M, K, settings->gemv_bf16_products);
    ParallelOverBlocks(op, N, K * M, [&](int64_t n0, int64_t n1) {
      core::Gemm4Small(arranged, bp, amp, stats ? &stats->view : nullptr, code16, N, blocksize, biasp, outp, n0, n1);
    });
    return out;
  }

  // Other batches: W dequantized a band of rows at a time into a per-thread buffer kept between calls, each band
  // multiplied into its columns of the output by addmm (at::linear's own product), so no dequantized weight of the
  // whole is made per call: a fresh one's page faults cost 3-9 ms at 4096x4096, 20-30% of a batch-64 product.
  // 16-bit A where the CPU has no instructions for products in its dtype (core::NativeProducts): the weight's
  // bands, A and the bias in float32, the result rounded once to A's dtype.
  static at::Tensor GemmBanded(const char* op, const at::Tensor& A, const at::Tensor& packed, int64_t N, int64_t K,
                               const at::Tensor& scales, core::Quant4 q, int64_t blocksize,
                               const c10::optional<at::Tensor>& bias) {
    // Bands start on rows whose first element begins a block (multiples of `step`), so each is a 4-bit tensor of
    // its own: its codes start on a byte and its blocks at scales[first block].
    const int64_t step = blocksize / std::gcd(K % blocksize, blocksize);
    const bool widen = !core::NativeProducts(FloatDType(op, "A", A.scalar_type()));
    const at::Tensor a = widen ? A.to(at::kFloat) : A;
    const c10::optional<at::Tensor> b = widen && bias.has_value() ? bias->to(at::kFloat) : bias;
    at::Tensor out = EmptyOutput(ShapeWithLast(a, N), a.options());
    BandedProduct(a, N, K, step, b, out, [&](int64_t n0, int64_t rows, at::Tensor& w) {
      const int64_t b0 = n0 * K / blocksize, blocks = core::NumBlocks(rows * K, blocksize);
      Dequantize(op, packed.narrow(0, n0 * K / 2, core::PackedSize4(rows * K)), scales.narrow(0, b0, blocks), q,
                 blocksize, FloatDType(op, "A", a.scalar_type()), w);
    });
    return widen ? out.to(A.scalar_type()) : out;
  }

  // out (contiguous, A's rows x N) = A @ W.T (+ bias) by bands of W's rows (multiples of `step`), fill(n0, rows, w)
  // writing rows [n0, n0 + rows) of W into w (rows x K, A's dtype). Bands of 16 MB: each band reads all of A again
  // and costs two parallel regions, and bands of 4 MB took 1.2-1.35x F.linear's time where 16 MB took 1.1-1.2x
  // (tools/bench/NOTES.md, 'Dense path: bands of 16 MB').
  template <class Fill>
  static void BandedProduct(const at::Tensor& A, int64_t N, int64_t K, int64_t step,
                            const c10::optional<at::Tensor>& bias, at::Tensor& out, const Fill& fill) {
    constexpr int64_t kBandBytes = int64_t{16} << 20;
    const int64_t M = A.numel() / K;
    const at::Tensor a = A.reshape({M, K});
    const int64_t band = std::max(step, kBandBytes / (K * A.element_size()) / step * step);
    thread_local at::Tensor workspace;
    if (!workspace.defined() || workspace.scalar_type() != A.scalar_type() || workspace.numel() < band * K) {
      workspace = at::empty({band * K}, A.options());
    }
    at::Tensor out_mn = out.view({M, N});
    for (int64_t n0 = 0; n0 < N; n0 += band) {
      const int64_t rows = std::min(band, N - n0);
      at::Tensor w = workspace.narrow(0, 0, rows * K).view({rows, K});
      fill(n0, rows, w);
      const at::Tensor part = bias.has_value() ? at::addmm(bias->narrow(0, n0, rows), a, w.t()) : at::mm(a, w.t());
      out_mn.narrow(1, n0, rows).copy_(part);
    }
  }

  // The packed layout (core::Pack4), tiles split over threads. Any finite or non-finite scales are moved as they
  // are (callers that want gemv_4bit's rule for non-finite ones keep such weights unpacked).
  static void Pack(const char* op, const at::Tensor& packed, int64_t N, int64_t K, const at::Tensor& absmax,
                   int64_t blocksize, at::Tensor& codes, at::Tensor& scales) {
    const at::Tensor am = absmax.contiguous();
    const uint8_t* bp = packed.data_ptr<uint8_t>();
    const float* ap = am.data_ptr<float>();
    uint8_t* cp = codes.data_ptr<uint8_t>();
    float* sp = scales.data_ptr<float>();
    ParallelOverBlocks(op, core::Packed4Tiles(N), core::kPackRows * K, [&](int64_t t0, int64_t t1) {
      core::Pack4(bp, ap, N, K, blocksize, cp, sp, t0, t1);
    });
  }

  static void Unpack(const char* op, const at::Tensor& codes, int64_t N, int64_t K, at::Tensor& out) {
    const uint8_t* cp = codes.data_ptr<uint8_t>();
    uint8_t* bp = out.data_ptr<uint8_t>();
    ParallelOverBlocks(op, core::Packed4Tiles(N), core::kPackRows * K, [&](int64_t t0, int64_t t1) {
      core::Unpack4(cp, N, K, bp, t0, t1);
    });
  }

  // The packed product where bnb/core has a kernel for A's dtype (core::Gemm4PackedMaxRows, or
  // core::Gemm4PackedInt8Runs with int8 activations, which are quantized once per call), tiles split over threads
  // (the blocked kernel: slices of rows times ranges of tiles, as core::Gemm4PackedSplit says); more rows than one
  // call of the kernel takes run as slices of A's rows of equal size, one after another, or, from
  // core::Gemm4PackedDenseFrom rows, the weight is dequantized in bands and multiplied by addmm.
  static bool GemmPacked(const char* op, const at::Tensor& A, const at::Tensor& codes, const at::Tensor& scales,
                         int64_t N, int64_t K, int64_t blocksize, const at::Tensor& code,
                         const c10::optional<at::Tensor>& bias, bool int8_activations, at::Tensor& out) {
    const core::DType dtype = FloatDType(op, "A", A.scalar_type());
    const int64_t M = A.numel() / K;
    absl::StatusOr<core::CpuSettings> settings = core::CurrentCpuSettings();
    TORCH_CHECK(settings.ok(), "bnb::", op, ": ", settings.status().message());
    const bool bf16_products = settings->gemv_bf16_products;
    const int64_t max_rows = core::Gemm4PackedMaxRows(dtype, bf16_products);
    if (int8_activations ? !core::Gemm4PackedInt8Runs() : max_rows == 0) return false;
    const at::Tensor a = A.contiguous(), c = code.contiguous(), cs = codes.contiguous(), ss = scales.contiguous();
    const at::Tensor b = bias.has_value() ? bias->contiguous() : at::Tensor();
    const core::Packed4 w{cs.data_ptr<uint8_t>(), ss.data_ptr<float>(), N, K, blocksize};
    const float* cp = c.data_ptr<float>();
    const int64_t item = static_cast<int64_t>(a.element_size());
    const int64_t dense_from = core::Gemm4PackedDenseFrom(dtype, bf16_products);
    if (!int8_activations && dense_from > 0 && M >= dense_from) {  // the weight in bands, and dense products
      const c10::optional<at::Tensor> bias_c = b.defined() ? c10::optional<at::Tensor>(b) : c10::nullopt;
      BandedProduct(a, N, K, core::kPackRows, bias_c, out, [&](int64_t n0, int64_t rows, at::Tensor& band) {
        char* bp = static_cast<char*>(band.data_ptr());
        const int64_t first = n0 / core::kPackRows;
        ParallelOverBlocks(op, core::Packed4Tiles(rows), core::kPackRows * K, [&](int64_t t0, int64_t t1) {
          core::DequantizePacked4(dtype, w, cp, bp + t0 * core::kPackRows * K * item, first + t0, first + t1);
        });
      });
      return true;
    }
    const void* ap = a.data_ptr();
    const void* biasp = b.defined() ? b.data_ptr() : nullptr;
    void* outp = out.data_ptr();
    if (int8_activations) {
      const std::array<int8_t, 16> values = Int8CodeValuesOf(op, c);
      const core::Int8Activations act = core::QuantizeActivationsInt8(dtype, ap, M, K);
      ParallelOverBlocks(op, core::Packed4Tiles(N), core::kPackRows * K * M, [&](int64_t t0, int64_t t1) {
        core::Gemm4PackedInt8(dtype, act, w, values.data(), biasp, outp, t0, t1);
      });
      return true;
    }
    const int64_t tasks = CpuTasks(*settings);
    const core::Packed4Split split = core::Gemm4PackedSplit(dtype, M, N, tasks, bf16_products);
    if (split.row_parts > 1) {  // tasks over slices of rows and ranges of tiles (only where one call takes all rows)
      const int64_t tiles = core::Packed4Tiles(N), per = (tiles + split.tile_parts - 1) / split.tile_parts;
      at::parallel_for(0, split.row_parts * split.tile_parts, 1, [&](int64_t begin, int64_t end) {
        for (int64_t task = begin; task < end; ++task) {
          const int64_t r0 = task / split.tile_parts * split.row_rows, m = std::min(split.row_rows, M - r0);
          const int64_t t0 = task % split.tile_parts * per, t1 = std::min(tiles, t0 + per);
          if (m <= 0 || t0 >= t1) continue;
          core::Gemm4Packed(dtype, static_cast<const char*>(ap) + r0 * K * item, m, w, cp, biasp,
                            static_cast<char*>(outp) + r0 * N * item, t0, t1, bf16_products);
        }
      });
      return true;
    }
    const int64_t slices = M / max_rows + (M % max_rows != 0), rows = (M + slices - 1) / slices;  // max: no bound
    for (int64_t r0 = 0; r0 < M; r0 += rows) {
      const int64_t m = std::min(rows, M - r0);
      const void* as = static_cast<const char*>(ap) + r0 * K * item;
      void* os = static_cast<char*>(outp) + r0 * N * item;
      ParallelOverBlocks(op, core::Packed4Tiles(N), core::kPackRows * K * m, [&](int64_t t0, int64_t t1) {
        core::Gemm4Packed(dtype, as, m, w, cp, biasp, os, t0, t1, bf16_products);
      });
    }
    return true;
  }

  // Runs rows(dtype, A, B, code, out, r0, r1, bf16_products) over torch's threads, split by rows.
  template <class Rows>
  static void GemvRows(const char* op, const at::Tensor& A, const at::Tensor& packed, int64_t N, int64_t K,
                       const at::Tensor& code, at::Tensor& out, const Rows& rows) {
    const core::DType dtype = FloatDType(op, "A", A.scalar_type());
    const at::Tensor a = A.contiguous(), c = code.contiguous();
    absl::StatusOr<core::CpuSettings> settings = core::CurrentCpuSettings();
    TORCH_CHECK(settings.ok(), "bnb::", op, ": ", settings.status().message());
    const void* ap = a.data_ptr();
    const uint8_t* bp = packed.data_ptr<uint8_t>();
    const float* cp = c.data_ptr<float>();
    void* outp = out.data_ptr();
    ParallelOverBlocks(op, N, K, [&](int64_t r0, int64_t r1) {
      rows(dtype, ap, bp, cp, outp, r0, r1, settings->gemv_bf16_products);
    });
  }
};

}  // namespace

TORCH_LIBRARY_IMPL(bnb, CPU, m) { Ops<Cpu>::Register(m); }

}  // namespace bnb::ops::blockwise4
