// Fuzz harness: the `posenc` command line's argument parser (examples/cli/cli.hpp) on
// arbitrary bytes.
//
// Input: the first byte picks the subcommand (its value modulo the number of
// subcommands: '0' sinusoidal, '1' learned, '2' rope, '3' bias alibi, '4' bias t5,
// '5' attention), the rest is split at NUL bytes into the argv strings after it. The
// parsed arguments are then read back through every accessor the subcommands use. The
// subcommands themselves are not run: they write files wherever their flags say.
// posenc_cli::usage_error is the parser's answer to bad arguments (exit status 2); any
// other exception is a finding.

#include "cli/cli.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_support.hpp"

namespace {

using posenc_cli::usage_error;

const std::vector<posenc_cli::command>& commands() {
  static const std::vector<posenc_cli::command> all = {
      posenc_cli::sinusoidal_command(), posenc_cli::learned_command(),
      posenc_cli::rope_command(),       posenc_cli::bias_alibi_command(),
      posenc_cli::bias_t5_command(),    posenc_cli::attention_command(),
  };
  return all;
}

/// Every accessor on one flag, as the subcommands call them.
void read_back(const posenc_cli::args& a, const posenc_cli::flag& f) {
  const std::string& n = f.name;
  posenc_fuzz::guarded<usage_error>("args::integer_or", [&] { (void)a.integer_or(n, 3); });
  posenc_fuzz::guarded<usage_error>("args::real_or", [&] { (void)a.real_or(n, 0.5); });
  posenc_fuzz::guarded<usage_error>("args::str_or", [&] { (void)a.str_or(n, "x"); });
  posenc_fuzz::guarded<usage_error>("args::choice", [&] {
    (void)a.choice(n, {"half", "interleaved"}, "half");
  });
  if (!a.has(n)) return;
  posenc_fuzz::guarded<usage_error>("args::str", [&] { (void)a.str(n); });
  posenc_fuzz::guarded<usage_error>("args::integer", [&] { (void)a.integer(n); });
  posenc_fuzz::guarded<usage_error>("args::real", [&] { (void)a.real(n); });
  posenc_fuzz::guarded<usage_error>("args::reals", [&] { (void)a.reals(n); });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const auto& cmds = commands();
  const posenc_cli::command& cmd = cmds[data[0] % cmds.size()];
  std::vector<std::string> argv;
  if (size > 1) {
    argv.emplace_back();
    for (std::size_t i = 1; i < size; ++i) {
      if (data[i] == 0)
        argv.emplace_back();
      else
        argv.back() += static_cast<char>(data[i]);
    }
  }
  posenc_cli::args parsed;
  if (!posenc_fuzz::guarded<usage_error>("parse", [&] { parsed = posenc_cli::parse(cmd, argv); }))
    return 0;
  for (const auto& f : cmd.flags) read_back(parsed, f);
  if (!parsed.positional_.empty())
    posenc_fuzz::fail("parse", "kept a positional argument (the subcommands take none)");
  return 0;
}
