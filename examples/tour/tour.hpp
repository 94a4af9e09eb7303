#pragma once
// The tour's section interface. A section is one function that computes its findings with
// posenc, prints a short line per finding (with the real numbers), checks what it claims,
// and saves its pictures into the output folder. main.cpp lists the sections in order;
// adding one is a declaration here, a source file, and one line in that list.

#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

#include "common/plot.hpp"

/// Lets the compiler check format() calls like printf's.
#if defined(__GNUC__) || defined(__clang__)
#define POSENC_TOUR_PRINTF __attribute__((format(printf, 1, 2)))
#else
#define POSENC_TOUR_PRINTF
#endif

namespace tour {

/// What every section gets: where to write, where to print, and the record of what it did.
struct tour_context {
  std::filesystem::path out;  ///< the output folder (created before the first section)
  std::ostream& log;          ///< findings are printed here

  struct picture {
    std::string file;     ///< name inside `out`
    std::string caption;  ///< one line: what the picture shows
  };
  std::vector<picture> pictures;      ///< every picture saved, in order
  std::vector<std::string> findings;  ///< every finding printed, in order
  int checks = 0, failures = 0;       ///< claims checked, and how many did not hold

  tour_context(std::filesystem::path dir, std::ostream& os) : out(std::move(dir)), log(os) {}

  /// Writes `img` as out/file (a .png name) and records it with its caption.
  void save(const posenc_plot::image& img, const std::string& file, const std::string& caption);
  /// Prints one finding, "  - text", and records it for the summary.
  void finding(const std::string& text);
  /// Counts a claim; when it does not hold prints "  CHECK FAILED: claim" and counts a
  /// failure (the tour then exits non-zero). Returns ok.
  bool check(bool ok, const std::string& claim);
};

/// printf-style formatting into a std::string (for finding lines).
std::string format(const char* fmt, ...) POSENC_TOUR_PRINTF;

/// A section: a short name, a title line, and the function that runs it.
using section_fn = void (*)(tour_context&);
struct section {
  const char* name;
  const char* title;
  section_fn run;
};

// The sections, one declaration each (defined in the file named).

/// absolute.cpp: permutation equivariance without positions; the sinusoidal table as a
/// heatmap and as waves; cosine similarity; dot product vs offset; learned vs sinusoidal.
void section_absolute(tour_context& ctx);

/// rotary.cpp: the RoPE relative property (q.k against the offset, from several starts) and
/// the effective frequency spectrum of every scaling.
void section_rotary(tour_context& ctx);

/// attention.cpp: attention weights of one sentence with no positions, sinusoidal, RoPE,
/// ALiBi and T5 side by side; ALiBi and T5 biases as matrices.
void section_attention(tour_context& ctx);

}  // namespace tour
