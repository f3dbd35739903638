// The LLM.int8() ops' argument checks (ops.h).
#include "bnb/ops/int8/ops.h"

#include <optional>

namespace bnb::ops::int8 {

std::pair<int64_t, int64_t> CheckQuantizeInput(const char* op, const at::Tensor& A, double threshold) {
  FloatDType(op, "A", A.scalar_type());
  TORCH_CHECK(A.dim() >= 1, "bnb::", op, ": A must have at least one dimension, got a scalar");
  CheckNotEmpty(op, "A", A);
  TORCH_CHECK(threshold >= 0.0, "bnb::", op, ": threshold must be >= 0 (0 finds no outliers), got ", threshold);
  return {NumRows(A), A.size(-1)};
}

std::vector<c10::SymInt> CheckMatmul(const char* op, const at::Tensor& A, const at::Tensor& B) {
  CheckDType(op, "A", A, at::kChar);
  CheckDType(op, "B", B, at::kChar);
  TORCH_CHECK(A.dim() >= 1, "bnb::", op, ": A must have at least one dimension, got a scalar");
  TORCH_CHECK(B.dim() == 2, "bnb::", op, ": B must be [N, K], got shape ", B.sym_sizes());
  TORCH_CHECK(A.sym_size(-1) == B.sym_size(1), "bnb::", op, ": A has ", A.sym_size(-1), " columns but B ",
              B.sym_sizes(), " has ", B.sym_size(1), "; B must be [N, K] with K = A's last dimension");
  TORCH_CHECK(A.sym_size(-1) <= kMaxK, "bnb::", op, ": K = ", A.sym_size(-1), " is too long for int32 sums (at most ",
              kMaxK, ")");
  CheckSameDevice(op, "B", B, A);
  std::vector<c10::SymInt> shape(A.sym_sizes().begin(), A.sym_sizes().end() - 1);
  shape.push_back(B.sym_size(0));
  return shape;
}

c10::ScalarType CheckDequantizeProduct(const char* op, const at::Tensor& like, const c10::SymInt& rows,
                                       const c10::SymInt& n, const at::Tensor& row_stats, const at::Tensor& col_stats,
                                       c10::optional<c10::ScalarType> dtype, const c10::optional<at::Tensor>& bias) {
  for (const auto& [name, stats, count, why] :
       {std::tuple{"row_stats", &row_stats, rows, "one per row of A"},
        std::tuple{"col_stats", &col_stats, n, "one per output column"}}) {
    CheckDType(op, name, *stats, at::kFloat);
    CheckNumel(op, name, *stats, count, why);
    CheckSameDevice(op, name, *stats, like);
  }
  const c10::ScalarType out_type = dtype.value_or(at::kHalf);
  FloatDType(op, "dtype", out_type);
  if (bias.has_value()) {
    FloatDType(op, "bias", bias->scalar_type());
    TORCH_CHECK(bias->dim() == 1 && bias->sym_size(0) == n, "bnb::", op, ": bias must be a vector of ", n,
                " values, got shape ", bias->sym_sizes());
    CheckSameDevice(op, "bias", *bias, like);
  }
  return out_type;
}

void CheckDequantizeRows(const char* op, const at::Tensor& A, const at::Tensor& stats) {
  CheckDType(op, "A", A, at::kChar);
  TORCH_CHECK(A.dim() >= 1, "bnb::", op, ": A must have at least one dimension, got a scalar");
  CheckDType(op, "stats", stats, at::kFloat);
  CheckNumel(op, "stats", stats, SymRows(A), "one per row of A");
  CheckSameDevice(op, "stats", stats, A);
}

namespace {

// The outlier columns this thread's quantize returned last (they lie in [0, bound)), as long as that tensor lives,
// and its version then. Inference tensors keep no version (they may change in place unseen): none is recorded.
struct QuantizedColumns {
  std::optional<c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>> tensor;
  int64_t version = 0;
  int64_t bound = 0;
};
thread_local QuantizedColumns last_quantized;

// Whether cols is still the tensor the last quantize returned, unchanged, with indices below K.
bool FromQuantize(const at::Tensor& cols, int64_t K) {
  const QuantizedColumns& q = last_quantized;
  return q.tensor.has_value() && q.bound <= K && !cols.is_inference() &&
         q.tensor->lock().get() == cols.unsafeGetTensorImpl() && cols._version() == q.version;
}

}  // namespace

void RecordQuantizedColumns(const at::Tensor& cols, int64_t K) {
  if (cols.is_inference()) {
    last_quantized = {};
    return;
  }
  last_quantized = {c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>(cols.getIntrusivePtr()),
                    cols._version(), K};
}

at::Tensor CheckedOutlierColumns(const char* op, const c10::optional<at::Tensor>& cols, const at::Tensor& A) {
  if (!cols.has_value()) return at::empty({0}, A.options().dtype(at::kLong));
  CheckDType(op, "outlier_cols", *cols, at::kLong);
  TORCH_CHECK(cols->dim() == 1, "bnb::", op, ": outlier_cols must be a vector of column indices, got shape ",
              cols->sizes());
  const int64_t K = A.size(-1);
  // Read here: index_select on a GPU would fail in a device-side assert, which ends the process. On the CPU a loop
  // (two reductions and their reads cost ~20 us a call, a tenth of a batch-1 layer). On a GPU the read waits for
  // the device, which Linear8bitLt's forward would do at every call: the columns its quantize just returned (this
  // thread's last, unchanged since) are known to lie inside.
  if (FromQuantize(*cols, K)) return *cols;
  bool inside = true;
  if (cols->is_cpu()) {
    const at::Tensor c = cols->contiguous();
    const int64_t* p = c.data_ptr<int64_t>();
    for (int64_t i = 0; i < c.numel(); ++i) inside = inside && p[i] >= 0 && p[i] < K;
  } else if (cols->numel() > 0) {
    const at::Tensor bounds = at::stack({cols->min(), cols->max()}).cpu();  // one wait for the device, not two
    const int64_t* b = bounds.data_ptr<int64_t>();
    inside = b[0] >= 0 && b[1] < K;
  }
  TORCH_CHECK(inside, "bnb::", op, ": outlier_cols holds an index outside [0, ", K, ")");
  return *cols;
}

}  // namespace bnb::ops::int8
