#include "cli.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <posenc/io/npy.hpp>
#include <random>
#include <sstream>
#include <system_error>

#if !defined(_WIN32)
#include <unistd.h>
#endif

namespace posenc_cli {

std::optional<std::string> args::get(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

std::string args::str(const std::string& name) const {
  auto v = get(name);
  if (!v) throw usage_error("missing required flag " + name);
  return *v;
}

std::string args::str_or(const std::string& name, const std::string& fallback) const {
  return get(name).value_or(fallback);
}

long long args::integer(const std::string& name) const {
  const std::string s = str(name);
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || end != s.c_str() + s.size())
    throw usage_error("invalid value for " + name + ": '" + s + "' is not an integer");
  if (errno == ERANGE)
    throw usage_error("invalid value for " + name + ": '" + s +
                      "' is out of range (a 64-bit integer is at most 9223372036854775807)");
  return v;
}

long long args::integer_or(const std::string& name, long long fallback) const {
  return has(name) ? integer(name) : fallback;
}

static double parse_real(const std::string& name, const std::string& s) {
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || std::isnan(v) ||
      (std::isinf(v) && errno != ERANGE))
    throw usage_error("invalid value for " + name + ": '" + s + "' is not a finite number");
  // ERANGE: past the largest double, or so small that it rounds to zero (a value that
  // survives as a subnormal is kept)
  if (errno == ERANGE && (std::isinf(v) || v == 0))
    throw usage_error("invalid value for " + name + ": '" + s + "' is out of the range of a " +
                      (v == 0 ? "double (it rounds to 0)" : "double (about 1.8e308 at most)"));
  return v;
}

double args::real(const std::string& name) const { return parse_real(name, str(name)); }

double args::real_or(const std::string& name, double fallback) const {
  return has(name) ? real(name) : fallback;
}

std::vector<double> args::reals(const std::string& name) const {
  std::vector<double> out;
  std::stringstream ss(str(name));
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(parse_real(name, item));
  if (out.empty()) throw usage_error("invalid value for " + name + ": empty list");
  return out;
}

std::string args::choice(const std::string& name, const std::vector<std::string>& choices,
                         const std::string& fallback) const {
  const std::string v = str_or(name, fallback);
  for (const auto& c : choices)
    if (c == v) return v;
  std::string list;
  for (const auto& c : choices) list += (list.empty() ? "" : "|") + c;
  throw usage_error("invalid value for " + name + ": '" + v + "' (expected " + list + ")");
}

args parse(const command& cmd, const std::vector<std::string>& argv) {
  args out;
  for (std::size_t i = 0; i < argv.size(); ++i) {
    std::string tok = argv[i];
    if (tok.rfind("--", 0) != 0) {
      throw usage_error("unexpected argument '" + tok + "' for 'posenc " + cmd.name + "'");
    }
    std::optional<std::string> inline_value;
    if (auto eq = tok.find('='); eq != std::string::npos) {
      inline_value = tok.substr(eq + 1);
      tok = tok.substr(0, eq);
    }
    const flag* f = nullptr;
    for (const auto& cand : cmd.flags)
      if (cand.name == tok) f = &cand;
    if (!f)
      throw usage_error("unknown flag " + tok + " for 'posenc " + cmd.name + "' (see --help)");
    // A repeated flag is a mistake in a script, not a choice: refuse it rather than keep one.
    if (out.has(tok)) throw usage_error("flag " + tok + " given twice");
    if (f->value_name.empty()) {
      if (inline_value) throw usage_error("flag " + tok + " takes no value");
      out.values_[tok] = "1";
    } else if (inline_value) {
      out.values_[tok] = *inline_value;
    } else {
      if (i + 1 >= argv.size())
        throw usage_error("flag " + tok + " needs a value " + f->value_name);
      out.values_[tok] = argv[++i];
    }
  }
  for (const auto& f : cmd.flags)
    if (f.required && !out.has(f.name))
      throw usage_error("missing required flag " + f.name + " for 'posenc " + cmd.name + "'");
  return out;
}

// ---- output_files ----------------------------------------------------------------------

namespace {

namespace fs = std::filesystem;

// The temporaries not yet renamed or removed, for the signal handler: a fixed table of
// lock-free atomics, the one kind of shared state a handler may read. A slot holds the
// c_str() of npy_output::temp_, which stays put until the slot is cleared.
constexpr int temp_slots = 16;
std::atomic<const char*> temp_paths[temp_slots] = {};
static_assert(std::atomic<const char*>::is_always_lock_free,
              "the signal handler reads the table: its atomics must be lock-free");

void remove_file_in_handler(const char* path) noexcept {
#if defined(_WIN32)
  std::remove(path);
#else
  ::unlink(path);  // async-signal-safe
#endif
}

extern "C" void remove_temporaries_and_reraise(int sig) {
  for (auto& slot : temp_paths)
    if (const char* p = slot.load()) remove_file_in_handler(p);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

// Once per process, the first time a file is started: SIGINT, SIGTERM, SIGHUP and SIGXFSZ
// (a write past `ulimit -f`) remove the temporaries, then end the process as they would
// have. A signal the caller ignores (nohup) stays ignored.
void install_signal_handlers() {
  static const bool installed = [] {
    const int signals[] = {
      SIGINT,
      SIGTERM,
#if defined(SIGHUP)
      SIGHUP,
#endif
#if defined(SIGXFSZ)
      SIGXFSZ,
#endif
    };
    for (int sig : signals)
      if (std::signal(sig, remove_temporaries_and_reraise) == SIG_IGN) std::signal(sig, SIG_IGN);
    return true;
  }();
  (void)installed;
}

int register_temporary(const char* path) noexcept {
  for (int i = 0; i < temp_slots; ++i) {
    const char* expected = nullptr;
    if (temp_paths[i].compare_exchange_strong(expected, path)) return i;
  }
  return -1;  // table full: still removed on every path but a signal
}

void unregister_temporary(int& slot) noexcept {
  if (slot >= 0) temp_paths[slot].store(nullptr);
  slot = -1;
}

// The file a write to `path` replaces: the target of a symbolic link (a write through it
// changed the target before), else `path` itself.
fs::path replaced_file(const fs::path& path) {
  std::error_code ec;
  if (fs::is_symlink(path, ec)) {
    const fs::path target = fs::canonical(path, ec);
    if (!ec) return target;
  }
  return path;
}

// A name for a temporary beside `target`: hidden, recognisably posenc's, unlikely to clash.
fs::path temporary_beside(const fs::path& target, std::uint32_t salt) {
  std::string base = target.filename().string();
  if (base.size() > 64) base.resize(64);  // the name stays within NAME_MAX
  static const char hex[] = "0123456789abcdef";
  std::string tag(8, '0');
  for (int i = 0; i < 8; ++i) tag[static_cast<std::size_t>(i)] = hex[(salt >> (4 * i)) & 15u];
  return target.parent_path() / ("." + base + ".posenc-" + tag + ".tmp");
}

std::uint32_t random_salt(std::uint32_t attempt) {
  static std::uint32_t seed = [] {
    try {
      return static_cast<std::uint32_t>(std::random_device{}());
    } catch (const std::exception&) {
      return 0x9E3779B9u;
    }
  }();
  seed = seed * 1664525u + 1013904223u + attempt;
  return seed;
}

}  // namespace

npy_output::~npy_output() {
  if (file_) std::fclose(file_);
  if (!temp_.empty()) {
    std::error_code ec;
    fs::remove(temp_, ec);
  }
  unregister_temporary(slot_);
}

void npy_output::write_failed() const {
  const int err = errno;
  throw std::runtime_error("cannot write " + flag_ + " " + destination_ + ": " +
                           (err != 0 ? std::strerror(err) : "write error"));
}

void npy_output::append(const void* data, std::size_t n, std::size_t width) {
  if (n > remaining()) throw std::logic_error("npy_output::write: more elements than the header");
  if (n == 0) return;
  errno = 0;
  if (posenc::io::detail::host_is_little_endian()) {
    if (std::fwrite(data, width, n, file_) != n) write_failed();
  } else {
    // .npy data is little-endian: reverse each element's bytes, 64 KiB at a time
    const auto* p = static_cast<const unsigned char*>(data);
    std::vector<unsigned char> buf;
    const std::size_t per_chunk = (std::size_t{1} << 16) / width;
    for (std::size_t i0 = 0; i0 < n; i0 += per_chunk) {
      const std::size_t m = std::min(per_chunk, n - i0);
      buf.assign(p + i0 * width, p + (i0 + m) * width);
      for (std::size_t i = 0; i < m; ++i)
        std::reverse(buf.begin() + static_cast<std::ptrdiff_t>(i * width),
                     buf.begin() + static_cast<std::ptrdiff_t>((i + 1) * width));
      if (std::fwrite(buf.data(), width, m, file_) != m) write_failed();
    }
  }
  written_ += n;
}

output_files::~output_files() = default;  // each npy_output removes its own temporary

npy_output& output_files::add(const std::string& flag, const std::string& path,
                              posenc::io::dtype type, const std::vector<long long>& shape) {
  if (committed_) throw std::logic_error("output_files::add after commit");
  if (path.empty()) throw usage_error("invalid value for " + flag + ": empty file name");
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);  // through symbolic links
  if (fs::is_directory(status))
    throw std::runtime_error("cannot write " + flag + " " + path + ": it is a folder");
  // A device, FIFO or socket (/dev/null, /dev/stdout, a named pipe) is no file to replace:
  // it is written in place, as the data comes (and never renamed over).
  const bool in_place = fs::exists(status) && !fs::is_regular_file(status);
  const fs::path target = in_place ? fs::path(path) : replaced_file(fs::path(path));
  if (!in_place) {
    const fs::path key = fs::absolute(target, ec).lexically_normal();
    for (const auto& f : files_)
      if (!f->temp_.empty() && fs::absolute(f->target_, ec).lexically_normal() == key)
        throw usage_error(f->flag_ + " and " + flag + " name the same file " + path);
  }

  std::uint64_t total = 1;
  for (long long e : shape) {
    if (e < 0 || (e > 0 && total > std::numeric_limits<std::uint64_t>::max() /
                                       static_cast<std::uint64_t>(e)))
      throw std::logic_error("output_files::add: bad shape");
    total *= static_cast<std::uint64_t>(e);
  }

  install_signal_handlers();
  std::unique_ptr<npy_output> out(new npy_output());
  out->flag_ = flag;
  out->destination_ = path;
  out->target_ = target.string();
  out->type_ = type;
  out->total_ = total;
  if (in_place) {
    errno = 0;
    out->file_ = std::fopen(path.c_str(), "wb");
    if (!out->file_) out->write_failed();
  }
  // Else a fresh temporary in the target's folder (so the rename cannot cross file
  // systems), created exclusively ("x"): never an existing file, nor another's temporary.
  for (std::uint32_t attempt = 0; !out->file_; ++attempt) {
    out->temp_ = temporary_beside(target, random_salt(attempt)).string();
    out->slot_ = register_temporary(out->temp_.c_str());
    errno = 0;
    out->file_ = std::fopen(out->temp_.c_str(), "wbx");
    if (out->file_) break;
    const int err = errno;
    unregister_temporary(out->slot_);
    out->temp_.clear();
    if (err != EEXIST || attempt == 100)
      throw std::runtime_error("cannot write " + flag + " " + path + ": " +
                               (err != 0 ? std::strerror(err) : "cannot create a file there"));
  }
  // An existing destination keeps its permissions when it is replaced.
  if (!in_place && fs::exists(target, ec)) {
    const fs::perms mode = fs::status(target, ec).permissions();
    if (!ec) fs::permissions(out->temp_, mode, ec);
  }
  std::vector<posenc::Index> extents(shape.begin(), shape.end());
  const std::vector<unsigned char> header =
      posenc::io::detail::npy_preamble(posenc::io::detail::npy_descr(type), extents);
  errno = 0;
  if (std::fwrite(header.data(), 1, header.size(), out->file_) != header.size())
    out->write_failed();
  files_.push_back(std::move(out));
  return *files_.back();
}

void output_files::commit() {
  if (committed_) throw std::logic_error("output_files::commit twice");
  for (const auto& f : files_)
    if (f->remaining() != 0)
      throw std::logic_error("output_files::commit: " + f->flag_ + " is missing " +
                             std::to_string(f->remaining()) + " elements");
  // Close every file first: a full disk can show only here, and then nothing is renamed.
  for (const auto& f : files_) {
    std::FILE* file = f->file_;
    f->file_ = nullptr;
    errno = 0;
    if (std::fclose(file) != 0) f->write_failed();
  }
  std::vector<std::string> created;  // destinations that did not exist before the rename
  for (const auto& f : files_) {
    if (f->temp_.empty()) continue;  // written in place (a device or a pipe)
    std::error_code ec;
    const bool existed = fs::exists(fs::symlink_status(f->target_, ec));
    fs::rename(f->temp_, f->target_, ec);
    if (ec) {
      const std::string why = ec.message();
      // Undo what this set created; the other temporaries go with their npy_output.
      for (const auto& c : created) fs::remove(c, ec);
      throw std::runtime_error("cannot write " + f->flag_ + " " + f->destination_ + ": " + why);
    }
    unregister_temporary(f->slot_);
    f->temp_.clear();
    if (!existed) created.push_back(f->target_);
  }
  committed_ = true;
}

std::string help_text(const command& cmd) {
  std::ostringstream os;
  os << "posenc " << cmd.name << " - " << cmd.summary << "\n\nUsage:\n  " << cmd.usage
     << "\n\nFlags:\n";
  for (const auto& f : cmd.flags) {
    std::string left = "  " + f.name + (f.value_name.empty() ? "" : " " + f.value_name);
    if (left.size() < 26)
      left.resize(26, ' ');
    else
      left += "  ";
    os << left << f.help << (f.required ? " (required)" : "") << "\n";
  }
  os << "  --help                  show this help\n";
  return os.str();
}

}  // namespace posenc_cli
