#include "bnb/core/amx_state.h"

#if defined(__x86_64__) && defined(__linux__) && (defined(__GNUC__) || defined(__clang__))
#include <sys/syscall.h>
#include <unistd.h>

namespace bnb::core {
namespace {

constexpr int kArchReqXcompPerm = 0x1023;
constexpr int kXfeatureXtiledata = 18;

bool AskForTileState() {
  return __builtin_cpu_supports("amx-tile") && syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

}  // namespace

bool AmxTileStateGranted() {
  static const bool granted = AskForTileState();
  return granted;
}

}  // namespace bnb::core

#else

namespace bnb::core {
bool AmxTileStateGranted() { return false; }
}  // namespace bnb::core

#endif
