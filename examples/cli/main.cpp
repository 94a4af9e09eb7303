// posenc: produce positional-encoding tables, biases and attention outputs as .npy files
// without writing C++. `posenc --help` lists the subcommands.

#include <exception>
#include <iostream>
#include <posenc/version.hpp>
#include <string>
#include <vector>

#include "cli.hpp"

namespace {

std::vector<posenc_cli::command> all_commands() {
  // Register subcommands here, one line each.
  return {
      posenc_cli::sinusoidal_command(), posenc_cli::learned_command(),
      posenc_cli::rope_command(),       posenc_cli::bias_alibi_command(),
      posenc_cli::bias_t5_command(),    posenc_cli::attention_command(),
      posenc_cli::embed_command(),
  };
}

void print_overview(std::ostream& os, const std::vector<posenc_cli::command>& cmds) {
  os << "posenc " << posenc::version_string
     << " - transformer positional encodings as .npy files\n\nUsage:\n  posenc SUBCOMMAND [flags]\n"
        "  posenc SUBCOMMAND --help\n\nSubcommands:\n";
  for (const auto& c : cmds) {
    std::string left = "  " + c.name;
    if (left.size() < 22) left.resize(22, ' ');
    os << left << c.summary << "\n";
  }
}

}  // namespace

int main(int argc, char** argv) {
  const auto cmds = all_commands();
  std::vector<std::string> rest(argv + 1, argv + argc);
  if (rest.empty()) {
    print_overview(std::cerr, cmds);
    return 2;
  }
  if (rest[0] == "--help" || rest[0] == "-h" || rest[0] == "help") {
    print_overview(std::cout, cmds);
    return 0;
  }
  if (rest[0] == "--version") {
    std::cout << "posenc " << posenc::version_string << "\n";
    return 0;
  }
  // Longest match first, so "bias alibi" wins over a bare "bias".
  const posenc_cli::command* chosen = nullptr;
  std::size_t used = 0;
  for (const auto& c : cmds) {
    std::vector<std::string> words;
    std::string w;
    for (char ch : c.name + " ") {
      if (ch == ' ') {
        if (!w.empty()) words.push_back(w);
        w.clear();
      } else
        w += ch;
    }
    if (words.size() > rest.size() || words.size() <= used) continue;
    bool match = true;
    for (std::size_t i = 0; i < words.size(); ++i) match = match && rest[i] == words[i];
    if (match) {
      chosen = &c;
      used = words.size();
    }
  }
  if (!chosen) {
    // A group name alone ("posenc bias") lists its members.
    bool group = false;
    for (const auto& c : cmds)
      if (c.name.rfind(rest[0] + " ", 0) == 0) {
        if (!group) std::cerr << "posenc " << rest[0] << ": choose one of:\n";
        group = true;
        std::cerr << "  posenc " << c.name << "  " << c.summary << "\n";
      }
    if (group) return 2;
    std::cerr << "posenc: unknown subcommand '" << rest[0] << "' (see posenc --help)\n";
    return 2;
  }
  std::vector<std::string> flags(rest.begin() + static_cast<std::ptrdiff_t>(used), rest.end());
  for (const auto& f : flags)
    if (f == "--help" || f == "-h") {
      std::cout << posenc_cli::help_text(*chosen);
      return 0;
    }
  try {
    const auto parsed = posenc_cli::parse(*chosen, flags);
    return chosen->run(parsed);
  } catch (const posenc_cli::usage_error& e) {
    std::cerr << "posenc " << chosen->name << ": " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "posenc " << chosen->name << ": " << e.what() << "\n";
    return 1;
  }
}
