#pragma once
// The `posenc` command-line tool's small framework: each subcommand declares its flags
// once (name, value or switch, help) and gets parsed, validated arguments.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <posenc/io/tensor.hpp>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace posenc_cli {

/// A usage error: printed as one line on stderr, exit status 2.
struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct flag {
  std::string name;        ///< "--dim"
  std::string value_name;  ///< "D"; empty for a switch
  std::string help;
  bool required = false;
};

/// Parsed arguments of one subcommand.
class args {
 public:
  bool has(const std::string& name) const { return values_.count(name) != 0; }
  std::optional<std::string> get(const std::string& name) const;
  std::string str(const std::string& name) const;  // required value
  std::string str_or(const std::string& name, const std::string& fallback) const;
  long long integer(const std::string& name) const;
  long long integer_or(const std::string& name, long long fallback) const;
  double real(const std::string& name) const;
  double real_or(const std::string& name, double fallback) const;
  std::vector<double> reals(const std::string& name) const;  // "a,b,c"
  /// One of `choices`, else a usage_error naming the flag and the value.
  std::string choice(const std::string& name, const std::vector<std::string>& choices,
                     const std::string& fallback) const;

  std::map<std::string, std::string> values_;
  std::vector<std::string> positional_;
};

struct command {
  std::string name;     ///< "sinusoidal", or "bias alibi" for a nested subcommand
  std::string summary;  ///< one line for `posenc --help`
  std::string usage;    ///< the synopsis line(s)
  std::vector<flag> flags;
  std::function<int(const args&)> run;
};

/// Parses argv for `cmd`: unknown flags, missing values and missing required flags throw
/// usage_error. `--help` is handled by the caller.
args parse(const command& cmd, const std::vector<std::string>& argv);

/// The full help text of one subcommand.
std::string help_text(const command& cmd);

/// The largest output a subcommand writes: 2^28 elements (1 GiB of float32, 2 GiB of
/// float64 or int64). Larger requests are refused as usage errors before anything is
/// allocated or written.
constexpr long long max_elements = 1LL << 28;

/// One `.npy` file of an output_files set, open on its temporary: the header is already
/// written; write() appends elements in C order (last index fastest), in as many calls as
/// suit the caller, so a large table can be produced and written a chunk of rows at a time.
class npy_output {
 public:
  npy_output(const npy_output&) = delete;
  npy_output& operator=(const npy_output&) = delete;
  ~npy_output();

  /// Appends `n` elements; Scalar must be the file's element type (float, double or
  /// std::int64_t). Throws std::runtime_error naming the flag and the file when the write
  /// fails (a full disk), and std::logic_error past the element count of the header.
  template <class Scalar>
  void write(const Scalar* data, std::size_t n) {
    static_assert(std::is_same_v<Scalar, float> || std::is_same_v<Scalar, double> ||
                      std::is_same_v<Scalar, std::int64_t>,
                  "npy_output::write: float, double or std::int64_t");
    if (posenc::io::dtype_of<Scalar>() != type_)
      throw std::logic_error("npy_output::write: element type differs from the header");
    append(data, n, sizeof(Scalar));
  }

  /// Elements still to be written before the file is complete.
  std::uint64_t remaining() const noexcept { return total_ - written_; }

 private:
  friend class output_files;
  npy_output() = default;
  void append(const void* data, std::size_t n, std::size_t width);
  [[noreturn]] void write_failed() const;

  std::string flag_;         // "--out", for messages
  std::string destination_;  // the path given (the file it names after a commit)
  std::string target_;       // the file actually replaced: destination_, or a link's target
  std::string temp_;         // the temporary in the target's folder
  std::FILE* file_ = nullptr;
  posenc::io::dtype type_ = posenc::io::dtype::f64;
  std::uint64_t total_ = 0, written_ = 0;
  int slot_ = -1;  // its entry in the signal handler's table, -1 when none
};

/// Elements pushed one at a time and written to an npy_output 1 MiB at a time: how the
/// subcommands that compute their output element by element keep memory bounded.
template <class Scalar>
class npy_chunks {
 public:
  explicit npy_chunks(npy_output& out) : out_(out) { buf_.reserve(capacity); }
  void push(Scalar v) {
    buf_.push_back(v);
    if (buf_.size() == capacity) flush();
  }
  /// Writes what was pushed since the last flush (call once at the end).
  void flush() {
    out_.write(buf_.data(), buf_.size());
    buf_.clear();
  }

 private:
  static constexpr std::size_t capacity = (std::size_t{1} << 20) / sizeof(Scalar);
  npy_output& out_;
  std::vector<Scalar> buf_;
};

/// The files one run of a subcommand writes, all or nothing. add() writes each file to a
/// fresh temporary in its destination's folder (a hidden `.NAME.posenc-XXXXXXXX.tmp`);
/// commit() renames the temporaries over their destinations only once every file is
/// complete. Until then the destinations are untouched, and any failure (an exception, a
/// failed write, a full disk, SIGINT / SIGTERM / SIGHUP / SIGXFSZ) removes every temporary: a
/// failed command leaves no new, partial or clobbered file. Print "wrote ..." after commit().
class output_files {
 public:
  output_files() = default;
  output_files(const output_files&) = delete;
  output_files& operator=(const output_files&) = delete;
  /// Removes the temporaries of a set that was not committed.
  ~output_files();

  /// Starts the `.npy` file `path` (the value of `flag`) with element type Scalar (float,
  /// double or std::int64_t) and `shape`. Throws usage_error when `path` names the
  /// destination of another output of this set, and std::runtime_error naming the flag
  /// and the path when it is a folder or its folder cannot take a new file.
  template <class Scalar>
  npy_output& npy(const std::string& flag, const std::string& path,
                  const std::vector<long long>& shape) {
    return add(flag, path, posenc::io::dtype_of<Scalar>(), shape);
  }

  /// Checks that every file is complete, then renames each temporary over its
  /// destination. Throws std::logic_error for an incomplete file (nothing renamed) and
  /// std::runtime_error when a rename fails (the files this set had created are removed).
  void commit();

 private:
  npy_output& add(const std::string& flag, const std::string& path, posenc::io::dtype type,
                  const std::vector<long long>& shape);
  std::vector<std::unique_ptr<npy_output>> files_;
  bool committed_ = false;
};

/// numpy's name of a float Scalar's dtype ("float32" / "float64"), for the "wrote" lines.
template <class Scalar>
constexpr const char* dtype_name() {
  return sizeof(Scalar) == 4 ? "float32" : "float64";
}

// Registered subcommands, one function per source file.
command sinusoidal_command();
command learned_command();
command rope_command();
command bias_alibi_command();
command bias_t5_command();
command attention_command();
command embed_command();

}  // namespace posenc_cli
