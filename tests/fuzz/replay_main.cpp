// Replays files through a fuzz harness without libFuzzer, so that every build (any
// compiler, no sanitizer needed) runs the seed corpus and the past crashers as a test.
//
//     fuzz_replay_<harness> [--timeout SECONDS] PATH...
//
// Each PATH is a file or a folder (its regular files, in name order; names starting with
// '.' are skipped); a folder named with a trailing '/' may be absent (no inputs yet). Each file is
// copied into a buffer of exactly its size (as libFuzzer does, so a sanitizer catches a read past
// the end) and passed to LLVMFuzzerTestOneInput; a finding aborts there. An input still running
// after --timeout seconds (default 10, as scripts/fuzz.sh gives libFuzzer) is a slow input: the
// program names it and fails. Exit status: 0 when every input passed, 1 for a slow input, 2 for bad
// arguments.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {

namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;

/// Fails the process when one input runs longer than the limit (a thread that waits for
/// each input to finish).
class watchdog {
 public:
  explicit watchdog(double seconds)
      : limit_(std::chrono::duration_cast<clock_type::duration>(
            std::chrono::duration<double>(seconds))),
        thread_([this] { watch(); }) {}
  watchdog(const watchdog&) = delete;
  watchdog& operator=(const watchdog&) = delete;
  ~watchdog() {
    {
      std::lock_guard<std::mutex> lock(m_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  void start(const std::string& name) {
    std::lock_guard<std::mutex> lock(m_);
    name_ = name;
    deadline_ = clock_type::now() + limit_;
    running_ = true;
    cv_.notify_all();
  }
  void stop() {
    std::lock_guard<std::mutex> lock(m_);
    running_ = false;
    cv_.notify_all();
  }

 private:
  void watch() {
    std::unique_lock<std::mutex> lock(m_);
    while (!done_) {
      if (!running_) {
        cv_.wait(lock);
        continue;
      }
      const auto deadline = deadline_;
      if (cv_.wait_until(lock, deadline) == std::cv_status::timeout && running_ &&
          deadline_ == deadline) {
        std::fprintf(stderr, "replay: %s: still running after %.0f s: a slow input\n",
                     name_.c_str(), std::chrono::duration<double>(limit_).count());
        std::fflush(stderr);
        std::_Exit(1);
      }
    }
  }

  clock_type::duration limit_;
  std::mutex m_;
  std::condition_variable cv_;
  std::string name_;
  clock_type::time_point deadline_{};
  bool running_ = false;
  bool done_ = false;
  std::thread thread_;  // last: started once the members it reads exist
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr, "replay: %s\nusage: fuzz_replay_<harness> [--timeout SECONDS] PATH...\n",
               why.c_str());
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  double timeout = 10.0;
  std::vector<fs::path> files;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--timeout") {
      if (i + 1 >= argc) usage("--timeout needs a value");
      char* end = nullptr;
      timeout = std::strtod(argv[++i], &end);
      if (*end != '\0' || !(timeout > 0)) usage("--timeout must be a positive number of seconds");
      continue;
    }
    const fs::path p(arg);
    std::error_code ec;
    if (fs::is_directory(p, ec)) {
      std::vector<fs::path> in_dir;
      for (const auto& e : fs::directory_iterator(p))
        if (e.is_regular_file() && e.path().filename().string().rfind('.', 0) != 0)
          in_dir.push_back(e.path());
      std::sort(in_dir.begin(), in_dir.end());
      files.insert(files.end(), in_dir.begin(), in_dir.end());
    } else if (fs::is_regular_file(p, ec)) {
      files.push_back(p);
    } else if (!arg.empty() && arg.back() == '/' && !fs::exists(p, ec)) {
      // a folder with no inputs yet (git keeps no empty folder), e.g. regressions/<harness>/
      std::printf("replay: %s absent: nothing to replay there\n", arg.c_str());
    } else {
      usage("no such file or folder: " + arg);
    }
  }
  if (files.empty()) usage("no input files");

  watchdog dog(timeout);
  double total_ms = 0;
  for (const fs::path& f : files) {
    std::error_code ec;
    const std::uintmax_t size = fs::file_size(f, ec);
    if (ec) usage("cannot read " + f.string() + ": " + ec.message());
    // exactly the input's size, on the heap: a read past its end is a sanitizer report
    const std::unique_ptr<std::uint8_t[]> data(
        new std::uint8_t[std::max<std::size_t>(static_cast<std::size_t>(size), 1)]);
    std::ifstream in(f, std::ios::binary);
    in.read(reinterpret_cast<char*>(data.get()), static_cast<std::streamsize>(size));
    if (!in || static_cast<std::uintmax_t>(in.gcount()) != size) usage("cannot read " + f.string());
    // named before it runs: a finding aborts with this line last
    std::printf("replay: %s (%zu bytes) ", f.string().c_str(), static_cast<std::size_t>(size));
    std::fflush(stdout);
    dog.start(f.string());
    const auto t0 = clock_type::now();
    LLVMFuzzerTestOneInput(data.get(), static_cast<std::size_t>(size));
    const double ms = std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
    dog.stop();
    total_ms += ms;
    std::printf("%.1f ms\n", ms);
  }
  std::printf("replay: %zu inputs passed in %.1f ms\n", files.size(), total_ms);
  return 0;
}
