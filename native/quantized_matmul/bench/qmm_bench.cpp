// The kernels alone, without MLX: CPU time per call for the default model's shapes.
/* Build and run from the repository root:
  g++ -O3 -g -Wall -std=c++17 -pthread -Inative/quantized_matmul/src \
    native/quantized_matmul/bench/qmm_bench.cpp native/quantized_matmul/src/kernels.cpp \
    native/quantized_matmul/src/kernels_avx2.cpp native/quantized_matmul/src/kernels_avx512.cpp \
    native/quantized_matmul/src/kernels_q8.cpp native/quantized_matmul/src/thread_pool.cpp \
    -ldl -o /tmp/qmm_bench
  /tmp/qmm_bench [filter] [reps] [threads]   e.g. /tmp/qmm_bench "4b 1536x576 M1 f16"
  /tmp/qmm_bench step [reps] [threads]       (a decode step's matmuls, weights from memory)
  MLXLAB_QMM_INT8=1 /tmp/qmm_bench     (the int8-activation variant)
  MLXLAB_QMM_INT16=1 /tmp/qmm_bench    (the int16-activation variant)
  MLXLAB_QMM_AVX512=0 /tmp/qmm_bench   (the AVX2 tiles on an AVX-512 CPU)
  valgrind --tool=callgrind --toggle-collect='mlxlab::compute(mlxlab::Problem const&)' \
    /tmp/qmm_bench "8b 49152x576 M1 f16" 1     (2 calls: halve the total)
*/
// Each line: bits, N x K, rows M, scale type, best microseconds of a call (the calling
// thread's CPU time on one thread, wall time on more), weights per ns, and the max error against the scalar kernel relative to
// the largest output.
#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels.h"

using namespace mlxlab;

namespace {

int g_bench_threads = 1;

double cpu_now() {
  timespec t;
  clock_gettime(g_bench_threads > 1 ? CLOCK_MONOTONIC : CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

uint16_t to_half(float f) {
  // Scales here are normal floats in half range: round to nearest by truncating 13 bits.
  uint32_t b;
  std::memcpy(&b, &f, 4);
  uint32_t sign = (b >> 16) & 0x8000;
  int exponent = static_cast<int>((b >> 23) & 0xFF) - 112;
  if (exponent <= 0) return static_cast<uint16_t>(sign);
  return static_cast<uint16_t>(sign | (exponent << 10) | ((b >> 13) & 0x3FF));
}

uint16_t to_bf16(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return static_cast<uint16_t>(b >> 16);
}

struct Case {
  int bits, N, K;
};

void run(const Case& c, int M, ScaleType type, int reps) {
  const int gs = 32, groups = c.K / gs;
  std::mt19937 rng(21);
  std::normal_distribution<float> normal;
  std::vector<float> x(static_cast<size_t>(M) * c.K);
  for (float& v : x) v = normal(rng);
  std::vector<uint8_t> w(static_cast<size_t>(c.N) * c.K * c.bits / 8);
  for (uint8_t& v : w) v = static_cast<uint8_t>(rng());
  std::vector<uint16_t> scales(static_cast<size_t>(c.N) * groups), biases(scales.size());
  for (size_t i = 0; i < scales.size(); ++i) {
    float s = 0.01f + 0.01f * std::abs(normal(rng)), b = -s * (c.bits == 4 ? 8 : 128);
    scales[i] = type == ScaleType::Float16 ? to_half(s) : to_bf16(s);
    biases[i] = type == ScaleType::Float16 ? to_half(b) : to_bf16(b);
  }
  std::vector<float> y(static_cast<size_t>(M) * c.N), want(y.size());
  Problem p{x.data(), w.data(), scales.data(), biases.data(), type, y.data(), M, c.N, c.K, gs,
            c.bits};
  compute(p);
  double best = 1e9;
  for (int r = 0; r < reps; ++r) {
    const double t0 = cpu_now();
    compute(p);
    best = std::min(best, cpu_now() - t0);
  }
  // The reference: the scalar kernel on the same problem.
  const int stride = xsum_stride(groups);
  std::vector<float> xsum(static_cast<size_t>(M) * stride, 0.0f);
  for (int m = 0; m < M; ++m)
    for (int k = 0; k < c.K; ++k) xsum[m * stride + k / gs] += x[m * c.K + k];
  Problem ref = p;
  ref.y = want.data();
  rows_scalar(ref, xsum.data(), 0, c.N);
  float error = 0.0f, largest = 0.0f;
  for (size_t i = 0; i < y.size(); ++i) {
    error = std::max(error, std::abs(y[i] - want[i]));
    largest = std::max(largest, std::abs(want[i]));
  }
  std::printf("%d-bit %5dx%4d M=%d %s: %9.1f us %6.2f weights/ns  err %.1e\n", c.bits, c.N,
              c.K, M, type == ScaleType::Float16 ? "f16 " : "bf16", best * 1e6,
              static_cast<double>(c.N) * c.K * M / (best * 1e9), error / largest);
}

// A decode step's matmuls of the default model, one row, every layer's weights its own (so
// read from memory, as in a real step, not from cache): wall microseconds, best of `reps`.
void step(int reps) {
  struct Weights {
    std::vector<uint8_t> w;
    std::vector<uint16_t> scales, biases;
    int bits, N, K;
  };
  const int gs = 32;  // the default model's
  std::mt19937 rng(21);
  std::vector<Weights> layers;
  auto add = [&](int bits, int N, int K) {
    Weights m{std::vector<uint8_t>(static_cast<size_t>(N) * K * bits / 8),
              std::vector<uint16_t>(static_cast<size_t>(N) * K / gs, to_half(0.01f)),
              std::vector<uint16_t>(static_cast<size_t>(N) * K / gs, to_half(-0.08f)), bits, N, K};
    for (uint8_t& v : m.w) v = static_cast<uint8_t>(rng());
    layers.push_back(std::move(m));
  };
  for (int layer = 0; layer < 30; ++layer) {
    for (auto [N, K] : {std::pair{576, 576}, {192, 576}, {192, 576}, {576, 576}, {1536, 576},
                        {1536, 576}, {576, 1536}}) {
      add(4, N, K);
    }
  }
  add(8, 49152, 576);
  std::vector<float> x(1536, 0.5f), y(49152);
  double best = 1e9;
  for (int r = 0; r < reps; ++r) {
    timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (Weights& m : layers) {
      Problem p{x.data(), m.w.data(), m.scales.data(), m.biases.data(), ScaleType::Float16,
                y.data(), 1, m.N, m.K, gs, m.bits};
      compute(p);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    best = std::min(best, (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9);
  }
  std::printf("decode step, one row, %d threads: %8.1f us\n", g_bench_threads, best * 1e6);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string filter = argc > 1 ? argv[1] : "";
  const int reps_arg = argc > 2 ? std::atoi(argv[2]) : 0;
  g_bench_threads = argc > 3 ? std::max(std::atoi(argv[3]), 1) : 1;
  set_thread_count(g_bench_threads);
  set_blas_min_rows(0);
  if (filter == "step") {
    step(reps_arg > 0 ? reps_arg : 20);
    return 0;
  }
  const Case cases[] = {{4, 576, 576}, {4, 192, 576}, {4, 1536, 576}, {4, 576, 1536},
                        {8, 49152, 576}};
  for (const Case& c : cases) {
    for (ScaleType type : {ScaleType::Float16, ScaleType::BFloat16}) {
      for (int M : {1, 2, 4, 8}) {
        char name[64];
        std::snprintf(name, sizeof name, "%db %dx%d M%d %s", c.bits, c.N, c.K, M,
                      type == ScaleType::Float16 ? "f16" : "bf16");
        if (std::string(name).find(filter) == std::string::npos) continue;
        const int reps =
            reps_arg > 0 ? reps_arg
                         : std::max(5, static_cast<int>(4e8 / (double(c.N) * c.K * M)));
        run(c, M, type, reps);
      }
    }
  }
}
