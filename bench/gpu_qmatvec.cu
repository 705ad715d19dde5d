// The 4-bit matvec kernels on their own, on CUDA cores (quantized_matvec.cuh) and on tensor
// cores (tensor_quantized_matvec.cuh): exact against a host reference, and their speed on
// the Llama-1B shape (16 layers), the default model's (SmolLM2-135M, 30) or Llama-3.1-8B's (32).
//
//   nvcc -O3 -std=c++17 -arch=sm_90 -o qmatvec bench/gpu_qmatvec.cu
//   ./qmatvec [batches, default 1,2,4,8] [cores|tensor, default both] [llama-1b|smollm2|llama-8b]
//
// Random 4-bit weights, group 64, bf16 scales and biases (as mlx-lm's quantize makes them),
// for each matrix of a layer and the lm_head. Per matrix and batch: the largest difference
// from a host computation of the same sums in double (the kernel's inputs rounded to bf16 as
// it rounds them), relative to the largest output; then microseconds a call (200 calls
// after 20, CUDA events), the weight bytes read a second, and what one step of its layers and
// the head would take. The quantized embedding gather is checked too.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../native/cuda_decode/src/tensor_quantized_matvec.cuh"

namespace cd = mlxlab::cuda_decode;
using bf16 = __nv_bfloat16;

namespace {

constexpr int kGroup = 64;

void check(cudaError_t error, const char* what) {
  if (error != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(error));
    std::exit(1);
  }
}

float round_bf16(float v) {  // to nearest even, as __float2bfloat16
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  bits &= 0xffff0000u;
  std::memcpy(&v, &bits, 4);
  return v;
}

uint16_t bf16_bits(float v) {
  v = round_bf16(v);
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  return static_cast<uint16_t>(bits >> 16);
}

template <typename T>
T* upload(const std::vector<T>& host) {
  T* device = nullptr;
  check(cudaMalloc(&device, host.size() * sizeof(T)), "cudaMalloc");
  check(cudaMemcpy(device, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), "copy");
  return device;
}

std::vector<float> download_bf16(const void* device, size_t count) {
  std::vector<uint16_t> bits(count);
  check(cudaMemcpy(bits.data(), device, count * 2, cudaMemcpyDeviceToHost), "copy back");
  std::vector<float> out(count);
  for (size_t i = 0; i < count; ++i) {
    uint32_t word = static_cast<uint32_t>(bits[i]) << 16;
    std::memcpy(&out[i], &word, 4);
  }
  return out;
}

// A quantized matrix, on the host (nibbles, scales and biases as floats already in bf16)
// and on the device (packed).
struct Matrix {
  int rows, depth;
  std::vector<uint8_t> q;
  std::vector<float> scale, bias;
  uint32_t* words;
  bf16 *scales, *biases;

  Matrix(int rows_, int depth_, std::mt19937& random) : rows(rows_), depth(depth_) {
    std::uniform_int_distribution<int> nibble(0, 15);
    std::uniform_real_distribution<float> spread(0.001f, 0.004f);
    q.resize(static_cast<size_t>(rows) * depth);
    for (auto& v : q) v = static_cast<uint8_t>(nibble(random));
    const size_t groups = static_cast<size_t>(rows) * depth / kGroup;
    scale.resize(groups);
    bias.resize(groups);
    std::vector<uint16_t> scale_bits(groups), bias_bits(groups);
    for (size_t g = 0; g < groups; ++g) {
      scale[g] = round_bf16(spread(random));
      bias[g] = round_bf16(-7.5f * scale[g]);
      scale_bits[g] = bf16_bits(scale[g]);
      bias_bits[g] = bf16_bits(bias[g]);
    }
    std::vector<uint32_t> packed(q.size() / 8, 0);
    for (size_t i = 0; i < q.size(); ++i) packed[i / 8] |= static_cast<uint32_t>(q[i]) << (4 * (i % 8));
    words = upload(packed);
    scales = reinterpret_cast<bf16*>(upload(scale_bits));
    biases = reinterpret_cast<bf16*>(upload(bias_bits));
  }

  double weight(int row, int column) const {
    const size_t g = (static_cast<size_t>(row) * depth + column) / kGroup;
    return static_cast<double>(scale[g]) * q[static_cast<size_t>(row) * depth + column] + bias[g];
  }

  size_t bytes() const { return q.size() / 2 + 4 * q.size() / kGroup; }
};

std::vector<float> random_rows(size_t count, std::mt19937& random, float low, float high) {
  std::uniform_real_distribution<float> value(low, high);
  std::vector<float> out(count);
  for (auto& v : out) v = round_bf16(value(random));
  return out;
}

std::vector<uint16_t> bits_of(const std::vector<float>& values) {
  std::vector<uint16_t> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) out[i] = bf16_bits(values[i]);
  return out;
}

// RMSNorm(x) * weight as the kernel stages it: x * normalizer rounded, times the weight,
// rounded.
std::vector<float> normed(const std::vector<float>& x, const std::vector<float>& weight,
                          int batch, int depth, float eps) {
  std::vector<float> out(x.size());
  for (int b = 0; b < batch; ++b) {
    double squares = 0.0;
    for (int j = 0; j < depth; ++j) squares += static_cast<double>(x[b * depth + j]) * x[b * depth + j];
    const float normalizer = 1.0f / std::sqrt(static_cast<float>(squares / depth) + eps);
    for (int j = 0; j < depth; ++j) {
      out[b * depth + j] = round_bf16(weight[j] * round_bf16(x[b * depth + j] * normalizer));
    }
  }
  return out;
}

enum class Kind { kPlain, kResidual, kSwiglu };

struct Case {
  const char* name;
  int n_out, depth;
  Kind kind;
  bool norm;
  int per_step;  // calls in one step: 16 layers, or 1 for the head
};

bool tensor_cores = false;  // which kernel run() launches

template <int B, int MODE, bool NORM>
cudaError_t launch(const Matrix& m, const void* x, const void* norm, void* out, int n_out,
                   int batch) {
  int device = 0, sms = 0, per_sm = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (tensor_cores) {  // as the step's launch_quantized() launches it
    constexpr auto kernel = cd::tensor_quantized_matvec<bf16, (B < 8 ? 8 : B), MODE, NORM, 4, kGroup>;
    const size_t shared = (NORM ? sizeof(bf16) * batch * cd::staged_pitch(m.depth) : 0) +
                          cd::tensor_partials_bytes(B);
    check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024),
          "shared memory");
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, cd::kTensorThreads, shared);
    const int resident = sms * std::max(per_sm, 1), tiles = cd::tile_count<MODE>(n_out);
    int splits = 1;
    while (splits < cd::kTensorWarps && tiles * splits < resident * cd::kTensorWarps) splits *= 2;
    const int per_block = cd::kTensorWarps / splits;
    const int blocks = std::min((tiles + per_block - 1) / per_block, resident);
    kernel<<<blocks, cd::kTensorThreads, shared>>>(
        m.words, m.scales, m.biases, static_cast<const bf16*>(x), static_cast<const bf16*>(norm),
        1e-5f, static_cast<bf16*>(out), n_out, m.depth, batch, splits);
    return cudaGetLastError();
  }
  constexpr auto kernel = cd::quantized_matvec<bf16, B, MODE, NORM, 4, kGroup>;
  const size_t input = sizeof(bf16) * batch * m.depth;
  const bool stage = !NORM && input <= 46 * 1024;
  const size_t shared = NORM || stage ? input : 0;
  if (shared > 46 * 1024) {
    check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024),
          "shared memory");
  }
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, cd::kThreads, shared);
  const int units = MODE == cd::kSwiglu ? n_out : (n_out + 1) / 2;
  const int blocks = std::min((units + cd::kWarps - 1) / cd::kWarps, sms * std::max(per_sm, 1));
  kernel<<<blocks, cd::kThreads, shared>>>(m.words, m.scales, m.biases,
                                           static_cast<const bf16*>(x),
                                           static_cast<const bf16*>(norm), 1e-5f,
                                           static_cast<bf16*>(out), n_out, m.depth, batch, stage);
  return cudaGetLastError();
}

template <int B>
cudaError_t launch_case(const Case& c, const Matrix& m, const void* x, const void* norm,
                        void* out, int batch) {
  switch (c.kind) {
    case Kind::kPlain:
      return c.norm ? launch<B, cd::kPlain, true>(m, x, norm, out, c.n_out, batch)
                    : launch<B, cd::kPlain, false>(m, x, norm, out, c.n_out, batch);
    case Kind::kResidual: return launch<B, cd::kResidual, false>(m, x, norm, out, c.n_out, batch);
    default: return launch<B, cd::kSwiglu, true>(m, x, norm, out, c.n_out, batch);
  }
}

cudaError_t run(const Case& c, const Matrix& m, const void* x, const void* norm, void* out,
                int batch) {
  if (batch <= 1) return launch_case<1>(c, m, x, norm, out, batch);
  if (batch <= 2) return launch_case<2>(c, m, x, norm, out, batch);
  if (batch <= 4) return launch_case<4>(c, m, x, norm, out, batch);
  if (batch <= 8) return launch_case<8>(c, m, x, norm, out, batch);
  if (batch <= 16) return launch_case<16>(c, m, x, norm, out, batch);
  return launch_case<32>(c, m, x, norm, out, batch);
}

// The host's output for row `r` of batch row `b`, from `residual` (what out held before)
// where it adds.
double reference(const Case& c, const Matrix& m, const std::vector<float>& input,
                 const std::vector<float>& residual, int b, int r) {
  auto dot = [&](int row) {
    double sum = 0.0;
    for (int j = 0; j < m.depth; ++j) sum += m.weight(row, j) * input[b * m.depth + j];
    return sum;
  };
  const double value = dot(r);
  if (c.kind == Kind::kSwiglu) {
    const double gate = round_bf16(static_cast<float>(value));
    const double up = round_bf16(static_cast<float>(dot(r + c.n_out)));
    const double sigmoid = round_bf16(static_cast<float>(1.0 / (1.0 + std::exp(-gate))));
    return round_bf16(static_cast<float>(gate * sigmoid)) * up;
  }
  if (c.kind == Kind::kResidual) {
    return residual[b * c.n_out + r] + round_bf16(static_cast<float>(value));
  }
  return value;
}

std::vector<int> parse(const char* text) {
  std::vector<int> values;
  std::string s(text);
  for (size_t at = 0; at < s.size();) {
    size_t comma = s.find(',', at);
    if (comma == std::string::npos) comma = s.size();
    values.push_back(std::stoi(s.substr(at, comma - at)));
    at = comma + 1;
  }
  return values;
}

// Each case at each batch: checked against the host, then timed; one step's sum at the end.
bool measure(const std::vector<Case>& cases, const std::vector<int>& batches, int layers) {
  std::mt19937 random(18);
  // Rows checked against the host: enough to cover every warp's two rows and the tail.
  const int checked_rows = 96;
  std::vector<double> step_us(batches.size(), 0.0);
  size_t step_bytes = 0;
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  bool exact = true;
  for (const Case& c : cases) {
    const int rows = c.kind == Kind::kSwiglu ? 2 * c.n_out : c.n_out;
    Matrix m(rows, c.depth, random);
    step_bytes += m.bytes() * c.per_step;
    const int most = *std::max_element(batches.begin(), batches.end());
    const std::vector<float> x = random_rows(static_cast<size_t>(most) * c.depth, random, -1.0f, 1.0f);
    const std::vector<float> norm = random_rows(c.depth, random, 0.5f, 1.5f);
    const std::vector<float> residual = random_rows(static_cast<size_t>(most) * c.n_out, random, -2.0f, 2.0f);
    void* x_device = upload(bits_of(x));
    void* norm_device = upload(bits_of(norm));
    const std::vector<uint16_t> residual_bits = bits_of(residual);
    void* out_device = upload(residual_bits);
    for (size_t bi = 0; bi < batches.size(); ++bi) {
      const int batch = batches[bi];
      check(cudaMemcpy(out_device, residual_bits.data(), residual_bits.size() * 2,
                       cudaMemcpyHostToDevice), "reset");
      check(run(c, m, x_device, norm_device, out_device, batch), c.name);
      check(cudaDeviceSynchronize(), c.name);
      const std::vector<float> got = download_bf16(out_device, static_cast<size_t>(batch) * c.n_out);
      // The host's sums over the first and last rows only (all of them would take minutes).
      const std::vector<float> input = c.norm ? normed(x, norm, batch, c.depth, 1e-5f) : x;
      double worst = 0.0, largest = 0.0;
      for (int b = 0; b < batch; ++b) {
        for (int r = 0; r < c.n_out; ++r) {
          if (r >= checked_rows / 2 && r < c.n_out - checked_rows / 2) continue;
          const double w = reference(c, m, input, residual, b, r), g = got[b * c.n_out + r];
          worst = std::max(worst, std::abs(w - g));
          largest = std::max(largest, std::abs(w));
        }
      }
      const double relative = worst / std::max(largest, 1e-9);
      exact = exact && relative < 0.02;
      for (int i = 0; i < 20; ++i) run(c, m, x_device, norm_device, out_device, batch);
      cudaEventRecord(start);
      for (int i = 0; i < 200; ++i) run(c, m, x_device, norm_device, out_device, batch);
      cudaEventRecord(stop);
      check(cudaEventSynchronize(stop), "timing");
      float ms = 0.0f;
      cudaEventElapsedTime(&ms, start, stop);
      const double us = 1000.0 * ms / 200;
      step_us[bi] += us * c.per_step;
      std::printf("%-8s %5dx%-5d batch %d: %7.2f us  %6.0f GB/s  error %.4f of the largest%s\n",
                  c.name, rows, c.depth, batch, us, m.bytes() / us / 1000.0, relative,
                  relative < 0.02 ? "" : "  (TOO FAR)");
    }
    cudaFree(x_device);
    cudaFree(norm_device);
    cudaFree(out_device);
    cudaFree(m.words);
    cudaFree(m.scales);
    cudaFree(m.biases);
  }
  for (size_t bi = 0; bi < batches.size(); ++bi) {
    std::printf("one step's matvecs (%d layers and the head), batch %d: %.1f us, %.0f GB/s, "
                "%.0f tok/s\n",
                layers, batches[bi], step_us[bi], step_bytes / step_us[bi] / 1000.0,
                batches[bi] * 1e6 / step_us[bi]);
  }
  return exact;
}

// The embedding gather: a token's row dequantized, against the host.
bool check_embed(int hidden) {
  std::mt19937 random(19);
  Matrix table(1024, hidden, random);
  std::vector<int32_t> tokens = {0, 517, 1023};
  int32_t* tokens_device = upload(tokens);
  void* x_device = nullptr;
  check(cudaMalloc(&x_device, tokens.size() * hidden * 2), "cudaMalloc");
  cd::quantized_embed<bf16, 4, kGroup><<<tokens.size(), cd::kThreads>>>(
      table.words, table.scales, table.biases, tokens_device, static_cast<bf16*>(x_device),
      hidden);
  check(cudaDeviceSynchronize(), "embed");
  const std::vector<float> got = download_bf16(x_device, tokens.size() * hidden);
  int wrong = 0;
  for (size_t t = 0; t < tokens.size(); ++t) {
    for (int j = 0; j < hidden; ++j) {
      const float want = round_bf16(static_cast<float>(table.weight(tokens[t], j)));
      wrong += got[t * hidden + j] != want;
    }
  }
  std::printf("embed    %d of %zu values differ from the host's dequantized rows\n", wrong,
              tokens.size() * hidden);
  return wrong == 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<int> batches = parse(argc > 1 ? argv[1] : "1,2,4,8");
  const std::string kinds = argc > 2 ? argv[2] : "cores,tensor";
  const std::string shape = argc > 3 ? argv[3] : "llama-1b";
  const bool small = shape == "smollm2", large = shape == "llama-8b";
  // Llama-1B: 16 layers of 2048; the default model: 30 of 576 (its 4.5 rounds of 128
  // columns take the tensor kernel's tail); Llama-3.1-8B: 32 of 4096, heads of 128.
  const int hidden = small ? 576 : large ? 4096 : 2048, vocab = 49152;
  const int intermediate = small ? 1536 : large ? 14336 : 8192;
  const int qkv = small ? (9 + 2 * 3) * 64 : (32 + 2 * 8) * (large ? 128 : 64);
  const int layers = small ? 30 : large ? 32 : 16;
  const std::vector<Case> cases = {
      {"qkv", qkv, hidden, Kind::kPlain, true, layers},
      {"o", hidden, hidden, Kind::kResidual, false, layers},
      {"gate_up", intermediate, hidden, Kind::kSwiglu, true, layers},
      {"down", hidden, intermediate, Kind::kResidual, false, layers},
      {"lm_head", vocab, hidden, Kind::kPlain, true, 1},
  };
  bool exact = true;
  for (const char* kind : {"cores", "tensor"}) {
    if (kinds.find(kind) == std::string::npos) continue;
    tensor_cores = std::string(kind) == "tensor";
    std::printf("== %s, %s shape\n", tensor_cores ? "tensor cores" : "CUDA cores", shape.c_str());
    exact = measure(cases, batches, layers) && exact;
  }
  exact = check_embed(hidden) && exact;
  std::printf("%s\n", exact ? "all within 2% of the host" : "SOME DIFFER");
  return exact ? 0 : 1;
}
