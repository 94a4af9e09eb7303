#include "cli.hpp"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>

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
  if (s.empty() || errno != 0 || end != s.c_str() + s.size())
    throw usage_error("invalid value for " + name + ": '" + s + "' is not an integer");
  return v;
}

long long args::integer_or(const std::string& name, long long fallback) const {
  return has(name) ? integer(name) : fallback;
}

static double parse_real(const std::string& name, const std::string& s) {
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || errno != 0 || end != s.c_str() + s.size() || !std::isfinite(v))
    throw usage_error("invalid value for " + name + ": '" + s + "' is not a finite number");
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
