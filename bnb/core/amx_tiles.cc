#include "bnb/core/amx_tiles.h"

#if defined(__x86_64__) && defined(__linux__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>

namespace bnb::core {
namespace {

constexpr int kArchReqXcompPerm = 0x1023;
constexpr int kXfeatureXtiledata = 18;

bool AskForTileState() {
  return __builtin_cpu_supports("amx-tile") && syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

struct alignas(64) TileConfig {
  uint8_t palette;
  uint8_t start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};

}  // namespace

bool AmxTileStateGranted() {
  static const bool granted = AskForTileState();
  return granted;
}

__attribute__((target("amx-tile"))) void ConfigureTiles(const uint8_t (&rows)[8]) {
  TileConfig config;
  std::memset(&config, 0, sizeof(config));
  config.palette = 1;
  for (int i = 0; i < 8; ++i) {
    config.colsb[i] = 64;
    config.rows[i] = rows[i];
  }
  _tile_loadconfig(&config);
}

__attribute__((target("amx-tile"))) void ReleaseTiles() { _tile_release(); }

}  // namespace bnb::core

#else

#include <cstdlib>

namespace bnb::core {
bool AmxTileStateGranted() { return false; }
void ConfigureTiles(const uint8_t (&)[8]) { std::abort(); }  // never called: no tile state granted
void ReleaseTiles() { std::abort(); }
}  // namespace bnb::core

#endif
