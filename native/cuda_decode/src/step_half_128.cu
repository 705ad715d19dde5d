// The step for half models with 128-wide heads (step_body.cuh), in a file of its own so that
// the build compiles the instances in parallel.
#include "step_body.cuh"

namespace mlxlab::cuda_decode {
STEP_INSTANCE(__half, 128);
}  // namespace mlxlab::cuda_decode
