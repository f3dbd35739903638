// The bnb operator namespace. Each op family defines its schemas in its own folder (bnb/ops/<family>/schemas.cc,
// a TORCH_LIBRARY_FRAGMENT); claiming the namespace here makes a second definition of it elsewhere an error.
#include <torch/library.h>

TORCH_LIBRARY(bnb, m) {}
