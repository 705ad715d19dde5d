// The extension's own worker threads, in place of an OpenMP region per matmul.
//
// A decode step makes ~200 matmuls a few microseconds apart. Under OpenMP the spare thread
// spun at the barrier between them, holding the core that the engine thread needs to build
// the next step, and a descheduled thread stalled the join for a whole time slice (BENCHMARKS:
// 62% of a two-thread step's samples were libgomp). Here the caller and the workers claim
// chunks of a loop one at a time, so a worker that is late or descheduled only takes fewer
// chunks. Chunks shrink as the loop drains (each a share of what is left, as OpenMP's guided
// schedule): the first are long runs of contiguous weights that the prefetchers stream, the
// last are small enough to even out the finish. A worker spins briefly after its last chunk
// (the next matmul is microseconds away) and then sleeps until work comes. Which thread runs
// a chunk changes no bit of the result.
#pragma once

#include <cstdint>
#include <functional>

namespace mlxlab {

// Runs body(begin, end) over chunks covering [0, count) exactly once, on the calling thread
// and threads - 1 workers; no chunk is shorter than `grain` (but the last). Re-entrant
// calls, and calls made while another thread's loop runs, run serially. Workers stay once
// started: after a larger count, a smaller one still shares with all of them (only the
// bench and tests change the count in a running process).
void parallel_for(int count, int threads, int grain, const std::function<void(int, int)>& body);

// For the tests: runs up to `loops` loops whose chunks take `worker_us` on a worker and
// 100 us on the caller (a worker descheduled mid-chunk, when worker_us is long); whether the
// pool backed off to the caller alone after one. Leaves no back-off behind.
bool backs_off_after(int64_t worker_us, int loops);

// How long an idle worker spins before it sleeps (MLXLAB_QMM_SPIN_US, microseconds).
int64_t spin_microseconds();
void set_spin_microseconds(int64_t microseconds);

}  // namespace mlxlab
