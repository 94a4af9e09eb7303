// tour_check_png: part of the tour's smoke test. Reads each PNG given and fails (exit 1)
// unless it is a plausible picture: a sensible size, many colours, and ink on a good part
// of it, so that a blank, truncated or single-colour file is caught.
//
//     tour_check_png FILE.png...

#include <cstdint>
#include <exception>
#include <iostream>
#include <unordered_set>

#include "common/png.hpp"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: tour_check_png FILE.png...\n";
    return 2;
  }
  int bad = 0;
  for (int a = 1; a < argc; ++a) {
    try {
      const posenc_plot::image img = posenc_plot::read_png(argv[a]);
      std::unordered_set<std::uint32_t> colours;
      long long ink = 0;
      for (int y = 0; y < img.height(); ++y)
        for (int x = 0; x < img.width(); ++x) {
          const posenc_plot::rgb c = img.at(x, y);
          colours.insert(std::uint32_t(c.r) << 16 | std::uint32_t(c.g) << 8 | c.b);
          if (c != posenc_plot::rgb{255, 255, 255}) ++ink;
        }
      const double ink_share = double(ink) / (double(img.width()) * double(img.height()));
      const bool ok = img.width() >= 300 && img.height() >= 200 && img.width() <= 4000 &&
                      img.height() <= 4000 && colours.size() >= 16 && ink_share >= 0.02;
      std::cout << (ok ? "ok   " : "BAD  ") << argv[a] << ": " << img.width() << " x "
                << img.height() << ", " << colours.size() << " colours, "
                << int(ink_share * 100 + 0.5) << "% ink\n";
      if (!ok) ++bad;
    } catch (const std::exception& e) {
      std::cout << "BAD  " << argv[a] << ": " << e.what() << "\n";
      ++bad;
    }
  }
  return bad == 0 ? 0 : 1;
}
