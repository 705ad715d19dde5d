// The quantized matvecs on tensor cores, for batches: tensor_matvec()'s tiles (16 weight rows
// by up to 8 batch rows a mma.sync) over MLX's affine 4- or 8-bit weights, each weight
// dequantized once into the model's dtype in registers, whatever the batch. The CUDA-core
// kernel (quantized_matvec.cuh) spent two FMAs a weight a batch row and a warp sum a row a
// batch row: the default model's 576-wide rows left most lanes idle, and its step at 32 rows
// took several times the 8-row one's time.
//
// Each weight is rounded to the model's dtype before its product (scale * q + bias, one
// rounding), as MLX's own quantized matmul on tensor cores dequantizes; the CUDA-core kernel
// keeps scale * sum(x q) + bias * sum(x) in floats. 4-bit weights dequantize two at a time
// in the dtype's own pair arithmetic (a mask, a subtraction and an FMA a pair): through
// floats, their unpacking and rounding was most of the kernel's instructions.
#pragma once

#include <type_traits>

#include "quantized_matvec.cuh"
#include "tensor_matvec.cuh"

namespace mlxlab::cuda_decode {
namespace {

// Two floats as a 32-bit pair of T, the first in the low half (the lower k of an mma slot).
__device__ __forceinline__ uint32_t pack2(float low, float high, const __nv_bfloat16*) {
  const __nv_bfloat162 pair = __floats2bfloat162_rn(low, high);
  uint32_t word;
  memcpy(&word, &pair, 4);
  return word;
}

__device__ __forceinline__ uint32_t pack2(float low, float high, const __half*) {
  const __half2 pair = __floats2half2_rn(low, high);
  uint32_t word;
  memcpy(&word, &pair, 4);
  return word;
}

// A weight's scale or bias as both halves of a pair of T.
__device__ __forceinline__ __half2 both(__half v) { return __halves2half2(v, v); }
__device__ __forceinline__ __nv_bfloat162 both(__nv_bfloat16 v) { return __halves2bfloat162(v, v); }

template <typename T>
using Pair = std::conditional_t<std::is_same_v<T, __half>, __half2, __nv_bfloat162>;

// A 4-bit q in a half or bfloat16 as its own value plus a power of two: the q put in the
// mantissa under the exponent of 1024 (half) or 128 (bfloat16), both of which hold 0-15
// exactly. Subtracting the power leaves q exactly, so scale * q + bias is rounded once.
template <typename T>
constexpr uint32_t kMagicPair = std::is_same_v<T, __half> ? 0x64006400u : 0x43004300u;
template <typename T>
__device__ __forceinline__ Pair<T> magic_pair() {
  const uint32_t word = kMagicPair<T>;
  Pair<T> pair;
  memcpy(&pair, &word, 4);
  return pair;
}

// A 4-bit word's eight weights dequantized into T as four pairs, two instructions a pair:
// (q0, q4), (q1, q5), (q2, q6), (q3, q7), the order one mask of 0x000f000f finds them in.
// Its inputs go in the same order (interleaved()).
template <typename T>
__device__ __forceinline__ uint4 dequantized_word(uint32_t word, Pair<T> scale, Pair<T> bias) {
  uint32_t pairs[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const uint32_t bits = ((word >> (4 * k)) & 0x000f000fu) | kMagicPair<T>;
    Pair<T> q;
    memcpy(&q, &bits, 4);
    const Pair<T> w = __hfma2(__hsub2(q, magic_pair<T>()), scale, bias);
    memcpy(&pairs[k], &w, 4);
  }
  return make_uint4(pairs[0], pairs[1], pairs[2], pairs[3]);
}

// Eight inputs (x0 x1, x2 x3, x4 x5, x6 x7) as dequantized_word() orders its weights.
__device__ __forceinline__ uint4 interleaved(const uint4& v) {
  return make_uint4(__byte_perm(v.x, v.z, 0x5410), __byte_perm(v.x, v.z, 0x7632),
                    __byte_perm(v.y, v.w, 0x5410), __byte_perm(v.y, v.w, 0x7632));
}

// Eight consecutive 8-bit weights (two words) dequantized into T through floats, as a dense
// row's 16 bytes: pairs (0, 1), (2, 3), (4, 5), (6, 7). (A bfloat16 holds 0-255 under no
// power of two.)
template <typename T>
__device__ __forceinline__ uint4 dequantized_bytes(const uint32_t* words, float2 affine) {
  float q[8];
  unpack_word<8>(words[0], q);
  unpack_word<8>(words[1], q + 4);
  const T* kind = nullptr;
  uint32_t pairs[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    pairs[i] = pack2(fmaf(affine.x, q[2 * i], affine.y), fmaf(affine.x, q[2 * i + 1], affine.y),
                     kind);
  }
  return make_uint4(pairs[0], pairs[1], pairs[2], pairs[3]);
}

// COUNT consecutive 32-bit words from `p` in one load where they are aligned for it.
template <int COUNT>
__device__ __forceinline__ void load_words(const uint32_t* p, uint32_t (&out)[COUNT]) {
  if constexpr (COUNT % 4 == 0) {
#pragma unroll
    for (int i = 0; i < COUNT / 4; ++i) {
      const uint4 v = __ldg(reinterpret_cast<const uint4*>(p) + i);
      out[4 * i] = v.x, out[4 * i + 1] = v.y, out[4 * i + 2] = v.z, out[4 * i + 3] = v.w;
    }
  } else if constexpr (COUNT == 2) {
    const uint2 v = __ldg(reinterpret_cast<const uint2*>(p));
    out[0] = v.x, out[1] = v.y;
  } else {
    out[0] = __ldg(p);
  }
}

// `words` (four pieces of COUNT / 4) turned by `by` pieces (0-3), by selects: a register
// array indexed by a lane's own number would go to local memory.
template <int COUNT>
__device__ __forceinline__ void rotate_pieces(uint32_t (&words)[COUNT], int by) {
  constexpr int kPiece = COUNT / 4;
  uint32_t once[COUNT];
#pragma unroll
  for (int j = 0; j < COUNT; ++j) once[j] = by & 1 ? words[(j + kPiece) % COUNT] : words[j];
#pragma unroll
  for (int j = 0; j < COUNT; ++j) words[j] = by & 2 ? once[(j + 2 * kPiece) % COUNT] : once[j];
}

// A lane's share of a piece of 32 * L columns of its tile's rows g and g + 8: 8 L consecutive
// columns each (L BITS / 4 words a row, in one group: groups are 32 or 64 columns, L 1, 2
// or 4), their scale and bias. The mma's k order is free as long as both operands follow it,
// so each lane's columns are consecutive and its words one load.
template <typename T, int BITS, int L>
struct Piece {
  static constexpr int kWords = L * BITS / 4;
  uint32_t w0[kWords], w1[kWords];
  T s0, b0, s1, b1;
};

template <typename T, int BITS, int GROUP, int L>
__device__ __forceinline__ void load_piece(Piece<T, BITS, L>& piece, const uint32_t* row0,
                                           const uint32_t* row1, const T* scales,
                                           const T* biases, size_t g0, size_t g1, int column) {
  load_words(row0 + column * BITS / 32, piece.w0);
  load_words(row1 + column * BITS / 32, piece.w1);
  piece.s0 = scales[g0 + column / GROUP], piece.b0 = biases[g0 + column / GROUP];
  piece.s1 = scales[g1 + column / GROUP], piece.b1 = biases[g1 + column / GROUP];
}

// The piece's products with each batch tile's input columns `column` ... + 8 L. A whole
// round's pieces (L = 4) go in an order turned by the lane's t, its inputs with them: the
// staged rows' 16-byte loads of lanes t and t + 2, 128 bytes apart, fell in the same banks.
template <typename T, int N, int BITS, int L>
__device__ __forceinline__ void multiply_piece(float (&d)[N][4], Piece<T, BITS, L>& piece,
                                               const T* const (&rows_in)[N], int column, int t) {
  constexpr int kPer8 = BITS / 4;  // words a row holds for 8 columns
  const int turn = L == 4 ? t : 0;
  if constexpr (L == 4) {
    rotate_pieces(piece.w0, turn);
    rotate_pieces(piece.w1, turn);
  }
#pragma unroll
  for (int i = 0; i < L; ++i) {
    const int at = column + 8 * ((i + turn) & (L - 1));
    uint4 a, b;
    if constexpr (BITS == 4) {
      a = dequantized_word<T>(piece.w0[i], both(piece.s0), both(piece.b0));
      b = dequantized_word<T>(piece.w1[i], both(piece.s1), both(piece.b1));
    } else {
      a = dequantized_bytes<T>(piece.w0 + kPer8 * i,
                               make_float2(to_float(piece.s0), to_float(piece.b0)));
      b = dequantized_bytes<T>(piece.w1 + kPer8 * i,
                               make_float2(to_float(piece.s1), to_float(piece.b1)));
    }
#pragma unroll
    for (int j = 0; j < N; ++j) {
      uint4 v = *reinterpret_cast<const uint4*>(rows_in[j] + at);
      if constexpr (BITS == 4) v = interleaved(v);
      mma<T>(d[j], a.x, b.x, a.y, b.y, v.x, v.y);
      mma<T>(d[j], a.z, b.z, a.w, b.w, v.z, v.w);
    }
  }
}

// Rows of the packed `w` times `batch` (at most B) input rows of `depth` (a multiple of 32),
// as quantized_matvec() computes them, tiled as tensor_matvec() tiles: a block takes
// kTensorWarps / splits tiles at a time, `splits` warps a tile, each over every splits-th
// 128 columns (the columns past the last 128 go to the tile's first warp).
template <typename T, int B, int MODE, bool NORM, int BITS, int GROUP>
__global__ void __launch_bounds__(kTensorThreads)
    tensor_quantized_matvec(const uint32_t* __restrict__ w, const T* __restrict__ scales,
                            const T* __restrict__ biases, const T* x,
                            const T* __restrict__ norm_weight, float eps, T* out, int n_out,
                            int depth, int batch, int splits) {
  static_assert(GROUP % 32 == 0, "a lane's columns lie in one group");
  constexpr int N = (B + 7) / 8;  // mma tiles across the batch
  constexpr int kBlock = 128;  // columns a round of a tile's four lanes t
  constexpr int kRowBytes = kBlock * BITS / 8;  // a row's bytes in a round
  extern __shared__ __align__(16) unsigned char shared[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int tiles = tile_count<MODE>(n_out), per_block = kTensorWarps / splits;
  const int slice = warp % splits, rounds = depth / kBlock;
  const int words = depth * BITS / 32, groups = depth / GROUP;
  // Rounds a lane loads before any is used: as many bytes in flight as tensor_matvec's.
  constexpr int kAhead = BITS == 8 && kTensorDepth > 1 ? kTensorDepth / 2 : kTensorDepth;
  release_next();
  {  // what the first rounds load, asked of L2 while the kernel before ends
    const int tile = min(blockIdx.x * per_block + warp / splits, tiles - 1);
    prefetch_rounds(w + static_cast<size_t>(tile_row<MODE>(tile, lane % 16, n_out)) * words,
                    kRowBytes, slice, splits, min(rounds, slice + kAhead * splits), lane);
  }
  await_previous();
  const TensorInput<T> input = tensor_input<T, B, NORM>(x, norm_weight, eps, depth, batch, shared);
  float* partials = input.partials;
  const T* rows_in[N];
#pragma unroll
  for (int j = 0; j < N; ++j) {
    // Batch rows past the batch read its last row: their columns are never stored.
    rows_in[j] = input.rows + static_cast<size_t>(min(8 * j + g, batch - 1)) * input.pitch;
  }
  for (int first = blockIdx.x * per_block; first < tiles; first += gridDim.x * per_block) {
    const int tile = first + warp / splits;
    const int here = min(tile, tiles - 1);
    const int r0 = tile_row<MODE>(here, g, n_out), r1 = tile_row<MODE>(here, g + 8, n_out);
    const uint32_t* row0 = w + static_cast<size_t>(r0) * words;
    const uint32_t* row1 = w + static_cast<size_t>(r1) * words;
    const size_t g0 = static_cast<size_t>(r0) * groups, g1 = static_cast<size_t>(r1) * groups;
    float d[N][4];
#pragma unroll
    for (int j = 0; j < N; ++j) d[j][0] = d[j][1] = d[j][2] = d[j][3] = 0.0f;
    int s = slice;
    for (; s + splits * (kAhead - 1) < rounds; s += splits * kAhead) {
      Piece<T, BITS, 4> pieces[kAhead];
#pragma unroll
      for (int u = 0; u < kAhead; ++u) {
        load_piece<T, BITS, GROUP>(pieces[u], row0, row1, scales, biases, g0, g1,
                                   (s + splits * u) * kBlock + 32 * t);
      }
#pragma unroll
      for (int u = 0; u < kAhead; ++u) {
        multiply_piece<T, N>(d, pieces[u], rows_in, (s + splits * u) * kBlock + 32 * t, t);
      }
    }
    for (; s < rounds; s += splits) {
      Piece<T, BITS, 4> piece;
      load_piece<T, BITS, GROUP>(piece, row0, row1, scales, biases, g0, g1, s * kBlock + 32 * t);
      multiply_piece<T, N>(d, piece, rows_in, s * kBlock + 32 * t, t);
    }
    if (slice == 0) {  // a depth past the last 128 columns: 64 and then 32 more
      int column = rounds * kBlock;
      if (depth - column >= 64) {
        Piece<T, BITS, 2> piece;
        load_piece<T, BITS, GROUP>(piece, row0, row1, scales, biases, g0, g1, column + 16 * t);
        multiply_piece<T, N>(d, piece, rows_in, column + 16 * t, t);
        column += 64;
      }
      if (depth - column >= 32) {
        Piece<T, BITS, 1> piece;
        load_piece<T, BITS, GROUP>(piece, row0, row1, scales, biases, g0, g1, column + 8 * t);
        multiply_piece<T, N>(d, piece, rows_in, column + 8 * t, t);
      }
    }
    if (!meet_splits<N>(d, partials, warp, lane, splits, slice) || tile >= tiles) continue;
    store_tile<T, MODE, N>(d, out, tile, n_out, batch, g, t);
  }
}
}  // namespace
}  // namespace mlxlab::cuda_decode
