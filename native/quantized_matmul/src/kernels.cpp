// The driver: group sums of x, the split over threads, and the sgemm path for prefill.
#include "kernels.h"

#include <dlfcn.h>
#include <sched.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "thread_pool.h"

namespace mlxlab {

namespace {

using Sgemm = void (*)(int, int, int, int, int, int, float, const float*, int,
                       const float*, int, float, float*, int);

// A first, noisy measurement on the shared 2-core EPYC: at 8 rows the fused kernel and
// sgemm on a dequantized tile are alike; from 16 rows sgemm wins (worth measuring again).
int g_blas_min_rows = 16;
int g_threads = 0;  // 0: the CPUs this process may run on
// Weights (x rows, up to 8) below which a call runs on one thread: a thread's wake-up costs
// more than it saves there. This and g_avx512 start at the settings' defaults; the Python
// that loads the library sets both from the settings (MLXLAB_QMM_PARALLEL_MIN, _AVX512).
int64_t g_parallel_min = int64_t{1} << 16;
bool g_avx512 = true;

// OpenBLAS, when cpu_fast_path loaded it RTLD_GLOBAL; MLX's bundled reference
// BLAS also exports cblas_sgemm but is slower than our kernel at every size.
Sgemm find_sgemm() {
  if (dlsym(RTLD_DEFAULT, "openblas_get_num_threads") == nullptr) {
    return nullptr;
  }
  return reinterpret_cast<Sgemm>(dlsym(RTLD_DEFAULT, "cblas_sgemm"));
}

Sgemm sgemm() {
  static Sgemm found = find_sgemm();
  return found;
}

int usable_cpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  return std::max(CPU_COUNT(&set), 1);
}

int threads_for(int64_t work) {
  return work < g_parallel_min ? 1 : thread_count();
}

void group_sums(const Problem& p, std::vector<float>& xsum) {
  const int groups = p.K / p.group_size, stride = xsum_stride(groups);
  xsum.assign(static_cast<size_t>(p.M) * stride, 0.0f);
  for (int m = 0; m < p.M; ++m) {
    const float* row = p.x + static_cast<int64_t>(m) * p.K;
    for (int g = 0; g < groups; ++g) {
      float sum = 0.0f;
      for (int k = g * p.group_size; k < (g + 1) * p.group_size; ++k) {
        sum += row[k];
      }
      xsum[static_cast<size_t>(m) * stride + g] = sum;
    }
  }
}

void check(const Problem& p) {
  if (p.bits != 4 && p.bits != 8) {
    throw std::invalid_argument("qmm: bits must be 4 or 8, not " + std::to_string(p.bits));
  }
  if (p.group_size != 32 && p.group_size != 64 && p.group_size != 128) {
    throw std::invalid_argument("qmm: group_size must be 32, 64 or 128");
  }
  if (p.K % p.group_size != 0) {
    throw std::invalid_argument("qmm: K must be a multiple of group_size");
  }
}

// Rows of output columns per sgemm: a tile of 128 x K floats stays in L2.
constexpr int kTile = 128;
// Weights x rows in a chunk of a decode matmul that one thread claims (a few microseconds).
constexpr int64_t kChunkWork = 32768;

// With int16 activations on, the decode tiles compute each row from x's int16 image and a
// per-group correction (kernels_q8.cpp): this path computes the same sum from the same two
// parts, so that a row's output does not depend on how many rows share its call (drafted
// and plain replies, a row batched and alone), whichever path its call takes.
struct Int16Image {
  std::vector<float> x;  // M x K: x's int16 image, in x's own order
  Q16Rows q;             // its corrections: middle x (sum of x - sum of the image) a group
};

void int16_image(const Problem& p, Int16Image& image) {
  quantize_q16(p, image.q);
  const int chunks = p.K / 32;
  image.x.resize(static_cast<size_t>(p.M) * p.K);
  for (int m = 0; m < p.M; ++m) {
    for (int c = 0; c < chunks; ++c) {
      const int64_t at = static_cast<int64_t>(m) * p.K + c * 32;
      const float scale = image.q.scales[static_cast<size_t>(m) * chunks + c];
      for (int i = 0; i < 32; ++i) {
        const int from = p.bits == 4 ? (i % 2) * 16 + i / 2 : i;  // quantize's nibble order
        image.x[at + i] = static_cast<float>(image.q.values[at + from]) * scale;
      }
    }
  }
}

// y[:, n0:n1] += the corrections times (scale + bias / middle) of each group: the tiles'
// middle x scale x correction term, and their bias x (sum of x) where sgemm on the image
// gave bias x (sum of the image).
void add_int16_corrections(const Problem& p, const Int16Image& image, Sgemm gemm, int n0,
                           int n1, std::vector<float>& weights) {
  const int groups = p.K / p.group_size, stride = xsum_stride(groups);
  const float middle = static_cast<float>(1 << (p.bits - 1));
  weights.resize(static_cast<size_t>(n1 - n0) * groups);
  for (int n = n0; n < n1; ++n) {
    for (int g = 0; g < groups; ++g) {
      const int64_t at = static_cast<int64_t>(n) * groups + g;
      weights[static_cast<size_t>(n - n0) * groups + g] =
          scale_at(p.scales, p.scale_type, at) + scale_at(p.biases, p.scale_type, at) / middle;
    }
  }
  gemm(101, 111, 112, p.M, n1 - n0, groups, 1.0f, image.q.corrections.data(), stride,
       weights.data(), groups, 1.0f, p.y + n0, p.N);
}

void blas_path(const Problem& p, Sgemm gemm, int threads) {
  const bool fast = avx2_supported();
  const bool int16 = fast && !int8_activations() && int16_activations();
  Int16Image image;
  if (int16) int16_image(p, image);
  const float* x = int16 ? image.x.data() : p.x;
  const int tiles = (p.N + kTile - 1) / kTile;
  parallel_for(tiles, threads, 1, [&](int first, int last) {
    thread_local std::vector<float> scratch, weights;
    scratch.resize(static_cast<size_t>(kTile) * p.K);
    for (int t = first; t < last; ++t) {
      const int n0 = t * kTile, n1 = std::min(p.N, n0 + kTile);
      fast ? dequantize_avx2(p, n0, n1, scratch.data())
           : dequantize_scalar(p, n0, n1, scratch.data());
      // Row-major (101), x as is (111), the tile transposed (112).
      gemm(101, 111, 112, p.M, n1 - n0, p.K, 1.0f, x, p.K, scratch.data(), p.K,
           0.0f, p.y + n0, p.N);
      if (int16) add_int16_corrections(p, image, gemm, n0, n1, weights);
    }
  });
}

}  // namespace

int blas_min_rows() { return g_blas_min_rows; }
void set_blas_min_rows(int rows) { g_blas_min_rows = std::max(rows, 0); }
bool blas_found() { return sgemm() != nullptr; }
int thread_count() {
  static const int cpus = usable_cpus();
  return g_threads > 0 ? g_threads : cpus;
}
void set_thread_count(int threads) { g_threads = std::max(threads, 0); }
int64_t parallel_min_work() { return g_parallel_min; }
void set_parallel_min_work(int64_t work) { g_parallel_min = std::max<int64_t>(work, 0); }
bool avx512_allowed() { return g_avx512; }
void set_avx512_allowed(bool on) { g_avx512 = on; }
const char* kernel_name() {
  if (g_avx512 && avx512_supported()) return "avx512";
  return avx2_supported() ? "avx2" : "scalar";
}

namespace {

// A problem made ready for its output columns to be computed in any split, on any thread:
// x's group sums and the layout its kernel reads (compute's set-up, once a call).
struct Ready {
  Problem p;
  std::vector<float> xsum, reordered;
  Q8Rows q8;
  Q16Rows q16;
  const float* x = nullptr;
  bool int8 = false, int16 = false, wide = false, fast = false;

  void prepare(const Problem& problem) {
    p = problem;
    group_sums(p, xsum);
    fast = avx2_supported();
    int8 = fast && int8_activations();
    int16 = fast && !int8 && int16_activations();
    if (int8) quantize_q8(p, q8);
    if (int16) quantize_q16(p, q16);
    wide = !int8 && !int16 && g_avx512 && avx512_supported();
    x = wide || (fast && !int8 && !int16) ? x_in_nibble_order(p, wide ? 32 : 16, reordered)
                                          : p.x;
  }

  // Output columns [n0, n1) of every row.
  void run(int n0, int n1) const {
    if (int8) {
      rows_q8_avx2(p, xsum.data(), q8, n0, n1);
    } else if (int16) {
      rows_q16_avx2(p, xsum.data(), q16, n0, n1);
    } else if (wide) {
      rows_avx512(p, x, xsum.data(), n0, n1);
    } else {
      fast ? rows_avx2(p, x, xsum.data(), n0, n1) : rows_scalar(p, xsum.data(), n0, n1);
    }
  }
};

// Blocks of 16 output columns, claimed in runs of at least kChunkWork weights x rows: a
// claim costs a compare-and-swap on a line both threads write, so a run must outweigh it.
int grain_for(const Problem& p) {
  return std::max<int>(1, kChunkWork / (16 * int64_t{p.K} * std::min(p.M, 8)));
}

}  // namespace

void compute(const Problem& p) { compute_many(&p, 1); }

void compute_many(const Problem* problems, int count) {
  // Buffers reused: a decode step makes ~200 calls.
  thread_local std::vector<Ready> readies;
  thread_local std::vector<int> first_block;  // problem i's blocks: [first_block[i], [i+1])
  first_block.assign(1, 0);
  int64_t work = 0;
  int grain = 1, ready_count = 0;
  for (int i = 0; i < count; ++i) {
    const Problem& p = problems[i];
    check(p);
    if (sgemm() != nullptr && g_blas_min_rows > 0 && p.M >= g_blas_min_rows) {
      blas_path(p, sgemm(), threads_for(int64_t{p.N} * p.K * 8));
      continue;
    }
    if (static_cast<int>(readies.size()) <= ready_count) readies.resize(ready_count + 1);
    readies[ready_count++].prepare(p);
    first_block.push_back(first_block.back() + (p.N + 15) / 16);
    work += int64_t{p.N} * p.K * std::min(p.M, 8);
    grain = std::max(grain, grain_for(p));
  }
  if (ready_count == 0) return;
  // Plain pointers: in the lambda, a thread_local's name is the running thread's.
  const Ready* ready = readies.data();
  const int* firsts = first_block.data();
  parallel_for(first_block.back(), threads_for(work), grain, [=](int first, int last) {
    int i = static_cast<int>(std::upper_bound(firsts, firsts + ready_count + 1, first) - firsts) - 1;
    for (; first < last; ++i) {
      const int end = std::min(last, firsts[i + 1]), N = ready[i].p.N;
      ready[i].run((first - firsts[i]) * 16, std::min(N, (end - firsts[i]) * 16));
      first = end;
    }
  });
}

const float* x_in_nibble_order(const Problem& p, int run, std::vector<float>& out) {
  if (p.bits != 4) return p.x;
  const int half = run / 2;
  out.resize(static_cast<size_t>(p.M) * p.K);
  for (int64_t at = 0; at < static_cast<int64_t>(p.M) * p.K; at += run) {
    for (int i = 0; i < half; ++i) {
      out[at + i] = p.x[at + 2 * i];
      out[at + half + i] = p.x[at + 2 * i + 1];
    }
  }
  return out.data();
}

float scale_at(const void* data, ScaleType type, int64_t index) {
  switch (type) {
    case ScaleType::Float32:
      return static_cast<const float*>(data)[index];
    case ScaleType::BFloat16: {
      uint32_t bits = static_cast<uint32_t>(static_cast<const uint16_t*>(data)[index]) << 16;
      float value;
      std::memcpy(&value, &bits, 4);
      return value;
    }
    case ScaleType::Float16:
    default: {
      // IEEE half to float, subnormals included.
      uint16_t h = static_cast<const uint16_t*>(data)[index];
      uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
      int exponent = (h >> 10) & 0x1F;
      uint32_t mantissa = h & 0x3FF;
      uint32_t bits;
      if (exponent == 0x1F) {
        bits = sign | 0x7F800000 | (mantissa << 13);
      } else if (exponent != 0) {
        bits = sign | (static_cast<uint32_t>(exponent + 112) << 23) | (mantissa << 13);
      } else if (mantissa == 0) {
        bits = sign;
      } else {
        int shift = 0;
        while ((mantissa & 0x400) == 0) {
          mantissa <<= 1;
          ++shift;
        }
        bits = sign | (static_cast<uint32_t>(113 - shift) << 23) | ((mantissa & 0x3FF) << 13);
      }
      float value;
      std::memcpy(&value, &bits, 4);
      return value;
    }
  }
}

namespace {

inline int quant_at(const uint8_t* row, int bits, int k) {
  if (bits == 8) {
    return row[k];
  }
  return (row[k >> 1] >> ((k & 1) * 4)) & 0xF;
}

}  // namespace

void rows_scalar(const Problem& p, const float* xsum, int n0, int n1) {
  const int groups = p.K / p.group_size, stride = xsum_stride(groups);
  const int64_t row_bytes = static_cast<int64_t>(p.K) * p.bits / 8;
  for (int n = n0; n < n1; ++n) {
    const uint8_t* row = p.w + n * row_bytes;
    for (int m = 0; m < p.M; ++m) {
      const float* x = p.x + static_cast<int64_t>(m) * p.K;
      float total = 0.0f;
      for (int g = 0; g < groups; ++g) {
        float dot = 0.0f;
        for (int k = g * p.group_size; k < (g + 1) * p.group_size; ++k) {
          dot += x[k] * static_cast<float>(quant_at(row, p.bits, k));
        }
        const int64_t at = static_cast<int64_t>(n) * groups + g;
        total += scale_at(p.scales, p.scale_type, at) * dot +
                 scale_at(p.biases, p.scale_type, at) * xsum[m * stride + g];
      }
      p.y[static_cast<int64_t>(m) * p.N + n] = total;
    }
  }
}

void dequantize_scalar(const Problem& p, int n0, int n1, float* out) {
  const int groups = p.K / p.group_size;
  const int64_t row_bytes = static_cast<int64_t>(p.K) * p.bits / 8;
  for (int n = n0; n < n1; ++n) {
    const uint8_t* row = p.w + n * row_bytes;
    float* dst = out + static_cast<int64_t>(n - n0) * p.K;
    for (int k = 0; k < p.K; ++k) {
      const int64_t at = static_cast<int64_t>(n) * groups + k / p.group_size;
      dst[k] = scale_at(p.scales, p.scale_type, at) * quant_at(row, p.bits, k) +
               scale_at(p.biases, p.scale_type, at);
    }
  }
}

}  // namespace mlxlab
