// The step for bf16 models with 64-wide heads (step_body.cuh), in a file of its own so that
// the build compiles the instances in parallel.
#include "step_body.cuh"

namespace mlxlab::cuda_decode {
STEP_INSTANCE(__nv_bfloat16, 64);
}  // namespace mlxlab::cuda_decode
