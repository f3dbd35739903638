// Looking functions up in a library opened with dlopen (the CUDA driver, NVRTC): bnb links neither.
#pragma once

#include <dlfcn.h>

#include <string>
#include <vector>

namespace bnb::jit::cuda {

// Looks `name` up in `lib` into *f; on failure appends the name to *missing, so one error can list them all.
template <class F>
void Sym(void* lib, const char* name, F* f, std::vector<std::string>* missing) {
  *f = reinterpret_cast<F>(dlsym(lib, name));
  if (*f == nullptr) missing->push_back(name);
}

}  // namespace bnb::jit::cuda
