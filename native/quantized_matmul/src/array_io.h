// Reading MLX arrays of any float type as float32 rows, and writing results back.
#pragma once

#include <vector>

#include "kernels.h"
#include "mlx/mlx.h"

namespace mlxlab {

namespace mx = mlx::core;

// Throws std::invalid_argument for a dtype other than float32, float16 or bfloat16.
ScaleType scale_type(mx::Dtype dtype);
bool is_float(mx::Dtype dtype);

// x as contiguous float32 rows: the array's own memory when it already is, else `copy`.
const float* float_rows(const mx::array& x, std::vector<float>& copy);

// values (float32) into a float16 or bfloat16 array of the same size.
void store(const std::vector<float>& values, mx::array& out);

}  // namespace mlxlab
