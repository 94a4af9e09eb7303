#pragma once
// The `posenc` command-line tool's small framework: each subcommand declares its flags
// once (name, value or switch, help) and gets parsed, validated arguments.

#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
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

}  // namespace posenc_cli
