#include "bnb/ops/common/output_cache.h"

#include <pthread.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

#include "bnb/core/config.h"

namespace bnb::ops {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kHugePage = size_t{2} << 20;
// A cached block unused this long is unmapped by the next allocation or free: memory goes back soon after a burst of
// calls, while a loop of calls (milliseconds apart) keeps reusing it.
constexpr auto kIdleRelease = std::chrono::seconds(10);
// A request takes a cached block at most a quarter larger than itself: a small output does not pin a large block.
constexpr size_t kFitSlackDivisor = 4;

struct Mapping {
  void* base = nullptr;
  size_t bytes = 0;
};

struct Cached {
  Mapping m;
  Clock::time_point freed;
};

void Unmap(const Mapping& m) { (void)munmap(m.base, m.bytes); }

// `bytes` (a multiple of kHugePage) of fresh anonymous memory, 2 MB aligned so that huge pages can back all of it;
// null when the system has no more.
void* MapAligned(size_t bytes) {
  void* p = mmap(nullptr, bytes + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(p);
  const uintptr_t aligned = (begin + kHugePage - 1) & ~(kHugePage - 1);
  if (aligned > begin) (void)munmap(p, aligned - begin);
  const uintptr_t end = aligned + bytes, mapped_end = begin + bytes + kHugePage;
  if (mapped_end > end) (void)munmap(reinterpret_cast<void*>(end), mapped_end - end);
  return reinterpret_cast<void*>(aligned);
}

class OutputCache final : public c10::Allocator {
 public:
  static OutputCache& Instance() {
    // Never destroyed: tensors may be freed during process exit, after static destructors ran.
    static OutputCache* const cache = [] {
      auto* c = new OutputCache();
      // A fork while another thread holds the lock would leave the child's cache locked forever.
      pthread_atfork([] { Instance().mu_.lock(); }, [] { Instance().mu_.unlock(); },
                     [] { Instance().mu_.unlock(); });
      return c;
    }();
    return *cache;
  }

  c10::DataPtr allocate(size_t n) override {
    // Resizes reach here too (the storage keeps its allocator): small sizes go to torch's allocator.
    if (n < kOutputCacheFrom) return c10::GetCPUAllocator()->allocate(n);
    const bool huge_pages = ReadKnobs();
    const size_t bytes = (n + kHugePage - 1) & ~(kHugePage - 1);
    std::vector<Mapping> drop;
    Mapping m = Take(bytes, drop);
    for (const Mapping& d : drop) Unmap(d);
    if (m.base == nullptr) m = MapFresh(bytes, huge_pages);
    return {m.base, new Mapping(m), &OutputCache::Return, c10::Device(c10::kCPU)};
  }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

  OutputCacheStats Stats() {
    std::lock_guard<std::mutex> lock(mu_);
    return {static_cast<int64_t>(cached_bytes_), static_cast<int64_t>(cached_.size()), reuses_, mappings_};
  }

  void ReleaseAll() {
    std::deque<Cached> all;
    {
      std::lock_guard<std::mutex> lock(mu_);
      all.swap(cached_);
      cached_bytes_ = 0;
    }
    for (const Cached& c : all) Unmap(c.m);
  }

 private:
  // The knobs, read as an allocation starts: the cap kept for the deleter (which may run where reading the
  // configuration is unsafe), and whether fresh memory is advised as huge pages.
  bool ReadKnobs() {
    bnb::core::Config& config = bnb::core::Config::Global();
    const absl::StatusOr<int64_t> mb = config.GetInt("cpu.output_cache_mb");
    cap_bytes_.store(mb.ok() ? static_cast<size_t>(*mb) << 20 : 0, std::memory_order_relaxed);
    const absl::StatusOr<bool> huge = config.GetBool("cpu.huge_pages");
    return huge.ok() && *huge;
  }

  // The smallest cached block that fits `bytes` within the slack (base null if none); stale blocks go to `drop`.
  Mapping Take(size_t bytes, std::vector<Mapping>& drop) {
    std::lock_guard<std::mutex> lock(mu_);
    DropStale(Clock::now(), drop);
    TrimTo(cap_bytes_.load(std::memory_order_relaxed), drop);  // the knob may have been lowered since
    auto best = cached_.end();
    for (auto it = cached_.begin(); it != cached_.end(); ++it) {
      const size_t b = it->m.bytes;
      if (b >= bytes && b - bytes <= bytes / kFitSlackDivisor && (best == cached_.end() || b < best->m.bytes)) {
        best = it;
      }
    }
    if (best == cached_.end()) return {};
    const Mapping m = best->m;
    cached_.erase(best);
    cached_bytes_ -= m.bytes;
    ++reuses_;
    return m;
  }

  Mapping MapFresh(size_t bytes, bool huge_pages) {
    void* p = MapAligned(bytes);
    if (p == nullptr) {  // memory held here is the first to give back
      ReleaseAll();
      p = MapAligned(bytes);
    }
    TORCH_CHECK_WITH(OutOfMemoryError, p != nullptr, "bnb: could not allocate a CPU output of ", bytes,
                     " bytes (mmap failed: the system is out of memory or the process hit its address-space limit)");
    // Best effort: a kernel without THP refuses, and the pages stay ordinary ones. Changes no value.
    if (huge_pages) (void)madvise(p, bytes, MADV_HUGEPAGE);
    std::lock_guard<std::mutex> lock(mu_);
    ++mappings_;
    return {p, bytes};
  }

  static void Return(void* ctx) {
    std::unique_ptr<Mapping> m(static_cast<Mapping*>(ctx));
    Instance().Put(*m);
  }

  void Put(const Mapping& m) {
    std::vector<Mapping> drop;
    const size_t cap = cap_bytes_.load(std::memory_order_relaxed);
    if (m.bytes > cap) {
      drop.push_back(m);
    } else {
      std::lock_guard<std::mutex> lock(mu_);
      const Clock::time_point now = Clock::now();
      DropStale(now, drop);
      cached_.push_back({m, now});
      cached_bytes_ += m.bytes;
      TrimTo(cap, drop);
    }
    for (const Mapping& d : drop) Unmap(d);
  }

  // Caller holds mu_. cached_ is in the order blocks were freed, so the stale ones lead.
  void DropStale(Clock::time_point now, std::vector<Mapping>& drop) {
    while (!cached_.empty() && now - cached_.front().freed > kIdleRelease) {
      drop.push_back(cached_.front().m);
      cached_bytes_ -= cached_.front().m.bytes;
      cached_.pop_front();
    }
  }

  // Caller holds mu_. Oldest first.
  void TrimTo(size_t cap, std::vector<Mapping>& drop) {
    while (cached_bytes_ > cap) {
      drop.push_back(cached_.front().m);
      cached_bytes_ -= cached_.front().m.bytes;
      cached_.pop_front();
    }
  }

  std::mutex mu_;
  std::deque<Cached> cached_;
  size_t cached_bytes_ = 0;
  int64_t reuses_ = 0, mappings_ = 0;
  std::atomic<size_t> cap_bytes_{0};
};

}  // namespace

c10::Allocator* OutputCacheAllocator() { return &OutputCache::Instance(); }

OutputCacheStats GetOutputCacheStats() { return OutputCache::Instance().Stats(); }

void ReleaseOutputCache() { OutputCache::Instance().ReleaseAll(); }

}  // namespace bnb::ops
