// The llama.cpp peer for tools/bench/cpu_gemv4.py --loop: ggml's 4-bit matrix-vector product (Q4_K, IQ4_NL, Q4_0;
// the activations float32, which ggml quantizes to 8 bits per call) for one token through the same shapes, each type
// in a loop of its own over weights cycled past the L3, a persistent thread pool. Optional and not built by Bazel:
// ggml is no dependency of bnb. Build against any ggml checkout with its CPU backend built for this CPU, e.g.:
//   cmake -S <ggml> -B /tmp/ggml-build -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON && cmake --build /tmp/ggml-build
//   L=<dir of libggml.so>; gcc -O2 -march=native tools/bench/ggml_peer.c -I<ggml>/include -L$L -lggml
//       -Wl,-rpath,$L -o /tmp/ggml_peer && /tmp/ggml_peer 2 5   # (one command line) threads, rounds
// (ggml since its CPU backend split: -lggml -lggml-base -lggml-cpu.)
// Written against ggml's API of late 2024 (ggml_graph_plan with a thread pool); builds against later versions too,
// whose CPU functions are in ggml-cpu.h (ggml 0.21.0, commit d99724f2, measured 2026-11-28).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "ggml.h"
#if __has_include("ggml-cpu.h")
#include "ggml-cpu.h"  // ggml_graph_plan / ggml_graph_compute since ggml's CPU backend split
#endif

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

typedef struct { int64_t N, K; } Shape;

static double run(enum ggml_type type, const Shape* shapes, int nshapes, int threads, int rounds) {
  // Weights cycled over copies of 96 MB and more, so each call reads its weights from memory.
  size_t bytes = 0;
  for (int s = 0; s < nshapes; ++s) bytes += ggml_row_size(type, shapes[s].K) * shapes[s].N;
  enum { kMaxCopies = 64 };
  int copies = (int)((96u << 20) / bytes) + 2;
  if (copies > kMaxCopies) copies = kMaxCopies;
  struct ggml_init_params ip = {(size_t)copies * bytes + (size_t)(256u << 20), NULL, false};
  struct ggml_context* ctx = ggml_init(ip);
  struct ggml_cgraph* graphs[kMaxCopies];
  float* src = malloc(sizeof(float) * 4096 * 14336);
  for (int64_t i = 0; i < 4096 * 14336; ++i) src[i] = ((float)rand() / RAND_MAX - 0.5f) * 0.04f;
  for (int c = 0; c < copies; ++c) {
    graphs[c] = ggml_new_graph(ctx);
    for (int s = 0; s < nshapes; ++s) {
      struct ggml_tensor* W = ggml_new_tensor_2d(ctx, type, shapes[s].K, shapes[s].N);
      ggml_quantize_chunk(type, src, W->data, 0, shapes[s].N, shapes[s].K, NULL);
      struct ggml_tensor* x = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, shapes[s].K, 1);
      for (int64_t k = 0; k < shapes[s].K; ++k) ((float*)x->data)[k] = src[k] * 25.0f;
      ggml_build_forward_expand(graphs[c], ggml_mul_mat(ctx, W, x));
    }
  }
  struct ggml_threadpool_params tp = ggml_threadpool_params_default(threads);
  struct ggml_threadpool* pool = ggml_threadpool_new(&tp);
  double best = 1e30;
  uint8_t* work = NULL;
  size_t work_size = 0;
  for (int r = 0; r < rounds * copies; ++r) {
    struct ggml_cplan plan = ggml_graph_plan(graphs[r % copies], threads, pool);
    if (plan.work_size > work_size) {
      work = realloc(work, plan.work_size);
      work_size = plan.work_size;
    }
    plan.work_data = work;
    double t0 = now();
    ggml_graph_compute(graphs[r % copies], &plan);
    double t = now() - t0;
    if (r >= copies && t < best) best = t;  // the first pass warms the pool
  }
  ggml_threadpool_free(pool);
  ggml_free(ctx);
  free(work);
  free(src);
  return best * 1e6;
}

int main(int argc, char** argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 2, rounds = argc > 2 ? atoi(argv[2]) : 5;
  const Shape single[3][1] = {{{4096, 4096}}, {{14336, 4096}}, {{4096, 14336}}};
  const Shape layer[7] = {{4096, 4096}, {1024, 4096}, {1024, 4096}, {4096, 4096}, {14336, 4096}, {14336, 4096},
                          {4096, 14336}};
  const enum ggml_type types[3] = {GGML_TYPE_Q4_K, GGML_TYPE_IQ4_NL, GGML_TYPE_Q4_0};
  printf("ggml, %d threads, one token (F32 x), us\n%-28s %10s %10s %10s\n", threads, "weight", "Q4_K", "IQ4_NL",
         "Q4_0");
  const char* names[4] = {"4096x4096", "14336x4096", "4096x14336", "Llama-3-8B layer, 7 linears"};
  for (int s = 0; s < 4; ++s) {
    printf("%-28s", names[s]);
    for (int t = 0; t < 3; ++t) {
      const double us = s < 3 ? run(types[t], single[s], 1, threads, rounds) : run(types[t], layer, 7, threads, rounds);
      printf(" %10.0f", us);
      fflush(stdout);
    }
    printf("\n");
  }
  return 0;
}
