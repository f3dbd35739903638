#include "bnb/jit/cuda/nvrtc.h"

#include <dirent.h>
#include <dlfcn.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bnb/core/config.h"
#include "bnb/jit/cuda/symbols.h"

namespace bnb::jit::cuda {
namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

std::string DirOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string() : path.substr(0, slash);
}

// NVRTC opens libnvrtc-builtins.so.<major>.<minor> by name; preloading it from `dir` makes a copy of NVRTC that
// the loader cannot find by itself (a pip wheel, a relocated toolkit) work.
void PreloadBuiltins(const std::string& dir) {
  if (dir.empty()) return;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name.rfind("libnvrtc-builtins.so.", 0) == 0) dlopen((dir + "/" + name).c_str(), RTLD_NOW | RTLD_GLOBAL);
  }
  closedir(d);
}

std::mutex fallback_nvrtc_mu;
std::string& FallbackNvrtcPath() {
  static std::string* const path = new std::string;
  return *path;
}

absl::StatusOr<Nvrtc> OpenNvrtc() {
  std::vector<std::string> candidates;
  // A path the user set is the only candidate: falling back past a typo would silently load another NVRTC.
  // A broken setting of the knob has its default (with a warning); a config file that does not parse fails here
  // as everywhere (the failure is not kept: GetNvrtc).
  const absl::StatusOr<core::ConfigEntry> knob = core::Config::Global().Get("cuda.nvrtc_path");
  if (!knob.ok()) return knob.status();
  const bool from_knob = !std::get<std::string>(knob->value).empty();
  if (from_knob) {
    candidates.push_back(std::get<std::string>(knob->value));
  } else {
    std::lock_guard<std::mutex> lock(fallback_nvrtc_mu);
    if (!FallbackNvrtcPath().empty()) candidates.push_back(FallbackNvrtcPath());
  }
  const std::string cuda_home = Env("CUDA_HOME");
  for (const char* so : {"libnvrtc.so.13", "libnvrtc.so.12"}) {
    if (from_knob) break;
    candidates.push_back(so);
    if (!cuda_home.empty()) {
      candidates.push_back(absl::StrCat(cuda_home, "/lib64/", so));
      candidates.push_back(absl::StrCat(cuda_home, "/lib/", so));
    }
    candidates.push_back(absl::StrCat("/usr/local/cuda/lib64/", so));
  }
  std::vector<std::string> tried;
  for (const std::string& c : candidates) {
    const bool is_path = c.find('/') != std::string::npos;
    if (is_path) PreloadBuiltins(DirOf(c));
    void* lib = dlopen(c.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (lib == nullptr) {
      const char* err = dlerror();
      tried.push_back(absl::StrCat(c, " (", err ? err : "not found", ")"));
      continue;
    }
    Nvrtc n{};
    std::vector<std::string> missing;
    Sym(lib, "nvrtcVersion", &n.nvrtcVersion, &missing);
    Sym(lib, "nvrtcGetNumSupportedArchs", &n.nvrtcGetNumSupportedArchs, &missing);
    Sym(lib, "nvrtcGetSupportedArchs", &n.nvrtcGetSupportedArchs, &missing);
    Sym(lib, "nvrtcCreateProgram", &n.nvrtcCreateProgram, &missing);
    Sym(lib, "nvrtcDestroyProgram", &n.nvrtcDestroyProgram, &missing);
    Sym(lib, "nvrtcCompileProgram", &n.nvrtcCompileProgram, &missing);
    Sym(lib, "nvrtcAddNameExpression", &n.nvrtcAddNameExpression, &missing);
    Sym(lib, "nvrtcGetLoweredName", &n.nvrtcGetLoweredName, &missing);
    Sym(lib, "nvrtcGetCUBINSize", &n.nvrtcGetCUBINSize, &missing);
    Sym(lib, "nvrtcGetCUBIN", &n.nvrtcGetCUBIN, &missing);
    Sym(lib, "nvrtcGetPTXSize", &n.nvrtcGetPTXSize, &missing);
    Sym(lib, "nvrtcGetPTX", &n.nvrtcGetPTX, &missing);
    Sym(lib, "nvrtcGetProgramLogSize", &n.nvrtcGetProgramLogSize, &missing);
    Sym(lib, "nvrtcGetProgramLog", &n.nvrtcGetProgramLog, &missing);
    Sym(lib, "nvrtcGetErrorString", &n.nvrtcGetErrorString, &missing);
    n.path = c;
    Dl_info info{};
    if (n.nvrtcVersion && dladdr(reinterpret_cast<void*>(n.nvrtcVersion), &info) != 0 && info.dli_fname) {
      n.path = info.dli_fname;
    }
    if (!missing.empty()) {
      tried.push_back(absl::StrCat(n.path, " (lacks ", absl::StrJoin(missing, ", "), ")"));
      continue;
    }
    if (!is_path) PreloadBuiltins(DirOf(n.path));
    n.nvrtcVersion(&n.major, &n.minor);
    if (struct stat st; stat(n.path.c_str(), &st) == 0) n.library_bytes = static_cast<int64_t>(st.st_size);
    int count = 0;
    if (n.nvrtcGetNumSupportedArchs(&count) == 0 && count > 0) {
      n.supported_archs.resize(count);
      if (n.nvrtcGetSupportedArchs(n.supported_archs.data()) != 0) n.supported_archs.clear();
      std::sort(n.supported_archs.begin(), n.supported_archs.end());
    }
    return n;
  }
  if (from_knob) {
    return absl::FailedPreconditionError(absl::StrCat(
        "bnb: NVRTC could not be opened from the cuda.nvrtc_path knob (set by ", knob->source, "): ",
        absl::StrJoin(tried, "; "), ". Point it at a libnvrtc.so.13 or .12 file, or unset it to search the usual ",
        "places. CUDA kernels cannot be compiled without it; CPU ops keep working."));
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "bnb: NVRTC (libnvrtc.so.13 or libnvrtc.so.12) could not be opened; tried ", absl::StrJoin(tried, "; "),
      ". Install the CUDA toolkit's NVRTC (e.g. `pip install nvidia-cuda-nvrtc` or the cuda-nvrtc package), "
      "set CUDA_HOME to the toolkit, or set the cuda.nvrtc_path knob (env BNB_CUDA_NVRTC_PATH) to the library file. "
      "CUDA kernels cannot be compiled without it; CPU ops keep working."));
}

}  // namespace

void SetFallbackNvrtcPath(const std::string& path) {
  std::lock_guard<std::mutex> lock(fallback_nvrtc_mu);
  FallbackNvrtcPath() = path;
}

absl::StatusOr<const Nvrtc*> GetNvrtc() {
  // Kept once opened; a failure is not kept, so fixing cuda.nvrtc_path (as the error says) works in this process.
  static std::atomic<const Nvrtc*> opened{nullptr};
  if (const Nvrtc* n = opened.load(std::memory_order_acquire)) return n;
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  if (const Nvrtc* n = opened.load(std::memory_order_relaxed)) return n;
  absl::StatusOr<Nvrtc> n = OpenNvrtc();
  if (!n.ok()) return n.status();
  const Nvrtc* kept = new Nvrtc(*std::move(n));
  opened.store(kept, std::memory_order_release);
  return kept;
}

}  // namespace bnb::jit::cuda
