#include "bnb/ops/common/output_alloc.h"

#include <sys/mman.h>
#include <unistd.h>

#include "bnb/core/config.h"

namespace bnb::ops {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kAdviseFrom = size_t{8} << 20;  // below this, faults are few and the advice is not worth a syscall

void AdviseHugePages(void* data, size_t bytes) {
  const uintptr_t begin = reinterpret_cast<uintptr_t>(data);
  const uintptr_t first = (begin + kHugePage - 1) & ~(kHugePage - 1);
  const uintptr_t last = (begin + bytes) & ~(kHugePage - 1);
  // Best effort: a kernel without THP returns an error, and the pages stay ordinary ones.
  if (last > first) (void)madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
}

}  // namespace

at::Tensor EmptyOutput(at::IntArrayRef sizes, const at::TensorOptions& options) {
  at::Tensor t = at::empty(sizes, options);
  const size_t bytes = t.nbytes();
  if (t.is_cpu() && bytes >= kAdviseFrom) {
    absl::StatusOr<bool> enabled = bnb::core::Config::Global().GetBool("cpu.huge_pages");
    if (enabled.ok() && *enabled) AdviseHugePages(t.data_ptr(), bytes);
  }
  return t;
}

}  // namespace bnb::ops
