// The decode step as one MLX primitive on MLX's CUDA stream.
//
// MLX's CUDA backend records every kernel of a step into a new CUDA graph, about 7 us of
// host time each, and that host work bounded a 1B model's decode step on an H200 (276
// kernels, 3.4 ms, 1.46 of them on the device: docs/BENCHMARKS.md). Here the step is one
// node of MLX's graph: its evaluation commits what MLX has recorded so far and launches
// the step's own ~5 kernels a layer on the same stream, as one CUDA graph (Replay), so
// MLX's ordering and its buffers' lifetimes hold as for any primitive. Its inputs are the
// step's tokens, positions and caches; the weights stay with the model.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "gemm.h"
#include "kernels.h"
#include "mlx/backend/cuda/device.h"
#include "mlx/backend/cuda/utils.h"
#include "mlx/ops.h"
#include "mlx/primitives.h"
#include "mlx/transforms.h"

namespace nb = nanobind;
namespace mx = mlx::core;
namespace cd = mlxlab::cuda_decode;
using namespace nb::literals;

namespace {

constexpr int kWeightsPerLayer = 6;  // input norm, qkv, o, post norm, gate_up, down
constexpr int kHeadNorms = 2;  // then, where the layers norm their heads: q norm, k norm
constexpr int kQkvBias = 1;  // then, where their q/k/v projections have biases: those
constexpr int kFirstLayer = 3;  // after the embedding, the final norm and lm_head
// Measured on an H200 (docs/BENCHMARKS.md): tensor cores led from 4 rows (3,117 against
// 2,372 tok/s) and trailed at 2 (1,484 against 1,690); overlapping kernels gained up to 8
// rows and lost at 16.
constexpr int kTensorRows = 3;
constexpr int kOverlapRows = 16;
// From 16 rows cuBLAS read the step's matmul weights 2-7x faster than the tensor-core
// matvecs on an H200 (bench/gpu_gemm_shapes.cu against bench/gpu_step_kernels.cu).
constexpr int kGemmRows = 16;
constexpr int kNever = 1 << 30;  // a row count no batch reaches

// The most rows a quantized model's step takes on its own kernels: up to kMaxBatch, fewer
// where their staged input outgrows shared memory (a hidden size of 4,096: 23 rows on an H100).
// Past them its step runs the cuBLAS path's norms and attention around its quantized
// matrices on tensor cores (step_gemm), so no batch size falls between the two.
int own_rows(cd::Shape s) {
  s.gemm_rows = kNever;
  for (s.batch = cd::kMaxBatch; s.batch > 1 && !cd::fits(s); --s.batch) {
  }
  return s.batch;
}

std::atomic<long> cache_copies{0};

void check(cudaError_t error, const char* what) {
  if (error != cudaSuccess) {
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(error));
  }
}

// Device memory for the step's activations, held for the model's life: every step runs on
// one stream, so one buffer serves them all in turn.
class Scratch {
 public:
  explicit Scratch(size_t bytes) : bytes_(bytes) { check(cudaMalloc(&data_, bytes), "cudaMalloc"); }
  ~Scratch() { cudaFree(data_); }
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  size_t bytes_;
};

// How a step's kernels reach the GPU (Model.replay): one by one; captured into a CUDA graph
// every step; or through a graph kept for the batch and replayed as it is.
enum class Mode { kLaunched, kCaptured, kKept };

// A step's kernels as one CUDA graph. Each launch costs the host 2.6 us on the H200's
// machine, 400 us for a 30-layer model's 152 kernels; capturing them costs about 200 us,
// updating the graph kept for the batch size 8-14 us, and launching it 1.6 us
// (docs/BENCHMARKS.md).
//
// Captured, each step is captured again, as its column, token and output pointers move,
// and the kept graph updated in place. Kept, the graph's kernels read the step's inputs
// from fixed slots that a small kernel fills first, and write the logits to a fixed buffer
// copied out after, so the graph is made again only when the batch's caches move (they grow
// 256 columns at a time, or the batch changes).
class Replay {
 public:
  explicit Replay(size_t logits_row_bytes) : logits_row_bytes_(logits_row_bytes) {
    check(cudaStreamCreateWithFlags(&capture_, cudaStreamNonBlocking), "a stream");
    check(cudaMalloc(&slot_memory_, cd::slot_bytes()), "cudaMalloc");
    check(cudaMalloc(&logits_, logits_row_bytes * cd::kMaxBatch), "cudaMalloc");
    slots_ = cd::carve_slots(slot_memory_);
  }
  ~Replay() {
    for (auto& [batch, graph] : graphs_) cudaGraphExecDestroy(graph.exec);
    cudaFree(logits_);
    cudaFree(slot_memory_);
    cudaStreamDestroy(capture_);
  }
  Replay(const Replay&) = delete;
  Replay& operator=(const Replay&) = delete;

  Mode mode() {
    std::lock_guard<std::mutex> guard(lock_);
    return mode_;
  }
  void set_mode(Mode mode) {
    std::lock_guard<std::mutex> guard(lock_);
    mode_ = mode;
  }

  // The step on `stream` (a batch the step's own kernels take: below Shape::gemm_rows);
  // where capturing fails, the kernels launched one by one from then on.
  cudaError_t run(const cd::Shape& s, const cd::Pointers& p, cudaStream_t stream) {
    std::lock_guard<std::mutex> guard(lock_);
    if (mode_ == Mode::kLaunched) return cd::launch_step(s, p, stream);
    Graph& graph = graphs_[s.batch];
    if (mode_ == Mode::kCaptured) {
      const cudaError_t made = make(s, p, graph);
      if (made != cudaSuccess) return made == kNotCaptured ? fall_back(s, p, stream) : made;
      graph.made_for.clear();  // its pointers are this step's alone
      return cudaGraphLaunch(graph.exec, stream);
    }
    std::vector<uintptr_t> made_for = baked_in(s, p);
    if (graph.exec == nullptr || graph.made_for != made_for) {
      cd::Pointers in_slots = p;
      in_slots.tokens = slots_.tokens;
      in_slots.positions = slots_.positions;
      in_slots.first_columns = slots_.first_columns;
      in_slots.column_at = slots_.column;
      in_slots.logits = logits_;
      const cudaError_t made = make(s, in_slots, graph);
      if (made != cudaSuccess) return made == kNotCaptured ? fall_back(s, p, stream) : made;
      graph.made_for = std::move(made_for);
    }
    cudaError_t error = cd::stage_inputs(s, p, slots_, stream);
    if (error == cudaSuccess) error = cudaGraphLaunch(graph.exec, stream);
    if (error != cudaSuccess) return error;
    return cudaMemcpyAsync(p.logits, logits_, logits_row_bytes_ * s.batch,
                           cudaMemcpyDeviceToDevice, stream);
  }

 private:
  struct Graph {
    cudaGraphExec_t exec = nullptr;
    std::vector<uintptr_t> made_for;  // what a kept graph holds that may change (baked_in)
  };

  // What a kept graph's kernels hold besides the model's weights and the slots: the shape's
  // sizes and tuning, the scratch and every cache buffer.
  static std::vector<uintptr_t> baked_in(const cd::Shape& s, const cd::Pointers& p) {
    std::vector<uintptr_t> held{static_cast<uintptr_t>(s.capacity),
                                static_cast<uintptr_t>(s.tensor_rows),
                                static_cast<uintptr_t>(s.overlap_rows),
                                reinterpret_cast<uintptr_t>(p.scratch)};
    for (const cd::Layer& layer : p.layers) {
      held.push_back(reinterpret_cast<uintptr_t>(layer.keys));
      held.push_back(reinterpret_cast<uintptr_t>(layer.values));
    }
    return held;
  }

  // The step captured into `graph`: its kept executable updated in place, else made anew.
  // A kernel's launch error as it is; kNotCaptured where the graph could not be made.
  static constexpr cudaError_t kNotCaptured = cudaErrorStreamCaptureUnsupported;
  cudaError_t make(const cd::Shape& s, const cd::Pointers& p, Graph& graph) {
    cudaGraph_t captured = nullptr;
    if (cudaStreamBeginCapture(capture_, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
      return kNotCaptured;
    }
    const cudaError_t launched = cd::launch_step(s, p, capture_);
    const cudaError_t ended = cudaStreamEndCapture(capture_, &captured);
    if (launched != cudaSuccess || ended != cudaSuccess) {
      if (captured != nullptr) cudaGraphDestroy(captured);
      return launched != cudaSuccess ? launched : kNotCaptured;
    }
    if (graph.exec != nullptr) {
      cudaGraphExecUpdateResultInfo info;
      if (cudaGraphExecUpdate(graph.exec, captured, &info) != cudaSuccess) {
        cudaGetLastError();  // not an error: other kernels (tuned), a new graph instead
        cudaGraphExecDestroy(graph.exec);
        graph.exec = nullptr;
      }
    }
    const cudaError_t made =
        graph.exec == nullptr ? cudaGraphInstantiate(&graph.exec, captured, 0) : cudaSuccess;
    cudaGraphDestroy(captured);
    if (made == cudaSuccess) return cudaSuccess;
    graph.exec = nullptr;
    return kNotCaptured;
  }

  cudaError_t fall_back(const cd::Shape& s, const cd::Pointers& p, cudaStream_t stream) {
    cudaGetLastError();
    mode_ = Mode::kLaunched;
    return cd::launch_step(s, p, stream);
  }

  std::mutex lock_;
  cudaStream_t capture_ = nullptr;
  std::map<int, Graph> graphs_;  // by batch: a batch's kernels and grids
  Mode mode_ = Mode::kKept;
  size_t logits_row_bytes_;
  void* slot_memory_ = nullptr;
  cd::Slots slots_{};
  void* logits_ = nullptr;  // a kept graph's, copied out to each step's own
};

const std::pair<const char*, Mode> kModes[] = {
    {"launched", Mode::kLaunched}, {"captured", Mode::kCaptured}, {"kept", Mode::kKept}};

// How one of the model's weights is given: one array (a norm, a plain matrix; bits 0), or a
// quantized matrix's packed weight, scales and biases.
struct Format {
  int bits = 0;
  int group = 0;
};
using Formats = std::vector<Format>;  // one a weight, in the step's order

// An output in device memory, freed when MLX lets go of it. (The allocator MLX exports to
// code outside it, allocator::malloc, hands out managed memory, which a kernel's first
// writes page-fault into place: a 32-row step took 25 ms with its outputs there.)
void set_device_data(mx::array& out, cudaStream_t stream) {
  void* data = nullptr;
  check(cudaMallocAsync(&data, out.nbytes(), stream), "cudaMallocAsync");
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  auto* buffer = new mx::cu::CudaBuffer{data, out.nbytes(), device};
  out.set_data(mx::allocator::Data(mx::allocator::Buffer(buffer), [](mx::allocator::Buffer b) {
    auto* held = static_cast<mx::cu::CudaBuffer*>(b.ptr());
    if (held->device >= 0) {  // MLX's work on it is done when it lets go
      cudaFreeAsync(held->data, cudaStreamPerThread);
    } else {  // moved to unified memory for the host to read
      cudaFree(held->data);
    }
    delete held;
  }));
}

// Every weight's arrays in the step's order, then the RoPE frequencies; evaluated once when
// the model is made. They are no inputs of a step's node: MLX's graph work on ~500 inputs a
// step (a 30-layer 4-bit model's) cost more host time than the step's kernels' launches.
using Weights = std::vector<mx::array>;

class DecodeStep : public mx::Primitive {
 public:
  DecodeStep(mx::Stream stream, cd::Shape shape, int layers,
             std::shared_ptr<const Formats> formats, std::shared_ptr<const Weights> weights,
             bool has_freqs, bool copy_caches, std::shared_ptr<Scratch> scratch,
             std::shared_ptr<Replay> replay)
      : mx::Primitive(stream),
        shape_(shape),
        layers_(layers),
        formats_(std::move(formats)),
        weights_(std::move(weights)),
        has_freqs_(has_freqs),
        copy_caches_(copy_caches),
        scratch_(std::move(scratch)),
        replay_(std::move(replay)) {}

  void eval_cpu(const std::vector<mx::array>&, std::vector<mx::array>&) override {
    throw std::runtime_error("MLX Lab's CUDA decode step runs on a CUDA GPU only");
  }

  void eval_gpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override {
    auto& encoder = mx::cu::get_command_encoder(stream());
    // What MLX recorded before this step (the tokens' sampling, say) runs first.
    encoder.commit();
    cudaStream_t cuda_stream = encoder.stream();
    set_device_data(outputs[0], cuda_stream);

    // The weights outlive the kernels that read them, whoever lets go of the model.
    encoder.add_completed_handler([held = weights_]() {});
    for (int i = 0; i < 2 * layers_; ++i) {
      const mx::array& in = inputs[3 + i];
      mx::array& out = outputs[1 + i];
      if (!in.flags().row_contiguous || in.data_size() != in.size()) {
        throw std::runtime_error("the CUDA decode step needs row-contiguous KV caches");
      }
      if (!copy_caches_) {
        out.copy_shared_buffer(in);  // one column written in place (see cuda_decode.py)
      } else {
        set_device_data(out, cuda_stream);
        check(cudaMemcpyAsync(mx::gpu_ptr<void>(out), mx::gpu_ptr<void>(in), in.nbytes(),
                              cudaMemcpyDeviceToDevice, cuda_stream),
              "copying a KV cache");
        cache_copies.fetch_add(1, std::memory_order_relaxed);
      }
    }

    cd::Pointers p;
    p.tokens = mx::gpu_ptr<int32_t>(inputs[0]);
    p.positions = mx::gpu_ptr<int32_t>(inputs[1]);
    p.first_columns = mx::gpu_ptr<int32_t>(inputs[2]);
    const Weights& weights = *weights_;
    size_t w = 0, entry = 0;
    auto single = [&]() {
      ++entry;
      return mx::gpu_ptr<void>(weights[w++]);
    };
    auto matrix = [&]() {
      const Format& format = (*formats_)[entry++];
      cd::Matrix m;
      m.weight = mx::gpu_ptr<void>(weights[w++]);
      if (format.bits != 0) {
        m.scales = mx::gpu_ptr<void>(weights[w++]);
        m.biases = mx::gpu_ptr<void>(weights[w++]);
        m.bits = format.bits;
        m.group = format.group;
      }
      return m;
    };
    p.embedding = matrix();
    p.final_norm = single();
    p.lm_head = matrix();
    p.layers.resize(layers_);
    for (int l = 0; l < layers_; ++l) {
      cd::Layer& layer = p.layers[l];
      layer.input_norm = single();
      layer.qkv = matrix();
      layer.o = matrix();
      layer.post_norm = single();
      layer.gate_up = matrix();
      layer.down = matrix();
      if (shape_.qk_eps > 0.0f) {
        layer.q_norm = single();
        layer.k_norm = single();
      }
      if (shape_.qkv_bias) layer.qkv_bias = single();
      layer.keys = mx::gpu_ptr<void>(outputs[1 + 2 * l]);
      layer.values = mx::gpu_ptr<void>(outputs[2 + 2 * l]);
    }
    p.rope_freqs = has_freqs_ ? mx::gpu_ptr<float>(weights[w++]) : nullptr;  // after the weights
    p.logits = mx::gpu_ptr<void>(outputs[0]);
    p.scratch = scratch_->data();
    if (cd::scratch_bytes(shape_) > scratch_->bytes()) {
      throw std::runtime_error("the CUDA decode step's scratch is too small for this batch");
    }
    // cuBLAS's calls stay out of the graphs: its workspace is its own.
    const bool own_kernels = shape_.batch < shape_.gemm_rows;
    check(own_kernels ? replay_->run(shape_, p, cuda_stream)
                      : cd::launch_step(shape_, p, cuda_stream),
          "launching the CUDA decode step");
  }

  const char* name() const override { return "MLXLabCudaDecodeStep"; }

 private:
  cd::Shape shape_;
  int layers_;
  std::shared_ptr<const Formats> formats_;
  std::shared_ptr<const Weights> weights_;
  bool has_freqs_;
  bool copy_caches_;
  std::shared_ptr<Scratch> scratch_;
  std::shared_ptr<Replay> replay_;
};

// Entry `entry`'s (rows, depth) in the step's order, or (0, width) for a norm or a bias;
// `per_layer` entries a layer.
std::pair<int, int> weight_shape(int entry, const cd::Shape& s, int per_layer) {
  if (entry < kFirstLayer) return entry == 1 ? std::pair{0, s.hidden} : std::pair{s.vocab, s.hidden};
  const int index = (entry - kFirstLayer) % per_layer;
  if (s.qkv_bias && index == per_layer - 1) return {0, (s.heads + 2 * s.kv_heads) * s.head_dim};
  switch (index) {
    case 1: return {(s.heads + 2 * s.kv_heads) * s.head_dim, s.hidden};  // qkv
    case 2: return {s.hidden, s.heads * s.head_dim};  // o
    case 4: return {2 * s.intermediate, s.hidden};  // gate_up
    case 5: return {s.hidden, s.intermediate};  // down
    case 6:
    case 7: return {0, s.head_dim};  // the q and k head norms
    default: return {0, s.hidden};  // a norm
  }
}

// How a weight of (rows, depth) is given; invalid_argument where the step cannot read it.
Format read_format(const std::vector<mx::array>& arrays, int rows, int depth, mx::Dtype dtype) {
  auto fail = [](const std::string& why) { throw std::invalid_argument(why); };
  if (arrays.size() == 1) {
    const mx::array& a = arrays[0];
    const bool shaped = rows == 0 ? a.ndim() == 1 && a.shape(0) == depth
                                  : a.ndim() == 2 && a.shape(0) == rows && a.shape(1) == depth;
    if (!shaped) fail("a weight's shape does not match the model's");
    if (a.dtype() != dtype) fail("weights of mixed dtypes");
    return {};
  }
  if (arrays.size() != 3 || rows == 0) fail("a weight is one array, or packed, scales, biases");
  const mx::array &packed = arrays[0], &scales = arrays[1], &biases = arrays[2];
  if (packed.dtype() != mx::uint32 || packed.ndim() != 2 || scales.ndim() != 2 ||
      packed.shape(0) != rows || scales.shape() != biases.shape() || scales.shape(0) != rows ||
      scales.dtype() != dtype || biases.dtype() != dtype) {
    fail("a quantized weight's arrays do not match the model's shapes and dtype");
  }
  const int words = packed.shape(1), groups = scales.shape(1);
  Format format;
  format.bits = words * 32 / depth;
  format.group = groups > 0 ? depth / groups : 0;
  if (words * 32 % depth != 0 || groups == 0 || depth % groups != 0 ||
      !cd::takes_quantization(format.bits, format.group)) {
    fail("a quantization the CUDA decode step lacks (it takes 4 or 8 bits, groups of 32 or 64)");
  }
  return format;
}

// A loaded model's weights in the step's order, and what its steps share.
class Model {
 public:
  Model(std::vector<std::vector<mx::array>> weights, int layers, int hidden, int heads,
        int kv_heads, int head_dim, int intermediate, int vocab, float eps,
        float attention_scale, float rope_scale, float rope_base, bool traditional,
        std::optional<mx::array> freqs, float qk_norm_eps, bool qkv_bias)
      : layers_(layers) {
    if (qk_norm_eps < 0.0f) throw std::invalid_argument("a negative head norm epsilon");
    const int per_layer = kWeightsPerLayer + (qk_norm_eps > 0.0f ? kHeadNorms : 0) +
                          (qkv_bias ? kQkvBias : 0);
    if (static_cast<int>(weights.size()) != kFirstLayer + per_layer * layers) {
      throw std::invalid_argument("expected 3 weights, then 6 a layer (and its norms, its bias)");
    }
    dtype_ = weights[1].at(0).dtype();  // the final norm's: the activations'
    if (dtype_ != mx::bfloat16 && dtype_ != mx::float16) {
      throw std::invalid_argument("the CUDA decode step takes bfloat16 or float16 weights");
    }
    cd::Shape& s = shape_;
    s.qkv_bias = qkv_bias;  // before weight_shape reads it
    s.hidden = hidden;
    s.heads = heads;
    s.kv_heads = kv_heads;
    s.head_dim = head_dim;
    s.intermediate = intermediate;
    s.vocab = vocab;
    auto formats = std::make_shared<Formats>();
    auto held = std::make_shared<Weights>();
    bool quantized = false;
    for (size_t entry = 0; entry < weights.size(); ++entry) {
      const auto [rows, depth] = weight_shape(static_cast<int>(entry), s, per_layer);
      formats->push_back(read_format(weights[entry], rows, depth, dtype_));
      quantized = quantized || formats->back().bits != 0;
      held->insert(held->end(), weights[entry].begin(), weights[entry].end());
    }
    formats_ = std::move(formats);
    if (freqs) held->push_back(mx::astype(*freqs, mx::float32));
    mx::eval(*held);  // a step reads their buffers directly
    weights_ = std::move(held);
    has_freqs_ = freqs.has_value();
    s.capacity = 0;
    s.column = 0;
    s.half = dtype_ == mx::float16;
    s.traditional = traditional;
    s.eps = eps;
    s.qk_eps = qk_norm_eps;
    s.attention_scale = attention_scale;
    s.rope_scale = rope_scale;
    // std::log2 of the float base, as MLX's RoPE passes it to its kernel.
    s.log2_base = std::log2(static_cast<float>(rope_base));
    int device = 0, most = 0;
    check(cudaGetDevice(&device), "cudaGetDevice");
    check(cudaDeviceGetAttribute(&most, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
          "reading the GPU's shared memory limit");
    s.shared_limit = static_cast<size_t>(most);
    s.tensor_rows = kTensorRows;
    s.overlap_rows = kOverlapRows;
    s.gemm_rows = !cd::gemm_ready() ? kNever : quantized ? own_rows(s) + 1 : kGemmRows;
    s.batch = s.gemm_rows <= cd::kMaxGemmBatch ? cd::kMaxGemmBatch : cd::kMaxBatch;
    if (!cd::fits(s)) {
      cd::Shape one = s;
      one.batch = 1;
      if (!cd::fits(one)) throw std::invalid_argument("a shape the CUDA decode step lacks");
    }
    scratch_ = std::make_shared<Scratch>(cd::scratch_bytes(s));
    replay_ = std::make_shared<Replay>(static_cast<size_t>(s.vocab) * 2);  // 16-bit logits
  }

  // The largest batch this model's step takes.
  int max_batch() const {
    cd::Shape s = shape_;
    for (s.batch = std::max(cd::kMaxBatch, cd::kMaxGemmBatch); s.batch > 0; --s.batch) {
      if (cd::fits(s)) return s.batch;
    }
    return 0;
  }

  // For benches: the batch from which matvecs use tensor cores, below which kernels overlap,
  // and from which matmuls go through cuBLAS (where it started; 0 leaves that as it is).
  // For benches: how the step's kernels reach the GPU (Mode, by its name).
  void replay(const std::string& mode) {
    for (const auto& [name, each] : kModes) {
      if (name == mode) return replay_->set_mode(each);
    }
    throw std::invalid_argument("a replay mode is launched, captured or kept");
  }
  std::string replays() const {
    const Mode mode = replay_->mode();
    for (const auto& [name, each] : kModes) {
      if (each == mode) return name;
    }
    return "";
  }

  void tune(int tensor_rows, int overlap_rows, int gemm_rows) {
    shape_.tensor_rows = tensor_rows;
    shape_.overlap_rows = overlap_rows;
    if (gemm_rows > 0 && shape_.gemm_rows != kNever) shape_.gemm_rows = gemm_rows;
  }

  std::vector<mx::array> step(const mx::array& tokens, const mx::array& positions,
                              const mx::array& first_columns, int column,
                              const std::vector<mx::array>& caches, bool copy_caches) {
    const int batch = static_cast<int>(tokens.size());
    if (batch < 1 || batch > max_batch()) throw std::invalid_argument("batch out of range");
    if (static_cast<int>(caches.size()) != 2 * layers_) {
      throw std::invalid_argument("expected a key and a value cache a layer");
    }
    for (const mx::array* index : {&tokens, &positions, &first_columns}) {
      if (index->size() != static_cast<size_t>(batch) || index->itemsize() != 4 ||
          !mx::issubdtype(index->dtype(), mx::integer)) {
        throw std::invalid_argument("tokens, positions and first columns: 32-bit, one a row");
      }
    }
    const mx::array& keys = caches[0];
    if (keys.ndim() != 4 || keys.shape(0) != batch || keys.shape(1) != shape_.kv_heads ||
        keys.shape(3) != shape_.head_dim || column < 0 || column >= keys.shape(2)) {
      throw std::invalid_argument("the KV cache's shape does not match the model's");
    }
    cd::Shape s = shape_;
    s.batch = batch;
    s.capacity = keys.shape(2);
    s.column = column;
    mx::Stream stream = mx::default_stream(mx::Device::gpu);
    // The kernels read these as plain rows: a view (the last column of a prompt batch,
    // say) would hand them another row's token (each a no-op copy when already a row).
    std::vector<mx::array> inputs{mx::contiguous(tokens, false, stream),
                                  mx::contiguous(positions, false, stream),
                                  mx::contiguous(first_columns, false, stream)};
    std::vector<mx::Shape> shapes{{batch, 1, shape_.vocab}};
    std::vector<mx::Dtype> dtypes{dtype_};
    for (const auto& cache : caches) {
      if (cache.shape() != keys.shape() || cache.dtype() != dtype_) {
        throw std::invalid_argument("the KV caches differ in shape or dtype");
      }
      inputs.push_back(cache);
      shapes.push_back(cache.shape());
      dtypes.push_back(cache.dtype());
    }
    auto primitive = std::make_shared<DecodeStep>(stream, s, layers_, formats_, weights_,
                                                  has_freqs_, copy_caches, scratch_, replay_);
    return mx::array::make_arrays(std::move(shapes), dtypes, primitive, inputs);
  }

 private:
  std::shared_ptr<const Weights> weights_;
  std::shared_ptr<const Formats> formats_;
  mx::Dtype dtype_ = mx::bfloat16;
  int layers_;
  bool has_freqs_ = false;
  cd::Shape shape_{};
  std::shared_ptr<Scratch> scratch_;
  std::shared_ptr<Replay> replay_;
};

}  // namespace

NB_MODULE(_cuda_decode, m) {
  m.doc() = "MLX Lab's one-token decode step of a model of Llama's layer, for MLX's CUDA backend";
  nb::class_<Model>(m, "Model")
      .def(nb::init<std::vector<std::vector<mx::array>>, int, int, int, int, int, int, int, float,
                    float, float, float, bool, std::optional<mx::array>, float, bool>(),
           "weights"_a, "layers"_a, "hidden"_a, "heads"_a, "kv_heads"_a, "head_dim"_a,
           "intermediate"_a, "vocab"_a, "eps"_a, "attention_scale"_a, "rope_scale"_a,
           "rope_base"_a, "traditional"_a, "rope_freqs"_a.none(), "qk_norm_eps"_a = 0.0f,
           "qkv_bias"_a = false,
           "weights: embedding, final norm, lm_head, then each layer's input norm, q/k/v, o, "
           "post-attention norm, gate/up and down (then its q and k head norms where "
           "qk_norm_eps > 0, Qwen3's, and its q/k/v biases where qkv_bias, Qwen2's); each "
           "[array] (a norm, a bias, a plain matrix) or "
           "[packed, scales, biases] (MLX's affine quantization: 4 or 8 bits, groups of 32 "
           "or 64).")
      .def("max_batch", &Model::max_batch)
      .def("replay", &Model::replay, "mode"_a,
           "How the step's kernels reach the GPU: 'kept' (one graph a batch replayed as it is, "
           "the default), 'captured' into a CUDA graph each step, or 'launched' one by one.")
      .def("replays", &Model::replays,
           "The replay mode in use ('launched' after capturing a graph failed).")
      .def("tune", &Model::tune, "tensor_rows"_a, "overlap_rows"_a, "gemm_rows"_a = 0,
           "Matvecs on tensor cores from `tensor_rows` rows a batch; kernels that overlap "
           "their neighbours (programmatic dependent launch) below `overlap_rows` rows; "
           "matmuls through cuBLAS from `gemm_rows` rows (0: as they are).")
      .def("step", &Model::step, "tokens"_a, "positions"_a, "first_columns"_a, "column"_a,
           "caches"_a, "copy_caches"_a,
           "[logits (batch, 1, vocab), then each layer's keys and values with this step's "
           "written at `column`: into the caches' own buffers, or into copies of them.");
  m.def("cache_copies", [] { return cache_copies.load(); },
        "How many KV caches steps have copied before writing them.");
}
