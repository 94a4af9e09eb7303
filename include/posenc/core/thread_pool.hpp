#pragma once
/// \file
/// Worker threads started once and reused by many calls (flash_options::pool).
///
///     thread_pool pool(2);                 // the caller and one started thread
///     flash_options options;
///     options.threads = 2;                 // 0: every thread of the pool
///     options.pool = &pool;                // each call wakes the pool's thread
///
/// Why: without a pool, each threaded call starts its threads and joins them (19-38 us on
/// the Zen 4 host of docs/benchmarks.md, more as the new thread starts on a cold core), and
/// a decode step runs one such call per layer: two-thread decode over 1280-2048 cached keys
/// ran 1.08-1.90x faster on a pool there. A pool's threads wait between calls, first
/// spinning (100 us by default: a layer's next call often follows within microseconds,
/// and waking a sleeping thread took 67-211 us on that host), then asleep on a condition
/// variable, so an idle pool costs no CPU. A program that keeps its other threads busy
/// between calls can ask for less spinning.
///
/// One run at a time: while a pool runs a call, another call that names it (from another
/// thread, or from inside the job) runs without it, on threads of its own, as if no pool
/// were given. The result never depends on which threads run a call.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include "error.hpp"
#include "types.hpp"

namespace posenc {

namespace detail {
/// std::thread::hardware_concurrency(), at least 1 (it may report 0) and at most `most`:
/// what a thread count of 0 means.
inline Index hardware_threads(Index most) noexcept {
  return std::clamp<Index>(static_cast<Index>(std::thread::hardware_concurrency()), 1, most);
}
}  // namespace detail

class thread_pool {
 public:
  /// The most threads a pool takes (as flash_options::max_threads).
  static constexpr Index max_threads = 1024;

  /// A pool of `threads` in all, the thread that runs each call counted as one, so
  /// `threads - 1` are started here (0: std::thread::hardware_concurrency()). Between
  /// calls its threads spin for `spin`, then sleep (the caller of a call waits for the
  /// others the same way). If the system refuses a thread, the pool keeps the ones it
  /// started (size() says how many).
  /// \throws posenc::error if threads is negative or above max_threads, or spin negative
  explicit thread_pool(Index threads = 0,
                       std::chrono::microseconds spin = std::chrono::microseconds(100))
      : spin_(spin) {
    detail::require(threads >= 0 && threads <= max_threads, "thread_pool", "threads", threads,
                    "must be in [0, 1024] (0 = hardware concurrency)");
    detail::require(spin.count() >= 0, "thread_pool", "spin", spin.count(),
                    "must be >= 0 microseconds");
    if (threads == 0) threads = detail::hardware_threads(max_threads);
    workers_.reserve(static_cast<std::size_t>(threads - 1));
    for (Index w = 1; w < threads; ++w) {
      try {
        workers_.emplace_back([this, w] { wait_and_work(w); });
      } catch (const std::system_error&) {
        break;  // the threads started so far make the pool
      } catch (...) {
        stop();  // joinable threads must not outlive a constructor that throws
        throw;
      }
    }
  }

  thread_pool(const thread_pool&) = delete;
  thread_pool& operator=(const thread_pool&) = delete;

  /// Joins the threads (after any run in progress has returned).
  ~thread_pool() {
    const std::lock_guard<std::mutex> running(run_);
    stop();
  }

  /// Threads a call can run on: the started ones and the calling thread.
  Index size() const noexcept { return static_cast<Index>(workers_.size()) + 1; }

  /// Runs job(w) for w in [0, n) (n <= size()) at once, w = 0 on the calling thread, and
  /// returns true when all have returned; returns false at once, running nothing, if the
  /// pool is running another call (the caller then runs the job another way). job must
  /// not throw on a pool thread (as on a std::thread, that ends the program); if job(0)
  /// throws, the exception propagates once the pool's threads are done.
  template <class Job>
  bool try_run(Index n, Job& job) {
    std::unique_lock<std::mutex> running(run_, std::try_to_lock);
    if (!running.owns_lock()) return false;
    n = std::max<Index>(1, std::min(n, size()));
    {
      const std::lock_guard<std::mutex> lock(state_);
      job_ = &job;
      call_ = [](void* j, Index w) { (*static_cast<Job*>(j))(w); };
      active_ = n;
      pending_.store(n - 1, std::memory_order_relaxed);
      generation_.fetch_add(1, std::memory_order_release);
    }
    if (n > 1) wake_.notify_all();
    try {
      job(0);
    } catch (...) {
      wait_for_workers();
      throw;
    }
    wait_for_workers();
    return true;
  }

 private:
  void stop() noexcept {
    {
      const std::lock_guard<std::mutex> lock(state_);
      stop_ = true;
      generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    for (std::thread& t : workers_) t.join();
  }

  static void pause() noexcept {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
  }

  /// Spins until done() or spin_ has passed; whether done().
  template <class Done>
  bool spin_until(const Done& done) const noexcept {
    if (spin_.count() == 0) return done();
    const auto end = std::chrono::steady_clock::now() + spin_;
    for (;;) {
      for (int i = 0; i < 64; ++i) {  // the clock read every 64 pauses (a few microseconds)
        if (done()) return true;
        pause();
      }
      if (std::chrono::steady_clock::now() >= end) return done();
    }
  }

  void wait_for_workers() {
    if (spin_until([&] { return pending_.load(std::memory_order_acquire) == 0; })) return;
    std::unique_lock<std::mutex> lock(state_);
    done_.wait(lock, [&] { return pending_.load(std::memory_order_acquire) == 0; });
  }

  void wait_and_work(Index w) {
    std::uint64_t seen = 0;
    for (;;) {
      spin_until([&] { return generation_.load(std::memory_order_acquire) != seen; });
      void* job = nullptr;
      void (*call)(void*, Index) = nullptr;
      {
        std::unique_lock<std::mutex> lock(state_);
        wake_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
        seen = generation_.load(std::memory_order_acquire);
        if (stop_) return;
        if (w >= active_) continue;  // this call runs on fewer threads
        job = job_;
        call = call_;
      }
      call(job, w);  // a throw here ends the program, as on a std::thread
      if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        { const std::lock_guard<std::mutex> lock(state_); }  // the caller is waiting or will see 0
        done_.notify_one();
      }
    }
  }

  const std::chrono::microseconds spin_;  // how long a waiting thread spins before it sleeps
  std::mutex run_;                        // held by the thread whose call the pool runs
  std::mutex state_;  // the call's fields below, and the condition variables' waits
  std::condition_variable wake_, done_;
  std::atomic<std::uint64_t> generation_{0};  // one more for each call and for the stop
  std::atomic<Index> pending_{0};             // started threads still running the call
  bool stop_ = false;
  Index active_ = 0;  // threads of the current call, the caller included
  void* job_ = nullptr;
  void (*call_)(void*, Index) = nullptr;
  std::vector<std::thread> workers_;  // last: started once the members they read exist
};

}  // namespace posenc
