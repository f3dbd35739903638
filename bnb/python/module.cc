// bnb._C: the small C++ API the Python package needs (configuration, CPU dispatch facts, codebooks). Loading it
// also registers every bnb operator with the PyTorch dispatcher (the library links bnb/ops).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <tuple>
#include <vector>

#include "bnb/core/codebook.h"
#include "bnb/core/config.h"
#include "bnb/core/cpu_isa.h"
#include "bnb/core/int8_gemm.h"
#include "bnb/core/cpu_settings.h"
#include "bnb/core/gemm4_packed.h"
#include "bnb/core/gemv4.h"
#include "bnb/jit/cuda/nvrtc.h"
#include "bnb/jit/kernel_cache.h"
#include "bnb/jit/kernel_registry.h"
#include "bnb/ops/common/negative_views.h"
#include "bnb/ops/common/output_cache.h"

namespace py = pybind11;

namespace {

using bnb::core::Config;
using bnb::core::KnobValue;

// Text from the environment or the file system as Python sees such text (os.fsdecode): bytes that are not UTF-8
// become surrogates, so a path round-trips through os.fsencode and nothing raises UnicodeDecodeError.
py::str FsStr(const std::string& s) {
  return py::reinterpret_steal<py::str>(PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()),
                                                             "surrogateescape"));
}

// absl errors become Python exceptions: unknown keys KeyError, everything else ValueError. A message quoting bytes
// that are not UTF-8 (an environment value, say) shows them as \xNN escapes.
void Raise(const absl::Status& st) {
  if (st.ok()) return;
  const std::string msg(st.message());
  py::object text = py::reinterpret_steal<py::object>(
      PyUnicode_DecodeUTF8(msg.data(), static_cast<Py_ssize_t>(msg.size()), "backslashreplace"));
  PyErr_SetObject(absl::IsNotFound(st) ? PyExc_KeyError : PyExc_ValueError, text.ptr());
  throw py::error_already_set();
}

template <class T>
T Unwrap(absl::StatusOr<T> v) {
  Raise(v.status());
  return *std::move(v);
}

py::object ToPython(const KnobValue& v) {
  if (const auto* i = std::get_if<int64_t>(&v)) return py::int_(*i);
  if (const auto* b = std::get_if<bool>(&v)) return py::bool_(*b);
  return FsStr(std::get<std::string>(v));
}

// Python values keep their own type (True stays a bool, "3" stays a string), so Set can report a wrong type.
// `name` is the knob, for the errors raised here.
KnobValue FromPython(const std::string& name, const py::handle& h) {
  const auto shown = [&h] { return std::string(py::repr(h)); };  // for the errors only
  if (py::isinstance<py::bool_>(h)) return h.cast<bool>();
  if (py::isinstance<py::int_>(h)) {
    try {
      return h.cast<int64_t>();
    } catch (const py::cast_error&) {
      throw py::value_error(name + ": expected a 64-bit integer, got " + shown());
    }
  }
  if (py::isinstance<py::str>(h)) {  // os.fsencode's bytes, so what FsStr gave comes back unchanged
    py::bytes b = py::reinterpret_steal<py::bytes>(PyUnicode_AsEncodedString(h.ptr(), "utf-8", "surrogateescape"));
    if (!b) throw py::error_already_set();
    return std::string(b);
  }
  throw py::type_error(name + ": values are int, bool or str, got " + shown() + " of type " +
                       std::string(py::str(py::type::handle_of(h))));
}

// A float dtype by name or str(torch dtype), for the CPU kernel queries.
bnb::core::DType ParseFloatDType(const char* fn, const std::string& dtype) {
  if (dtype == "float32" || dtype == "torch.float32") return bnb::core::DType::kFloat32;
  if (dtype == "float16" || dtype == "torch.float16") return bnb::core::DType::kFloat16;
  if (dtype == "bfloat16" || dtype == "torch.bfloat16") return bnb::core::DType::kBFloat16;
  throw py::value_error(std::string(fn) + ": dtype must be float32, float16 or bfloat16, got '" + dtype + "'");
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "bnb's C++ core: configuration, CPU dispatch and codebooks. Loading it registers torch.ops.bnb.*";
  bnb::ops::RegisterNegativeViewOuts();  // derived from the schemas, which the library's static initializers defined

  m.def("config_get", [](const std::string& name) { return ToPython(Unwrap(Config::Global().Get(name)).value); });
  m.def("config_source", [](const std::string& name) { return FsStr(Unwrap(Config::Global().Get(name)).source); });
  m.def("config_set", [](const std::string& name, py::handle v) {
    Raise(Config::Global().Set(name, FromPython(name, v)));
  });
  m.def("config_unset", [](const std::string& name) { Raise(Config::Global().Unset(name)); });
  m.def("config_reset", [] { Config::Global().ResetRuntime(); });
  m.def("config_reload", [] { Raise(Config::Global().Reload()); });
  m.def("knob_env_names", [] {
    std::vector<std::string> out;
    for (const auto& spec : bnb::core::AllKnobs()) out.push_back(bnb::core::KnobEnvName(spec.name));
    return out;
  }, "Every knob's BNB_<SECTION>_<KEY> variable; reads no configuration.");
  m.def("config_effective", [] {
    py::list out;
    for (const auto& e : Unwrap(Config::Global().Effective())) {
      py::dict d;
      d["name"] = std::string(e.spec->name);
      d["value"] = ToPython(e.value);
      d["default"] = ToPython(e.spec->default_value);
      d["source"] = FsStr(e.source);  // a file's path need not be UTF-8
      d["env"] = bnb::core::KnobEnvName(e.spec->name);
      d["doc"] = std::string(e.spec->doc);
      out.append(d);
    }
    return out;
  });

  m.def("cpu_isa", [] {
    Unwrap(bnb::core::CurrentCpuSettings());  // applies the cpu.isa cap first
    return bnb::core::ActiveIsa();
  }, "The instruction set the CPU kernels dispatch to, after the cpu.isa cap.");
  m.def("int8_gemm_kernel", [] {
    Unwrap(bnb::core::CurrentCpuSettings());  // applies the cpu.isa cap first
    return std::string(bnb::core::Int8GemmKernelName(bnb::core::ActiveInt8GemmKernel()));
  }, "The kernel of the int8 product (int8_linear_matmul) on the CPU, after the cpu.isa cap.");
  m.def("gemv4_kernel", [](const std::string& dtype, int64_t K) {
    const bnb::core::CpuSettings settings = Unwrap(bnb::core::CurrentCpuSettings());  // applies the cap first
    const bnb::core::DType d = ParseFloatDType("gemv4_kernel", dtype);
    return std::string(bnb::core::Gemv4KernelName(bnb::core::ActiveGemv4Kernel(d, K, settings.gemv_bf16_products)));
  }, py::arg("dtype"), py::arg("K"),
  "The kernel gemv_4bit runs on the CPU for A of this dtype (name or str(torch dtype)) and K, after the cpu.isa cap "
  "and cpu.gemv_bf16_products.");
  m.def("gemm4_small_kernel", [](const std::string& dtype, int64_t M, int64_t K) {
    const bnb::core::CpuSettings settings = Unwrap(bnb::core::CurrentCpuSettings());  // applies the cap first
    const bnb::core::DType d = ParseFloatDType("gemm4_small_kernel", dtype);
    return std::string(bnb::core::Gemm4SmallKernelName(
        bnb::core::ActiveGemm4SmallKernel(d, M, K, settings.gemv_bf16_products)));
  }, py::arg("dtype"), py::arg("M"), py::arg("K"),
  "The kernel gemm_4bit's small-batch path runs on the CPU for M rows of A of this dtype and K ('none': the "
  "weight is dequantized in bands and multiplied by addmm), after the cpu.isa cap and cpu.gemv_bf16_products.");
  m.def("cpu_native_products", [](const std::string& dtype) {
    Unwrap(bnb::core::CurrentCpuSettings());  // applies the cap first
    return bnb::core::NativeProducts(ParseFloatDType("cpu_native_products", dtype));
  }, py::arg("dtype"),
  "Whether dense products in this dtype run on instructions made for it (else gemm_4bit's bands multiply in "
  "float32 and round once), after the cpu.isa cap.");
  m.def("gemm4_packed_runs", [](const std::string& dtype, int64_t M) {
    const bnb::core::CpuSettings settings = Unwrap(bnb::core::CurrentCpuSettings());  // applies the cap first
    return bnb::core::Gemm4PackedRuns(ParseFloatDType("gemm4_packed_runs", dtype), M, settings.gemv_bf16_products);
  }, py::arg("dtype"), py::arg("M"),
  "Whether gemm_4bit_packed has a CPU kernel for M rows of A of this dtype (else it dequantizes the weight), after "
  "the cpu.isa cap and cpu.gemv_bf16_products.");
  m.def("gemm4_packed_kernel", [](const std::string& dtype, int64_t M) {
    const bnb::core::CpuSettings settings = Unwrap(bnb::core::CurrentCpuSettings());  // applies the cap first
    return std::string(bnb::core::Gemm4PackedKernelName(ParseFloatDType("gemm4_packed_kernel", dtype), M,
                                                        settings.gemv_bf16_products));
  }, py::arg("dtype"), py::arg("M"),
  "The CPU kernel gemm_4bit_packed runs for M rows of A of this dtype (one call; more rows run as slices): amx, "
  "avx512bf16, avx512, avx512-blocked (float32 products from 24 rows) or none, after the cpu.isa cap, cpu.amx and "
  "cpu.gemv_bf16_products.");
  m.def("output_cache_stats", [] {
    const bnb::ops::OutputCacheStats s = bnb::ops::GetOutputCacheStats();
    py::dict d;
    d["cached_bytes"] = s.cached_bytes;
    d["cached_blocks"] = s.cached_blocks;
    d["reuses"] = s.reuses;
    d["mappings"] = s.mappings;
    return d;
  }, "The CPU output cache (cpu.output_cache_mb): bytes and blocks held for reuse now; allocations served from it "
  "and fresh mappings since the process started.");
  m.def("release_output_cache", &bnb::ops::ReleaseOutputCache,
        "Unmaps every block the CPU output cache holds (tensors still alive are untouched).");
  m.def("gemm4_packed_dense_from", [](const std::string& dtype) {
    const bnb::core::CpuSettings settings = Unwrap(bnb::core::CurrentCpuSettings());  // applies the cap first
    return bnb::core::Gemm4PackedDenseFrom(ParseFloatDType("gemm4_packed_dense_from", dtype),
                                           settings.gemv_bf16_products);
  }, py::arg("dtype"),
  "Rows of A of this dtype from which gemm_4bit_packed dequantizes the weight in bands and multiplies by addmm "
  "instead of running its kernel in slices (0: never), after the cpu.isa cap, cpu.amx and cpu.gemv_bf16_products.");
  m.def("gemm4_packed_int8_runs", [] {
    Unwrap(bnb::core::CurrentCpuSettings());  // applies the cap first
    return bnb::core::Gemm4PackedInt8Runs();
  }, "Whether gemm_4bit_packed has a CPU kernel for int8_activations (AVX512-VNNI), after the cpu.isa cap.");
  m.def("packed4_fits", &bnb::core::Packed4Fits, py::arg("N"), py::arg("K"), py::arg("blocksize"),
        "Whether pack_4bit's layout takes an N x K 4-bit weight of this blocksize.");
  m.def("cpu_isas", &bnb::core::AvailableIsas, "Instruction sets compiled in and supported here, best first.");
  m.def("cpu_isas_compiled", &bnb::core::CompiledIsas, "Instruction sets compiled in, best first.");

  m.def("jit_stats", [] {
    const bnb::jit::Stats s = bnb::jit::GetStats();
    py::dict d;
    d["memory_hits"] = s.memory_hits;
    d["disk_hits"] = s.disk_hits;
    d["compiles"] = s.compiles;
    d["compile_failures"] = s.compile_failures;
    d["compile_ms"] = s.compile_ms;
    d["disk_load_ms"] = s.disk_load_ms;
    return d;
  }, "Kernel cache counters of this process.");
  m.def("jit_reset_stats", [] { bnb::jit::KernelCache::Global().ResetStats(); });
  m.def("cache_dir", [] { return FsStr(bnb::jit::KernelCache::Global().DiskDir()); },
        "The kernel cache directory in use; empty when the disk cache is off or unusable.");
  m.def("cache_list", [] {
    py::list out;
    for (const auto& f : Unwrap(bnb::jit::KernelCache::Global().ListDisk())) {
      out.append(py::make_tuple(f.name, f.size, f.mtime));
    }
    return out;
  }, "(name, bytes, mtime) of every file in the disk cache.");
  m.def("cache_clear", [] { return Unwrap(bnb::jit::KernelCache::Global().ClearDisk()); },
        "Removes every cached kernel file; returns how many.");
  // Unified memory for paged optimizer state (bnb/python/bnb/optim/paged.py wraps it as tensors).
  m.def("managed_alloc", [](int device, size_t bytes) {
    return Unwrap(bnb::jit::KernelCache::Global().runtime().AllocManaged(device, bytes));
  }, py::arg("device"), py::arg("bytes"),
     "A managed allocation of `bytes` for GPU `device` (its address); the driver moves its pages on demand.");
  m.def("managed_free", [](int device, uintptr_t address) {
    absl::Status st;
    {
      py::gil_scoped_release release;  // waits for the device
      st = bnb::jit::KernelCache::Global().runtime().FreeManaged(device, address);
    }
    Raise(st);
  }, py::arg("device"), py::arg("address"), "Frees a managed_alloc allocation once the device is idle.");
  m.def("managed_prefetch", [](int device, uintptr_t address, size_t bytes, uintptr_t stream, bool to_host) {
    Raise(bnb::jit::KernelCache::Global().runtime().PrefetchManaged(device, address, bytes,
                                                                       reinterpret_cast<void*>(stream), to_host));
  }, py::arg("device"), py::arg("address"), py::arg("bytes"), py::arg("stream"), py::arg("to_host") = false,
     "Starts moving managed memory to GPU `device` (to host memory where `to_host`), ordered on `stream` (one of "
     "`device`'s, a CUstream handle as an integer).");
  m.def("set_fallback_nvrtc_path", &bnb::jit::cuda::SetFallbackNvrtcPath,
        "Where to look for NVRTC when the cuda.nvrtc_path knob is empty (the nvidia-cuda-nvrtc wheel's copy).");
  m.def("cache_warm", [](const std::string& arch, py::object progress) {
    // The threads knob shapes the ops' kernels: warm the ones a run with this configuration loads.
    const int64_t threads = Unwrap(bnb::core::Config::Global().GetInt("cuda.threads_per_block"));
    const auto specs = bnb::jit::AllKernelSpecs(arch, static_cast<int>(threads));
    absl::Status st;
    {
      // Compiling releases the GIL; the progress callback takes it back for each report.
      py::gil_scoped_release release;
      st = bnb::jit::KernelCache::Global().Warm(specs, arch, [&](size_t done, size_t total,
                                                                 const bnb::jit::KernelSpec& spec) {
        py::gil_scoped_acquire acquire;
        // Ctrl-C ends a warm between kernels, with or without a progress callback (which would raise it too).
        if (PyErr_CheckSignals() != 0) throw py::error_already_set();
        if (!progress.is_none()) progress(done, total, spec.NameExpression());
      });
    }
    Raise(st);
    return specs.size();
  }, py::arg("arch"), py::arg("progress") = py::none(),
     "Compiles every kernel bnb has for `arch` (e.g. \"sm_90\") into the caches; needs NVRTC, not a GPU.");

  m.def("create_dynamic_map", [](bool is_signed, int max_exponent_bits, int total_bits) {
    return Unwrap(bnb::core::CreateDynamicMap(is_signed, max_exponent_bits, total_bits));
  }, py::arg("signed") = true, py::arg("max_exponent_bits") = 7, py::arg("total_bits") = 8);
}
