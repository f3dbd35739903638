#include "bnb/core/knobs.h"

#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "bnb/core/cpu_isa.h"

namespace bnb::core {
namespace {

// A relative path would name another file in every working directory, and "~" is not expanded here (a literal
// ./~ directory invites a fatal `rm -rf ~`).
absl::Status ExpectAbsolutePath(absl::string_view knob, const std::string& path) {
  return path.empty() || path[0] == '/'
             ? absl::OkStatus()
             : absl::InvalidArgumentError(
                   absl::StrCat(knob, ": expected an absolute path (~ is not expanded), got '", path, "'"));
}

absl::string_view ThreadsPerBlockDoc() {
  static const std::string* const doc =
      new std::string(absl::StrCat("threads per CUDA block of the blockwise kernels (a power of two >= 32; each value "
                                   "compiles kernels of its own); 0 picks ",
                                   kCudaThreadsPerBlockDefault));
  return *doc;
}

}  // namespace

const std::vector<KnobSpec>& AllKnobs() {
  static const std::vector<KnobSpec> knobs = {
      {"cpu.isa", KnobType::kString, std::string("best"), 0, 0,
       "highest CPU instruction set the vectorized kernels may use (best, avx3, avx2, sse4, ssse3, scalar)",
       [](const KnobValue& v) { return ValidateIsaName(std::get<std::string>(v)); }},
      {"cpu.amx", KnobType::kBool, true, 0, 0,
       "bfloat16 products over the tiled layout (cpu.pack_4bit) use AMX tiles (TDPBF16PS) where the CPU has "
       "AMX-BF16 (Sapphire Rapids and later) and cpu.isa allows AVX-512, and the int8 product (LLM.int8) "
       "TDPBSSD where it has AMX-INT8: the same results as the AVX512-BF16 and -VNNI kernels; false keeps to "
       "those kernels"},
      {"cpu.threads", KnobType::kInt, int64_t{0}, 0, 4096,
       "most threads a CPU kernel splits its work over; 0 follows torch.get_num_threads()"},
      {"cpu.grain_elements", KnobType::kInt, int64_t{1} << 16, 1024, int64_t{1} << 30,
       "fewest elements a CPU kernel hands to one thread, so small tensors are not split (sized for the "
       "dequantizes: kernels with more work an element, the quantizes and the optimizer updates, hand out "
       "proportionally fewer)"},
      {"cpu.gemv_bf16_products", KnobType::kBool, true, 0, 0,
       "bfloat16 gemv_4bit / gemm_4bit multiply in bfloat16: one token the code values rounded to bfloat16 (by "
       "vdpbf16ps on AVX512-BF16, else float32 products of the rounded values), small batches on AVX512-BF16 the "
       "dequantized weight rounded to bfloat16; about 1.2-1.4x faster, with the error of dequantize + F.linear in "
       "bfloat16; false multiplies the exact code values in float32, with about 2/3 of that error"},
      {"cpu.pack_4bit", KnobType::kBool, true, 0, 0,
       "matmul_4bit / Linear4bit on the CPU, without grad, multiply the 4-bit weight in a tiled layout "
       "(bnb::pack_4bit: rows in tiles of 16): one token about 1.1-1.4x, batches of 2-64 rows 1.2-1.9x faster "
       "(float16 to 256 rows, up to 3.4x). Linear4bit in eval mode repacks its weight in place (plus a float32 scale "
       "per block); matmul_4bit on a weight given as tensors keeps a tiled copy with its quant_state (the codes' "
       "bytes again); false multiplies bitsandbytes' layout as it is"},
      {"cpu.int8_activations", KnobType::kBool, false, 0, 0,
       "matmul_4bit / Linear4bit over the tiled layout (cpu.pack_4bit) quantize each row of the input to int8 per "
       "64 columns and multiply integers (gemm_4bit_packed's int8_activations, as llama.cpp does), where the CPU "
       "has AVX512-VNNI: bfloat16 batches about 1.6x faster, float32 inputs 1.6-3.4x (one bfloat16 token: the same, "
       "memory bound); error about "
       "4x that of bfloat16 products against the dequantized weight (relative to the original weight, whose 4-bit "
       "codes err far more, about +0.5%); elsewhere the knob changes nothing"},
      {"cpu.huge_pages", KnobType::kBool, true, 0, 0,
       "advise transparent huge pages for large CPU outputs: far fewer page faults on first write"},
      {"cpu.output_cache_mb", KnobType::kInt, int64_t{512}, 0, int64_t{1} << 20,
       "MB of freed large CPU outputs (8 MB and up) kept for the next outputs to reuse, so an allocating op called "
       "in a loop does not fault in fresh pages each call; a block unused for 10 s is released at the next such "
       "allocation or free; 0 releases each output when it is freed"},
      {"cuda.threads_per_block", KnobType::kInt, int64_t{0}, 0, 1024, ThreadsPerBlockDoc(),
       [](const KnobValue& v) {
         const int64_t t = std::get<int64_t>(v);
         return t == 0 || (t >= 32 && (t & (t - 1)) == 0)
                    ? absl::OkStatus()
                    : absl::InvalidArgumentError(absl::StrCat(
                          "cuda.threads_per_block: expected 0 or a power of two in [32, 1024], got ", t));
       }},
      {"cuda.optim8_per_thread", KnobType::kInt, int64_t{kCudaOptim8PerThreadDefault}, 1, 8,
       "elements of a 256-element state block each thread of the 8-bit optimizer update takes: 1 (a CTA of 256 "
       "threads a block), 2, 4 or 8 (a warp a block: 16-byte loads and stores, no barriers); a template argument, "
       "each value compiles its own kernels; the same results whatever the value",
       [](const KnobValue& v) {
         const int64_t k = std::get<int64_t>(v);
         return IsOptim8PerThread(k)
                    ? absl::OkStatus()
                    : absl::InvalidArgumentError(
                          absl::StrCat("cuda.optim8_per_thread: expected 1, 2, 4 or 8, got ", k));
       }},
      {"cuda.nvrtc_path", KnobType::kString, std::string(""), 0, 0,
       "libnvrtc to open, an absolute path; empty tries the nvidia-cuda-nvrtc wheel's, libnvrtc.so.13/.so.12 on the "
       "library path, then $CUDA_HOME/lib64. Read when NVRTC is first opened: a later change needs a new process",
       nullptr, /*loads_code=*/true},
      {"cache.dir", KnobType::kString, std::string(""),  0, 0,
       "directory for compiled kernels (absolute); empty means $XDG_CACHE_HOME/bnb/kernels or ~/.cache/bnb/kernels",
       [](const KnobValue& v) { return ExpectAbsolutePath("cache.dir", std::get<std::string>(v)); }},
      {"cache.enabled", KnobType::kBool, true, 0, 0, "keep compiled kernels on disk between processes"},
  };
  return knobs;
}

bool BrokenSettingFails(const KnobSpec& spec) { return absl::StartsWith(spec.name, "cpu."); }

const KnobSpec* FindKnob(absl::string_view name) {
  for (const KnobSpec& k : AllKnobs()) {
    if (k.name == name) return &k;
  }
  return nullptr;
}

std::string KnobEnvName(absl::string_view name) {
  return absl::StrCat("BNB_", absl::AsciiStrToUpper(absl::StrReplaceAll(name, {{".", "_"}})));
}

absl::string_view KnobTypeName(KnobType t) {
  switch (t) {
    case KnobType::kInt: return "an integer";
    case KnobType::kBool: return "a boolean";
    case KnobType::kString: return "a string";
  }
  return "?";
}

std::string KnobValueToString(const KnobValue& v) {
  if (const auto* i = std::get_if<int64_t>(&v)) return absl::StrCat(*i);
  if (const auto* b = std::get_if<bool>(&v)) return *b ? "true" : "false";
  return absl::StrCat("\"", std::get<std::string>(v), "\"");
}

absl::Status ValidateKnob(const KnobSpec& spec, const KnobValue& v) {
  const bool type_ok = (spec.type == KnobType::kInt && std::holds_alternative<int64_t>(v)) ||
                       (spec.type == KnobType::kBool && std::holds_alternative<bool>(v)) ||
                       (spec.type == KnobType::kString && std::holds_alternative<std::string>(v));
  if (!type_ok) {
    return absl::InvalidArgumentError(absl::StrCat(spec.name, ": expected ", KnobTypeName(spec.type), ", got ",
                                                   KnobValueToString(v)));
  }
  if (spec.type == KnobType::kString && std::get<std::string>(v).find('\0') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(spec.name, ": the value holds a NUL byte, which no name or path "
                                                   "can; got ", KnobValueToString(v)));
  }
  if (spec.type == KnobType::kInt) {
    const int64_t i = std::get<int64_t>(v);
    if (i < spec.min || i > spec.max) {
      return absl::InvalidArgumentError(
          absl::StrCat(spec.name, ": expected an integer in [", spec.min, ", ", spec.max, "], got ", i));
    }
  }
  if (spec.loads_code) {
    if (absl::Status st = ExpectAbsolutePath(spec.name, std::get<std::string>(v)); !st.ok()) return st;
  }
  return spec.validate ? spec.validate(v) : absl::OkStatus();
}

absl::Status ParseKnob(const KnobSpec& spec, absl::string_view text, KnobValue* out) {
  const std::string t(absl::StripAsciiWhitespace(text));
  switch (spec.type) {
    case KnobType::kInt: {
      int64_t i;
      if (!absl::SimpleAtoi(t, &i)) {
        return absl::InvalidArgumentError(absl::StrCat(spec.name, ": expected an integer, got \"", text, "\""));
      }
      *out = i;
      break;
    }
    case KnobType::kBool: {
      bool b;
      if (!absl::SimpleAtob(t, &b)) {
        return absl::InvalidArgumentError(
            absl::StrCat(spec.name, ": expected true/false (or 1/0, yes/no), got \"", text, "\""));
      }
      *out = b;
      break;
    }
    case KnobType::kString: *out = std::string(text); break;
  }
  return ValidateKnob(spec, *out);
}

}  // namespace bnb::core
