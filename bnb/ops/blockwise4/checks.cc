// The 4-bit ops' argument checks and shape rules (ops.h).
#include "absl/strings/str_cat.h"
#include "bnb/core/gemm4_packed.h"
#include "bnb/ops/blockwise4/ops.h"

namespace bnb::ops::blockwise4 {
namespace {

// shapeB of the products that take a whole matrix: [N, K], both positive.
void CheckMatrixShape(const char* op, at::IntArrayRef shapeB) {
  TORCH_CHECK(shapeB.size() == 2 && shapeB[0] > 0 && shapeB[1] > 0, "bnb::", op, ": shapeB must be [N, K] with ",
              "N, K > 0, got ", shapeB);
}

// shapeB as the packed layout takes it (core::Packed4Fits), with what is wrong named.
void CheckPackedShape(const char* op, at::IntArrayRef shapeB, int64_t blocksize) {
  CheckMatrixShape(op, shapeB);
  ThrowIfError(op, core::CheckBlocksize(blocksize));
  TORCH_CHECK(core::Packed4Fits(shapeB[0], shapeB[1], blocksize), "bnb::", op, ": the packed layout takes K (",
              shapeB[1], ") a multiple of ", core::kPackCols, " and of blocksize, and blocksize >= ", core::kPackCols,
              "; got shapeB ", shapeB, ", blocksize ", blocksize);
}

c10::SymInt ShapeNumel(const char* op, const char* arg, at::IntArrayRef shape) {
  const int64_t n = CheckedNumel(op, arg, shape);
  TORCH_CHECK(n > 0, "bnb::", op, ": ", arg, " ", shape, " is empty; there is nothing to dequantize");
  return n;
}

// The dtypes packed codes may be viewed as: bitsandbytes' (uint8, or a float type that FSDP shards like the rest).
void CheckStorage(const char* op, const char* arg, c10::ScalarType storage) {
  TORCH_CHECK(storage == at::kByte || storage == at::kBFloat16 || storage == at::kHalf || storage == at::kFloat,
              "bnb::", op, ": ", arg, " must be uint8, bfloat16, float16 or float32 (packed codes), got ",
              DTypeName{storage});
}

void CheckPackedBytes(const char* op, const char* arg, const at::Tensor& t, const c10::SymInt& n) {
  CheckStorage(op, arg, t.scalar_type());
  const c10::SymInt bytes = t.sym_numel() * static_cast<int64_t>(t.element_size());
  TORCH_CHECK(bytes == (n + 1) / 2, "bnb::", op, ": ", arg, " holds ", bytes, " bytes of packed codes; ", n,
              " values need ", (n + 1) / 2);
}

void CheckAbsmax(const char* op, const at::Tensor& absmax, const at::Tensor& A, const c10::SymInt& n,
                 int64_t blocksize) {
  CheckDType(op, "absmax", absmax, at::kFloat);
  CheckNumel(op, "absmax", absmax, NumBlocks(n, blocksize), "one per block");
  CheckSameDevice(op, "absmax", absmax, A);
}

// A's sizes with the last replaced by N: the output shape of gemv_4bit and gemm_4bit (symbolic under compile).
std::vector<c10::SymInt> RowsTimesN(const at::Tensor& A, int64_t N) {
  std::vector<c10::SymInt> shape(A.sym_sizes().begin(), A.sym_sizes().end() - 1);
  shape.emplace_back(N);
  return shape;
}

}  // namespace

core::Quant4 ParseQuantType(const char* op, c10::string_view quant_type) {
  auto q = core::ParseQuant4(std::string(quant_type));
  ThrowIfError(op, q.status());
  return *q;
}

c10::SymInt PackedElements(const char* op, const c10::SymInt& n, c10::ScalarType storage, const char* arg) {
  CheckStorage(op, arg, storage);
  const int64_t itemsize = static_cast<int64_t>(c10::elementSize(storage));
  const c10::SymInt bytes = (n + 1) / 2;
  TORCH_CHECK(bytes % itemsize == 0, "bnb::", op, ": ", n, " values pack into ", bytes, " bytes, not a whole number ",
              "of ", DTypeName{storage}, " (", itemsize, " bytes each); use uint8 storage or a size that divides");
  return bytes / itemsize;
}

std::pair<core::DType, core::Quant4> CheckQuantize(const char* op, const at::Tensor& A, int64_t blocksize,
                                                   c10::string_view quant_type) {
  const core::DType dtype = FloatDType(op, "A", A.scalar_type());
  ThrowIfError(op, core::CheckBlocksize(blocksize));
  const core::Quant4 q = ParseQuantType(op, quant_type);
  CheckNotEmpty(op, "A", A);
  return {dtype, q};
}

void CheckQuantizeInto(const char* op, const at::Tensor& A, int64_t blocksize, const at::Tensor& out,
                       const at::Tensor& absmax) {
  const std::vector<c10::SymInt> packed_shape{PackedElements(op, A.sym_numel(), out.scalar_type(), "out's dtype"),
                                              1};
  CheckOut(op, out, packed_shape, "quantize_4bit's packed shape for its dtype", out.scalar_type(), A);
  CheckAbsmax(op, absmax, A, A.sym_numel(), blocksize);
  CheckWritable(op, "absmax", absmax);
}

core::DType CheckDequantize(const char* op, const at::Tensor& A, const at::Tensor& absmax, int64_t blocksize,
                            c10::string_view quant_type, at::IntArrayRef shape, c10::ScalarType dtype) {
  const core::DType out_type = FloatDType(op, "dtype", dtype);
  ThrowIfError(op, core::CheckBlocksize(blocksize));
  ParseQuantType(op, quant_type);
  const c10::SymInt n = ShapeNumel(op, "shape", shape);
  CheckPackedBytes(op, "A", A, n);
  CheckAbsmax(op, absmax, A, n, blocksize);
  return out_type;
}

void CheckScales(const char* op, const c10::SymInt& n, int64_t blocksize, const at::Tensor& absmax,
                 const Nested& nested, const at::Tensor& A) {
  CheckDType(op, "absmax", absmax, at::kFloat);
  // A meta argument routes the call to the Meta kernel, which would otherwise return an empty tensor on A's device.
  CheckSameDevice(op, "absmax", absmax, A);
  for (const auto& [name, t] : {std::pair{"absmax_8bit", &nested.absmax_8bit},
                                std::pair{"absmax_code", &nested.absmax_code},
                                std::pair{"absmax_offset", &nested.absmax_offset}}) {
    if (t->has_value()) CheckSameDevice(op, name, **t, A);
  }
  if (nested.present()) {
    // Nested statistics: the per-block scales are 8-bit codes (blocksize 256) of absmax_code, plus the offset.
    TORCH_CHECK(nested.absmax_code.has_value() && nested.absmax_offset.has_value(), "bnb::", op,
                ": absmax_8bit needs absmax_code and absmax_offset too");
    CheckDType(op, "absmax_8bit", *nested.absmax_8bit, at::kByte);
    CheckNumel(op, "absmax_8bit", *nested.absmax_8bit, NumBlocks(n, blocksize), "one per block of B");
    CheckNumel(op, "absmax", absmax, NumBlocks(NumBlocks(n, blocksize), core::kNestedBlocksize),
               "one per 256 entries of absmax_8bit");
    CheckDType(op, "absmax_code", *nested.absmax_code, at::kFloat);
    CheckNumel(op, "absmax_code", *nested.absmax_code, 256, "one value per 8-bit code");
    TORCH_CHECK(nested.absmax_offset->sym_numel() == 1, "bnb::", op, ": absmax_offset must be one value, got shape ",
                nested.absmax_offset->sym_sizes());
  } else {
    TORCH_CHECK(!nested.absmax_code.has_value() && !nested.absmax_offset.has_value(), "bnb::", op,
                ": absmax_code and absmax_offset describe nested statistics and go with absmax_8bit, which is "
                "missing");
    CheckNumel(op, "absmax", absmax, NumBlocks(n, blocksize), "one per block of B");
  }
}

std::vector<c10::SymInt> CheckGemv(const char* op, const at::Tensor& A, const at::Tensor& B, at::IntArrayRef shapeB,
                                   const at::Tensor& absmax, const at::Tensor& code, int64_t blocksize,
                                   const Nested& nested) {
  FloatDType(op, "A", A.scalar_type());
  TORCH_CHECK(A.dim() >= 1 && A.sym_numel() == A.sym_size(-1), "bnb::", op, ": A must be a single row (leading ",
              "dimensions of 1), got shape ", A.sym_sizes());
  CheckMatrixShape(op, shapeB);
  TORCH_CHECK(A.sym_size(-1) == shapeB[1], "bnb::", op, ": A has ", A.sym_size(-1), " columns but shapeB ",
              shapeB, " needs ", shapeB[1]);
  ThrowIfError(op, core::CheckBlocksize(blocksize));
  const c10::SymInt n = CheckedNumel(op, "shapeB", shapeB);
  CheckPackedBytes(op, "B", B, n);
  CheckSameDevice(op, "B", B, A);
  CheckScales(op, n, blocksize, absmax, nested, A);
  CheckDType(op, "code", code, at::kFloat);
  CheckNumel(op, "code", code, core::kCodebook4Size, "the 16 values of the 4-bit type");
  CheckSameDevice(op, "code", code, A);
  return RowsTimesN(A, shapeB[0]);
}

std::vector<c10::SymInt> CheckGemm(const char* op, const at::Tensor& A, const at::Tensor& B, at::IntArrayRef shapeB,
                                   const at::Tensor& absmax, int64_t blocksize, c10::string_view quant_type,
                                   const c10::optional<at::Tensor>& bias, const c10::optional<at::Tensor>& absmax_8bit,
                                   const c10::optional<at::Tensor>& absmax_code,
                                   const c10::optional<at::Tensor>& absmax_offset) {
  FloatDType(op, "A", A.scalar_type());
  TORCH_CHECK(shapeB.size() == 2, "bnb::", op, ": shapeB must be [N, K], got ", shapeB);
  TORCH_CHECK(A.dim() >= 1 && A.sym_size(-1) == shapeB[1], "bnb::", op, ": A's last dimension (",
              A.sym_sizes(), ") must equal shapeB[1] = ", shapeB[1]);
  ThrowIfError(op, core::CheckBlocksize(blocksize));
  ParseQuantType(op, quant_type);
  const c10::SymInt n = ShapeNumel(op, "shapeB", shapeB);
  CheckPackedBytes(op, "B", B, n);
  // A meta argument routes the call to the Meta kernel, which would otherwise return an empty tensor on A's device.
  CheckSameDevice(op, "B", B, A);
  if (bias.has_value()) CheckSameDevice(op, "bias", *bias, A);
  CheckScales(op, n, blocksize, absmax, Nested{absmax_8bit, absmax_code, absmax_offset}, A);
  if (bias.has_value()) {
    TORCH_CHECK(bias->dim() == 1 && bias->sym_numel() == shapeB[0], "bnb::", op, ": bias must be a vector of ",
                shapeB[0], " values, got shape ", bias->sym_sizes());
    CheckDType(op, "bias", *bias, A.scalar_type());  // as F.linear: no silent conversion
  }
  return RowsTimesN(A, shapeB[0]);
}

void CheckPack(const char* op, const at::Tensor& B, at::IntArrayRef shapeB, const at::Tensor& absmax,
               int64_t blocksize) {
  CheckPackedShape(op, shapeB, blocksize);
  const c10::SymInt n = CheckedNumel(op, "shapeB", shapeB);
  CheckPackedBytes(op, "B", B, n);
  CheckDType(op, "absmax", absmax, at::kFloat);
  CheckNumel(op, "absmax", absmax, n / blocksize, "one scale per block (nested statistics dequantized first)");
  CheckSameDevice(op, "absmax", absmax, B);
}

void CheckUnpack(const char* op, const at::Tensor& codes, at::IntArrayRef shapeB) {
  CheckMatrixShape(op, shapeB);
  TORCH_CHECK(shapeB[1] % core::kPackCols == 0, "bnb::", op, ": the packed layout takes K (", shapeB[1],
              ") a multiple of ", core::kPackCols, "; got shapeB ", shapeB);
  CheckDType(op, "codes", codes, at::kByte);
  CheckNumel(op, "codes", codes, core::Packed4CodeBytes(shapeB[0], shapeB[1]), "the packed layout's bytes (pack_4bit)");
}

std::vector<c10::SymInt> CheckGemmPacked(const char* op, const at::Tensor& A, const at::Tensor& codes,
                                         const at::Tensor& scales, at::IntArrayRef shapeB, int64_t blocksize,
                                         const at::Tensor& code, const c10::optional<at::Tensor>& bias) {
  FloatDType(op, "A", A.scalar_type());
  CheckPackedShape(op, shapeB, blocksize);
  const int64_t N = shapeB[0], K = shapeB[1];
  TORCH_CHECK(A.dim() >= 1 && A.sym_size(-1) == K, "bnb::", op, ": A's last dimension (", A.sym_sizes(),
              ") must equal shapeB[1] = ", K);
  CheckDType(op, "codes", codes, at::kByte);
  CheckNumel(op, "codes", codes, core::Packed4CodeBytes(N, K), "the packed layout's bytes (pack_4bit)");
  CheckSameDevice(op, "codes", codes, A);
  CheckDType(op, "scales", scales, at::kFloat);
  CheckNumel(op, "scales", scales, core::Packed4ScaleCount(N, K, blocksize), "the packed layout's scales (pack_4bit)");
  CheckSameDevice(op, "scales", scales, A);
  CheckDType(op, "code", code, at::kFloat);
  CheckNumel(op, "code", code, core::kCodebook4Size, "the 16 values of the 4-bit type");
  CheckSameDevice(op, "code", code, A);
  if (bias.has_value()) {
    CheckSameDevice(op, "bias", *bias, A);
    TORCH_CHECK(bias->dim() == 1 && bias->sym_numel() == N, "bnb::", op, ": bias must be a vector of ", N,
                " values, got shape ", bias->sym_sizes());
    CheckDType(op, "bias", *bias, A.scalar_type());
  }
  return RowsTimesN(A, N);
}

std::array<int8_t, 16> Int8CodeValuesOf(const char* op, const at::Tensor& code) {
  const at::Tensor c = code.to(at::kCPU).contiguous();
  std::array<int8_t, 16> values;
  int bad = 0;
  TORCH_CHECK(core::Int8CodeValues(c.data_ptr<float>(), values.data(), &bad), "bnb::", op,
              ": int8_activations takes code values in [-1, 1] (each becomes round(127 * value)), got code[", bad,
              "] = ", c.data_ptr<float>()[bad]);
  return values;
}

}  // namespace bnb::ops::blockwise4
