#include "thread_pool.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define MLXLAB_PAUSE() _mm_pause()
#else
#define MLXLAB_PAUSE() std::this_thread::yield()
#endif

namespace mlxlab {

namespace {

// Long enough to span the gaps between the matmuls of a step (norms, RoPE, attention, MLX's
// scheduling: tens of microseconds), short enough that a worker sleeps between steps. The
// settings' default; the Python that loads the library sets it (MLXLAB_QMM_SPIN_US).
std::atomic<int64_t> g_spin_us{200};

// A loop's state in one word, so that a chunk is claimed by one compare-and-swap that also
// checks the loop is still the one the claimer saw: generation (24 bits) | count | next.
constexpr int kIndexBits = 20;
constexpr uint64_t kIndexMask = (uint64_t{1} << kIndexBits) - 1;

uint64_t pack(uint64_t generation, uint64_t count, uint64_t next) {
  return (generation << (2 * kIndexBits)) | (count << kIndexBits) | next;
}
uint64_t count_of(uint64_t state) { return (state >> kIndexBits) & kIndexMask; }
uint64_t next_of(uint64_t state) { return state & kIndexMask; }
uint64_t generation_of(uint64_t state) { return state >> (2 * kIndexBits); }

// A wait on a worker's last chunk longer than any chunk takes (the largest is a quarter of
// the 8-bit output layer, about 0.2 ms): it was descheduled. Loops then run serially for
// 20 ms, doubling while stalls recur, up to a second.
constexpr int64_t kStallNs = 1'000'000;
constexpr int64_t kFirstBackoffNs = 20'000'000;
constexpr int64_t kLongestBackoffNs = 1'000'000'000;

class Pool {
 public:
  // Leaked on purpose: workers sleep in it until the process exits.
  static Pool& instance() {
    static Pool* pool = [] {
      pthread_atfork(nullptr, nullptr, [] { forked_ = true; });
      return new Pool();
    }();
    if (forked_) {
      // A forked child has none of the parent's threads: start again (the old pool leaks).
      forked_ = false;
      pool = new Pool();
    }
    return *pool;
  }

  void run(int count, int threads, int grain, const std::function<void(int, int)>& body) {
    bool idle = false;
    if (!busy_.compare_exchange_strong(idle, true, std::memory_order_acquire)) {
      body(0, count);  // another loop holds the workers
      return;
    }
    grow(threads - 1);
    body_ = &body;
    grain_ = std::max(grain, 1);
    share_ = 2 * threads;
    done_.store(0, std::memory_order_relaxed);
    const uint64_t generation = generation_of(state_.load(std::memory_order_relaxed)) + 1;
    state_.store(pack(generation & 0xFFFFFF, count, 0), std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0) {
      std::lock_guard<std::mutex> lock(mutex_);
      ++epoch_;
      wake_.notify_all();
    }
    while (claim_and_run()) {
    }
    if (done_.load(std::memory_order_acquire) < count) wait_for_workers(count);
    busy_.store(false, std::memory_order_release);
  }

  // Whether loops run on the caller alone for now: after a worker kept one waiting.
  bool backing_off() const {
    const int64_t until = serial_until_.load(std::memory_order_relaxed);
    return until != 0 && now_ns() < until;
  }

  void stop_backing_off() {
    serial_until_.store(0, std::memory_order_relaxed);
    backoff_ns_ = 0;
  }

 private:
  inline static bool forked_ = false;

  static int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  // The caller has run out of chunks; a worker is finishing one. A worker descheduled
  // mid-chunk (the other core busy with other work) keeps the caller waiting for a time
  // slice, so then the next loops run on the caller alone, for longer each time it recurs.
  void wait_for_workers(int count) {
    const int64_t started = now_ns();
    while (done_.load(std::memory_order_acquire) < count) MLXLAB_PAUSE();
    const int64_t waited = now_ns() - started;
    if (waited > kStallNs) {
      backoff_ns_ = std::min<int64_t>(backoff_ns_ == 0 ? kFirstBackoffNs : 2 * backoff_ns_, kLongestBackoffNs);
      serial_until_.store(now_ns() + backoff_ns_, std::memory_order_relaxed);
    } else if (waited < kStallNs / 4) {
      backoff_ns_ = 0;
    }
  }

  // One chunk of the current loop, if one is left; false when none is.
  bool claim_and_run() {
    uint64_t state = state_.load(std::memory_order_acquire);
    while (next_of(state) < count_of(state)) {
      // Read before the claim, maybe of the next loop: a failed claim discards them, and a
      // claim succeeds only while this loop's chunks are unfinished, so it is theirs.
      const int grain = grain_, share = share_;
      const uint64_t left = count_of(state) - next_of(state);
      const uint64_t size = std::min<uint64_t>(left, std::max<uint64_t>(left / share, grain));
      if (state_.compare_exchange_weak(state, state + size, std::memory_order_acq_rel)) {
        const int begin = static_cast<int>(next_of(state));
        (*body_)(begin, begin + static_cast<int>(size));
        done_.fetch_add(static_cast<int>(size), std::memory_order_release);
        return true;
      }
    }
    return false;
  }

  bool claimable() const {
    const uint64_t state = state_.load(std::memory_order_seq_cst);
    return next_of(state) < count_of(state);
  }

  void grow(int workers) {
    while (static_cast<int>(workers_.size()) < workers) {
      workers_.emplace_back([this] { work(); });
      workers_.back().detach();
    }
  }

  void work() {
    for (;;) {
      if (claim_and_run()) continue;
      if (spin()) continue;
      std::unique_lock<std::mutex> lock(mutex_);
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      const uint64_t epoch = epoch_;
      if (!claimable()) wake_.wait(lock, [&] { return epoch_ != epoch; });
      sleepers_.fetch_sub(1, std::memory_order_relaxed);
    }
  }

  // Spins up to the spin time for a chunk to appear; true when one did.
  bool spin() const {
    const auto until = std::chrono::steady_clock::now() +
                       std::chrono::microseconds(g_spin_us.load(std::memory_order_relaxed));
    for (;;) {
      for (int i = 0; i < 64; ++i) {
        if (claimable()) return true;
        MLXLAB_PAUSE();
      }
      if (std::chrono::steady_clock::now() >= until) return false;
    }
  }

  // Each on a cache line of its own: claims, completions and the rest move independently.
  alignas(64) std::atomic<uint64_t> state_{0};
  alignas(64) std::atomic<int> done_{0};
  alignas(64) std::atomic<bool> busy_{false};
  std::atomic<int> sleepers_{0};
  const std::function<void(int, int)>* body_ = nullptr;
  std::atomic<int> grain_{1}, share_{2};
  std::atomic<int64_t> serial_until_{0};
  int64_t backoff_ns_ = 0;  // the caller's alone
  std::mutex mutex_;
  std::condition_variable wake_;
  uint64_t epoch_ = 0;  // guarded by mutex_
  std::vector<std::thread> workers_;
};

}  // namespace

void parallel_for(int count, int threads, int grain, const std::function<void(int, int)>& body) {
  if (count <= 0) return;
  if (threads <= 1 || count <= grain || static_cast<uint64_t>(count) > kIndexMask) {
    body(0, count);
    return;
  }
  Pool& pool = Pool::instance();
  if (pool.backing_off()) {
    body(0, count);
    return;
  }
  pool.run(count, threads, grain, body);
}

bool backs_off_after(int64_t worker_us, int loops) {
  Pool& pool = Pool::instance();
  pool.stop_backing_off();
  const auto caller = std::this_thread::get_id();
  bool backed_off = false;
  for (int loop = 0; loop < loops && !backed_off; ++loop) {
    pool.run(8, 2, 1, [&](int first, int last) {
      const int64_t us = (last - first) * (std::this_thread::get_id() != caller ? worker_us : 100);
      if (us > 0) std::this_thread::sleep_for(std::chrono::microseconds(us));
    });
    backed_off = pool.backing_off();
  }
  pool.stop_backing_off();
  return backed_off;
}

int64_t spin_microseconds() { return g_spin_us.load(); }
void set_spin_microseconds(int64_t microseconds) {
  g_spin_us.store(std::max<int64_t>(microseconds, 0));
}

}  // namespace mlxlab
