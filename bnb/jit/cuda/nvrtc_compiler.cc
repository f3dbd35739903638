#include "bnb/jit/cuda/nvrtc_compiler.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bnb/jit/cuda/arch.h"
#include "bnb/jit/cuda/nvrtc.h"

namespace bnb::jit::cuda {

absl::StatusOr<std::vector<std::string>> NvrtcOptionsFor(const KernelSpec& spec, const std::vector<int>& archs,
                                                         int nvrtc_major, int nvrtc_minor) {
  absl::StatusOr<int> want = ParseArch(spec.arch);
  if (!want.ok()) return want.status();
  std::vector<std::string> opts = {"-std=c++17"};
  if (std::find(archs.begin(), archs.end(), *want) != archs.end()) {
    opts.push_back(absl::StrCat("-arch=sm_", *want));
  } else {
    int best = -1;
    for (int a : archs) {
      if (a <= *want) best = std::max(best, a);
    }
    if (best < 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("NVRTC cannot target ", spec.arch, " (kernel ", spec.DebugString(),
                       "): it supports only sm_", absl::StrJoin(archs, ", sm_"),
                       "; use an NVRTC old enough to know this GPU"));
    }
    opts.push_back(absl::StrCat("-arch=compute_", best));
  }
  if (nvrtc_major > 12 || (nvrtc_major == 12 && nvrtc_minor >= 4)) opts.push_back("-minimal");
  for (const auto& [name, value] : spec.knobs) opts.push_back(absl::StrCat("-DBNB_KNOB_", name, "=", value));
  std::sort(opts.begin(), opts.end());
  return opts;
}

absl::StatusOr<std::string> NvrtcCompiler::Version() {
  absl::StatusOr<const Nvrtc*> nv = GetNvrtc();
  if (!nv.ok()) return nv.status();
  // Part of every kernel's key: the library's size tells patch releases of one major.minor apart.
  return absl::StrCat("nvrtc ", (*nv)->major, ".", (*nv)->minor, " (", (*nv)->library_bytes, " bytes)");
}

absl::Status NvrtcCompiler::CheckTarget(const std::string& target) { return ParseArch(target).status(); }

absl::StatusOr<std::vector<std::string>> NvrtcCompiler::Options(const KernelSpec& spec) {
  absl::StatusOr<const Nvrtc*> nv = GetNvrtc();
  if (!nv.ok()) return nv.status();
  return NvrtcOptionsFor(spec, (*nv)->supported_archs, (*nv)->major, (*nv)->minor);
}

absl::StatusOr<Binary> NvrtcCompiler::Compile(const KernelSpec& spec, const std::string& source,
                                              const std::vector<SourceFile>& headers,
                                              const std::vector<std::string>& options) {
  absl::StatusOr<const Nvrtc*> nvs = GetNvrtc();
  if (!nvs.ok()) return nvs.status();
  const Nvrtc& nv = **nvs;
  const auto context = [&] {
    return absl::StrCat("kernel ", spec.DebugString(), "; options: ", absl::StrJoin(options, " "), "; NVRTC ",
                        nv.major, ".", nv.minor, " (", nv.path, ")");
  };
  const auto nvrtc_error = [&](const char* call, nvrtcResult r) {
    return absl::InternalError(absl::StrCat(call, " failed: ", nv.nvrtcGetErrorString(r), "; ", context()));
  };
  std::vector<const char*> header_texts, header_names, opts;
  for (const SourceFile& h : headers) {
    header_texts.push_back(h.text.c_str());
    header_names.push_back(h.name.c_str());
  }
  for (const std::string& o : options) opts.push_back(o.c_str());
  const std::string program_name = absl::StrCat("bnb_", spec.template_name, ".cu");
  nvrtcProgram prog = nullptr;
  nvrtcResult r = nv.nvrtcCreateProgram(&prog, source.c_str(), program_name.c_str(),
                                        static_cast<int>(headers.size()), header_texts.data(), header_names.data());
  if (r != 0) return nvrtc_error("nvrtcCreateProgram", r);
  struct Destroy {
    const Nvrtc& nv;
    nvrtcProgram* p;
    ~Destroy() { nv.nvrtcDestroyProgram(p); }
  } destroy{nv, &prog};
  const std::string name_expr = spec.NameExpression();
  if ((r = nv.nvrtcAddNameExpression(prog, name_expr.c_str())) != 0) return nvrtc_error("nvrtcAddNameExpression", r);
  r = nv.nvrtcCompileProgram(prog, static_cast<int>(opts.size()), opts.data());
  if (r != 0) {
    size_t log_size = 0;
    std::string log;
    if (nv.nvrtcGetProgramLogSize(prog, &log_size) == 0 && log_size > 1) {
      log.resize(log_size);
      nv.nvrtcGetProgramLog(prog, &log[0]);
      log.resize(log_size - 1);
    }
    return absl::InvalidArgumentError(absl::StrCat("NVRTC could not compile ", name_expr, " (",
                                                   nv.nvrtcGetErrorString(r), "); ", context(), "\nNVRTC log:\n",
                                                   log));
  }
  Binary b;
  const char* lowered = nullptr;
  if ((r = nv.nvrtcGetLoweredName(prog, name_expr.c_str(), &lowered)) != 0 || lowered == nullptr) {
    return nvrtc_error("nvrtcGetLoweredName", r);
  }
  b.lowered_name = lowered;
  const bool cubin = std::any_of(options.begin(), options.end(),
                                 [](const std::string& o) { return o.rfind("-arch=sm_", 0) == 0; });
  size_t size = 0;
  if (cubin) {
    b.kind = BinaryKind::kCubin;
    if ((r = nv.nvrtcGetCUBINSize(prog, &size)) != 0) return nvrtc_error("nvrtcGetCUBINSize", r);
    b.image.resize(size);
    if ((r = nv.nvrtcGetCUBIN(prog, &b.image[0])) != 0) return nvrtc_error("nvrtcGetCUBIN", r);
  } else {
    b.kind = BinaryKind::kPtx;
    if ((r = nv.nvrtcGetPTXSize(prog, &size)) != 0) return nvrtc_error("nvrtcGetPTXSize", r);
    b.image.resize(size);  // includes the terminating NUL cuModuleLoadData wants
    if ((r = nv.nvrtcGetPTX(prog, &b.image[0])) != 0) return nvrtc_error("nvrtcGetPTX", r);
  }
  if (b.image.empty()) return absl::InternalError(absl::StrCat("NVRTC produced an empty image; ", context()));
  return b;
}

}  // namespace bnb::jit::cuda
