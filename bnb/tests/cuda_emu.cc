#include "bnb/tests/cuda_emu.h"

#include <signal.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <cstdlib>
#include <vector>

namespace bnb::emu {
namespace {

constexpr size_t kStackBytes = 256 * 1024;

enum class State { kRunnable, kAtCtaBarrier, kAtWarpBarrier, kDone };

struct Fiber {
  ucontext_t ctx;
  std::vector<char> stack;
  State state = State::kRunnable;
};

// The CTA running now (one at a time, on the calling OS thread).
struct Cta {
  std::vector<Fiber> fibers;
  ucontext_t main;
  unsigned current = 0;
  const std::function<void()>* body = nullptr;
  std::vector<uint64_t> slots;
  std::vector<int> predicates;
};
Cta cta;

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "cuda_emu: %s (CTA %u, %u)\n", what, block_idx.x, block_idx.y);
  std::abort();
}

void Entry() {
  (*cta.body)();
  cta.fibers[cta.current].state = State::kDone;  // uc_link returns to the scheduler
}

void Yield(State s) {
  Fiber& f = cta.fibers[cta.current];
  f.state = s;
  swapcontext(&f.ctx, &cta.main);
}

void RunCta(unsigned threads) {
  cta.fibers.resize(threads);
  for (unsigned i = 0; i < threads; ++i) {
    Fiber& f = cta.fibers[i];
    f.stack.resize(kStackBytes);
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = f.stack.data();
    f.ctx.uc_stack.ss_size = f.stack.size();
    f.ctx.uc_link = &cta.main;
    makecontext(&f.ctx, Entry, 0);
    f.state = State::kRunnable;
  }
  // Each round runs the runnable threads in a fresh random order (seeded: a failure reproduces), so a kernel whose
  // result depends on the order of its threads' accesses between two barriers (a race) shows it.
  std::vector<unsigned> order(threads);
  for (unsigned i = 0; i < threads; ++i) order[i] = i;
  std::mt19937 rng(0x5eed0000u + block_idx.y * 65536u + block_idx.x);
  for (;;) {
    std::shuffle(order.begin(), order.end(), rng);
    for (unsigned i : order) {
      if (cta.fibers[i].state != State::kRunnable) continue;
      cta.current = i;
      thread_idx = Dim3{i, 0, 0};
      swapcontext(&cta.main, &cta.fibers[i].ctx);
    }
    // Nothing runnable: release the barriers whose threads have all arrived.
    unsigned done = 0, at_cta = 0;
    bool released = false;
    for (unsigned w = 0; w < threads / 32; ++w) {
      unsigned at_warp = 0, lane_done = 0;
      for (unsigned l = 0; l < 32; ++l) {
        const State s = cta.fibers[w * 32 + l].state;
        at_warp += s == State::kAtWarpBarrier;
        lane_done += s == State::kDone;
      }
      if (at_warp == 32) {
        for (unsigned l = 0; l < 32; ++l) cta.fibers[w * 32 + l].state = State::kRunnable;
        released = true;
      } else if (at_warp > 0 && lane_done > 0) {
        Fail("a shuffle that some lanes of the warp never reach");
      }
    }
    for (const Fiber& f : cta.fibers) {
      done += f.state == State::kDone;
      at_cta += f.state == State::kAtCtaBarrier;
    }
    if (done == threads) return;
    if (at_cta == threads) {
      for (Fiber& f : cta.fibers) f.state = State::kRunnable;
      released = true;
    } else if (at_cta > 0 && done > 0) {
      Fail("__syncthreads that some threads never reach");
    }
    if (!released) Fail("deadlock: threads wait at different barriers");
  }
}

// A fault inside a kernel (a guard page of a GuardedBuffer, or any other stray access) names the CUDA thread before
// the process ends, as a GPU would report an illegal address. The handler runs on a stack of its own: the fiber's
// may be what failed.
void OnFault(int sig) {
  char msg[160];
  const int n = std::snprintf(msg, sizeof(msg),
                              "cuda_emu: signal %d in CTA (%u, %u), thread %u: an access outside the kernel's buffers "
                              "(a GPU reports an illegal address)\n",
                              sig, block_idx.x, block_idx.y, thread_idx.x);
  if (n > 0) (void)!write(2, msg, static_cast<size_t>(n));
  _exit(128 + sig);
}

void InstallFaultHandler() {
  static bool installed = false;
  if (installed) return;
  installed = true;
  static std::vector<char> alt(64 * 1024);
  stack_t ss{};
  ss.ss_sp = alt.data();
  ss.ss_size = alt.size();
  sigaltstack(&ss, nullptr);
  struct sigaction sa {};
  sa.sa_handler = OnFault;
  sa.sa_flags = SA_ONSTACK;
  sigaction(SIGSEGV, &sa, nullptr);
  sigaction(SIGBUS, &sa, nullptr);
}

}  // namespace

void RunGrid(Dim3 grid, unsigned threads, const std::function<void()>& body) {
  if (threads == 0 || threads % 32 != 0 || threads > 1024) Fail("threads per CTA must be a multiple of 32 to 1024");
  InstallFaultHandler();
  grid_dim = Dim3{grid.x, grid.y == 0 ? 1 : grid.y, 1};
  block_dim = Dim3{threads, 1, 1};
  cta.body = &body;
  cta.slots.assign(threads, 0);
  cta.predicates.assign(threads, 0);
  for (unsigned y = 0; y < grid_dim.y; ++y) {
    for (unsigned x = 0; x < grid_dim.x; ++x) {
      block_idx = Dim3{x, y, 0};
      RunCta(threads);
    }
  }
}

void SyncThreads() { Yield(State::kAtCtaBarrier); }

int SyncThreadsAnd(int predicate) {
  cta.predicates[cta.current] = predicate != 0;
  SyncThreads();
  int all = 1;
  for (int p : cta.predicates) all &= p;
  SyncThreads();  // every thread has read them before any writes the next call's
  return all;
}

uint64_t ShuffleXor(uint64_t bits, int lane_mask) {
  const unsigned me = cta.current;
  cta.slots[me] = bits;
  Yield(State::kAtWarpBarrier);
  const uint64_t r = cta.slots[(me & ~31u) | ((me & 31u) ^ (static_cast<unsigned>(lane_mask) & 31u))];
  Yield(State::kAtWarpBarrier);
  return r;
}

GuardedBuffer::GuardedBuffer(size_t bytes, size_t misalign) : bytes_(bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t span = (bytes + misalign + 15) / 16 * 16;  // from a 16-byte boundary to the end, rounded up
  map_bytes_ = (span + page - 1) / page * page + page;     // and one inaccessible page after it
  map_ = mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map_ == MAP_FAILED) Fail("mmap of a guarded buffer failed");
  auto* guard = static_cast<unsigned char*>(map_) + map_bytes_ - page;
  if (mprotect(guard, page, PROT_NONE) != 0) Fail("mprotect of a guard page failed");
  data_ = guard - span + misalign;
}

GuardedBuffer::~GuardedBuffer() { munmap(map_, map_bytes_); }

void CheckAligned(const void* p, unsigned bytes, const char* what) {
  if (reinterpret_cast<uintptr_t>(p) % bytes != 0) {
    std::fprintf(stderr, "cuda_emu: %s at %p, not %u-byte aligned (a GPU faults)\n", what, p, bytes);
    std::abort();
  }
}

}  // namespace bnb::emu
