// tour: the classic positional-encoding demonstrations, computed with posenc, printed with
// their real numbers, and drawn as PNG pictures.
//
//     tour [OUTDIR]        (default: tour_out)
//
// Every section checks what it claims; the exit status is non-zero when a check fails.

#include <cstdarg>
#include <cstdio>
#include <exception>
#include <fstream>
#include <iostream>
#include <posenc/version.hpp>
#include <string>
#include <system_error>
#include <vector>

#include "tour.hpp"

namespace tour {

void tour_context::save(const posenc_plot::image& img, const std::string& file,
                        const std::string& caption) {
  posenc_plot::write_png(img, out / file);
  pictures.push_back({file, caption});
  log << "    picture: " << (out / file).string() << "\n";
}

void tour_context::finding(const std::string& text) {
  findings.push_back(text);
  log << "  - " << text << "\n";
}

bool tour_context::check(bool ok, const std::string& claim) {
  ++checks;
  if (!ok) {
    ++failures;
    log << "  CHECK FAILED: " << claim << "\n";
  }
  return ok;
}

std::string format(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  va_list again;
  va_copy(again, args);
  const int n = std::vsnprintf(nullptr, 0, fmt, args);
  va_end(args);
  std::string out(n > 0 ? static_cast<std::size_t>(n) : 0, '\0');
  if (n > 0) std::vsnprintf(out.data(), out.size() + 1, fmt, again);
  va_end(again);
  return out;
}

}  // namespace tour

namespace {

// The sections, in the order they run. Add new ones here, one line each.
const tour::section sections[] = {
    {"absolute", "Absolute positions: sinusoidal and learned tables", tour::section_absolute},
    {"rotary", "Rotary embeddings: the relative property and the scalings' frequencies",
     tour::section_rotary},
    {"attention", "Attention: one sentence under every position scheme", tour::section_attention},
};

// index.md: the findings and pictures of this run, readable on any Markdown viewer.
void write_index(const tour::tour_context& ctx) {
  std::ofstream md(ctx.out / "index.md");
  md << "# posenc tour (posenc " << posenc::version_string << ")\n\n## Findings\n\n";
  for (const auto& f : ctx.findings) md << "- " << f << "\n";
  md << "\n## Pictures\n\n";
  for (const auto& p : ctx.pictures)
    md << "### " << p.caption << "\n\n![" << p.caption << "](" << p.file << ")\n\n";
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (!args.empty() && (args[0] == "--help" || args[0] == "-h")) {
    std::cout
        << "Usage: tour [OUTDIR]\n\nRuns the positional-encoding demonstrations, prints each "
           "finding with its numbers,\nand writes the pictures (PNG) and index.md into OUTDIR "
           "(default: tour_out).\n";
    return 0;
  }
  if (args.size() > 1 || (!args.empty() && args[0].rfind("-", 0) == 0)) {
    std::cerr << "tour: unexpected argument '" << args.back() << "' (usage: tour [OUTDIR])\n";
    return 2;
  }
  const std::filesystem::path out =
      args.empty() ? std::filesystem::path("tour_out") : std::filesystem::path(args[0]);
  std::error_code ec;
  std::filesystem::create_directories(out, ec);
  if (ec || !std::filesystem::is_directory(out)) {
    std::cerr << "tour: cannot create the folder " << out.string() << ": " << ec.message() << "\n";
    return 1;
  }
  tour::tour_context ctx(std::filesystem::absolute(out), std::cout);
  std::cout << "posenc " << posenc::version_string << " tour: pictures go to " << ctx.out.string()
            << "\n";

  int crashed = 0;
  for (const auto& s : sections) {
    std::cout << "\n== " << s.name << ": " << s.title << "\n";
    try {
      s.run(ctx);
    } catch (const std::exception& e) {
      ++crashed;
      std::cout << "  SECTION FAILED: " << e.what() << "\n";
    }
  }
  write_index(ctx);
  std::cout << "\n"
            << ctx.pictures.size() << " pictures and index.md in " << ctx.out.string() << "; "
            << ctx.checks - ctx.failures << " of " << ctx.checks << " checks hold";
  if (crashed) std::cout << "; " << crashed << " section(s) stopped with an error";
  std::cout << "\n";
  return ctx.failures == 0 && crashed == 0 ? 0 : 1;
}
