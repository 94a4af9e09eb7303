// Tests of the tour's plotting library: colour maps, ticks, font, image clipping, PNG
// round trip, and that heatmaps and line plots draw what they are given and reject bad
// input. A self-contained program (no test framework, like the numbered examples): it
// prints each failed check and exits 1 if there was one.

#include "common/plot.hpp"

#include <cmath>
#include <filesystem>
#include <iostream>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/font.hpp"

namespace {

int failures = 0;
std::vector<std::pair<const char*, void (*)()>>& registry() {
  static std::vector<std::pair<const char*, void (*)()>> cases;
  return cases;
}
struct registrar {
  registrar(const char* name, void (*fn)()) { registry().emplace_back(name, fn); }
};
void failed(const char* what, int line) {
  ++failures;
  std::cout << "  FAILED line " << line << ": " << what << "\n";
}

}  // namespace

#define POSENC_CAT2(a, b) a##b
#define POSENC_CAT(a, b) POSENC_CAT2(a, b)
#define TEST_CASE(name)                                                                  \
  static void POSENC_CAT(test_, __LINE__)();                                             \
  static const registrar POSENC_CAT(reg_, __LINE__)(name, &POSENC_CAT(test_, __LINE__)); \
  static void POSENC_CAT(test_, __LINE__)()
#define CHECK(...)                                      \
  do {                                                  \
    if (!(__VA_ARGS__)) failed(#__VA_ARGS__, __LINE__); \
  } while (0)
#define CHECK_FALSE(...) CHECK(!(__VA_ARGS__))
#define REQUIRE(...)                  \
  do {                                \
    if (!(__VA_ARGS__)) {             \
      failed(#__VA_ARGS__, __LINE__); \
      return;                         \
    }                                 \
  } while (0)
#define CHECK_THROWS_AS(expr, type)                         \
  do {                                                      \
    bool thrown_ = false;                                   \
    try {                                                   \
      (void)(expr);                                         \
    } catch (const type&) {                                 \
      thrown_ = true;                                       \
    } catch (...) {                                         \
    }                                                       \
    if (!thrown_) failed(#expr " throws " #type, __LINE__); \
  } while (0)
#define CHECK_NOTHROW(expr)                      \
  do {                                           \
    try {                                        \
      (void)(expr);                              \
    } catch (...) {                              \
      failed(#expr " does not throw", __LINE__); \
    }                                            \
  } while (0)

namespace plot = posenc_plot;

namespace {

std::map<unsigned, long> histogram(const plot::image& img) {
  std::map<unsigned, long> h;
  for (int y = 0; y < img.height(); ++y)
    for (int x = 0; x < img.width(); ++x) {
      const plot::rgb c = img.at(x, y);
      ++h[unsigned(c.r) << 16 | unsigned(c.g) << 8 | c.b];
    }
  return h;
}

long count(const plot::image& img, plot::rgb c) {
  const auto h = histogram(img);
  const auto it = h.find(unsigned(c.r) << 16 | unsigned(c.g) << 8 | c.b);
  return it == h.end() ? 0 : it->second;
}

}  // namespace

TEST_CASE("colour maps: endpoints, centre, clamping, NaN") {
  CHECK(plot::map_color(plot::colormap::viridis, 0.0) == plot::rgb{68, 1, 84});
  CHECK(plot::map_color(plot::colormap::viridis, 1.0) == plot::rgb{253, 231, 37});
  CHECK(plot::map_color(plot::colormap::viridis, -3.0) ==
        plot::map_color(plot::colormap::viridis, 0.0));
  CHECK(plot::map_color(plot::colormap::viridis, 7.0) ==
        plot::map_color(plot::colormap::viridis, 1.0));
  CHECK(plot::map_color(plot::colormap::diverging, 0.5) == plot::rgb{255, 255, 255});
  CHECK(plot::map_color(plot::colormap::blues, 0.0) == plot::rgb{255, 255, 255});
  const double nan = std::numeric_limits<double>::quiet_NaN();
  CHECK(plot::map_color(plot::colormap::diverging, nan) == plot::colors::missing);
  // Diverging: blue below the middle, red above.
  const plot::rgb lo = plot::map_color(plot::colormap::diverging, 0.1);
  const plot::rgb hi = plot::map_color(plot::colormap::diverging, 0.9);
  CHECK(lo.b > lo.r);
  CHECK(hi.r > hi.b);
  // viridis gets brighter monotonically (it is meant for magnitudes).
  double prev = -1;
  for (int i = 0; i <= 100; ++i) {
    const plot::rgb c = plot::map_color(plot::colormap::viridis, i / 100.0);
    const double l = 0.299 * c.r + 0.587 * c.g + 0.114 * c.b;
    CHECK(l >= prev - 0.5);
    prev = l;
  }
}

TEST_CASE("auto_range") {
  plot::matrix m(2, 2);
  m << -0.5, 0.25, 2.0, std::numeric_limits<double>::quiet_NaN();
  const auto v = plot::auto_range(m, plot::colormap::viridis);
  CHECK(v.lo == -0.5);
  CHECK(v.hi == 2.0);
  const auto d = plot::auto_range(m, plot::colormap::diverging);
  CHECK(d.lo == -2.0);
  CHECK(d.hi == 2.0);
  const plot::matrix c = plot::matrix::Constant(3, 3, 4.0);
  CHECK(plot::auto_range(c, plot::colormap::viridis).hi > 4.0);
  const plot::matrix bad = plot::matrix::Constant(2, 2, std::numeric_limits<double>::infinity());
  CHECK_THROWS_AS(plot::auto_range(bad, plot::colormap::viridis), std::invalid_argument);
}

TEST_CASE("nice ticks and their labels") {
  CHECK(plot::nice_ticks(0, 99, 6) == std::vector<double>{0, 20, 40, 60, 80});
  CHECK(plot::nice_ticks(-1, 1, 5) == std::vector<double>{-1, -0.5, 0, 0.5, 1});
  CHECK(plot::nice_ticks(3, 3, 5) == std::vector<double>{3});
  CHECK(plot::nice_ticks(-2, 101, 6) == std::vector<double>{0, 25, 50, 75, 100});
  CHECK(plot::nice_ticks(0, 9, 5, true) == std::vector<double>{0, 5});
  CHECK(plot::nice_ticks(0, 9, 5) == std::vector<double>{0, 2.5, 5, 7.5});
  CHECK(plot::nice_ticks(0, 3, 10, true) == std::vector<double>{0, 1, 2, 3});
  for (int max_ticks = 2; max_ticks <= 10; ++max_ticks)
    for (double hi : {0.7, 9.0, 37.0, 99.0, 1234.0, 4095.0}) {
      const auto t = plot::nice_ticks(0, hi, max_ticks, true);
      CHECK(!t.empty());
      CHECK(static_cast<int>(t.size()) <= max_ticks);
      for (double v : t) CHECK(v == std::round(v));
    }
  for (double t : plot::nice_ticks(-0.037, 0.081, 6)) {
    CHECK(t >= -0.037);
    CHECK(t <= 0.081);
  }
  CHECK(plot::format_tick(0.25, 0.25) == "0.25");
  CHECK(plot::format_tick(40, 20) == "40");
  CHECK(plot::format_tick(-1e-17, 0.5) == "0.0");
  CHECK(plot::format_tick(-0.5, 0.5) == "-0.5");
}

TEST_CASE("font: every printable character has a glyph; others get a box") {
  for (char ch = '!'; ch <= '~'; ++ch) {
    int ink = 0;
    for (int r = 0; r < plot::font::glyph_height; ++r)
      for (int c = 0; c < plot::font::glyph_width; ++c) ink += plot::font::ink(ch, r, c);
    CHECK(ink > 0);
    CHECK(plot::font::glyph_of(ch) != plot::font::glyph_of('\x01'));
  }
  for (int r = 0; r < plot::font::glyph_height; ++r)
    for (int c = 0; c < plot::font::glyph_width; ++c) CHECK_FALSE(plot::font::ink(' ', r, c));
  CHECK(plot::font::glyph_of('A') != plot::font::glyph_of('B'));
  CHECK(plot::font::glyph_of('0') != plot::font::glyph_of('O'));
  CHECK_FALSE(plot::font::ink('A', -1, 0));
  CHECK_FALSE(plot::font::ink('A', 0, 5));
  CHECK(plot::text_width("abc", 2) == 3 * 6 * 2 - 2);
  CHECK(plot::text_width("", 2) == 0);
}

TEST_CASE("image: clipping, bounds, text") {
  plot::image img(20, 10);
  img.set(-1, 0, plot::colors::black);
  img.set(20, 0, plot::colors::black);
  img.fill_rect(-5, -5, 100, 100, plot::rgb{1, 2, 3});
  CHECK(count(img, plot::rgb{1, 2, 3}) == 200);
  CHECK_THROWS_AS(img.at(20, 0), std::out_of_range);
  CHECK_THROWS_AS(img.at(0, -1), std::out_of_range);
  img.set_clip(5, 5, 2, 2);
  img.fill_rect(0, 0, 20, 10, plot::colors::white);
  CHECK(count(img, plot::colors::white) == 4);
  img.set(0, 0, plot::colors::black);  // outside the clip rectangle: ignored
  img.blend(19, 9, plot::colors::black, 1.0);
  CHECK(count(img, plot::colors::black) == 0);
  img.reset_clip();
  img.set(0, 0, plot::colors::black);
  CHECK(count(img, plot::colors::black) == 1);
  CHECK_THROWS_AS(plot::image(-1, 3), std::invalid_argument);

  plot::image t(200, 40);
  plot::draw_text(t, 10, 10, "Hello -1.5", 2, plot::colors::black);
  plot::draw_text(t, 190, 35, "vertical", 1, plot::colors::black, plot::align::left, true);
  plot::draw_text(t, -50, -50, "far outside", 3, plot::colors::black);
  CHECK(count(t, plot::colors::black) > 100);
}

TEST_CASE("PNG round trip") {
  plot::image img(37, 11);
  for (int y = 0; y < 11; ++y)
    for (int x = 0; x < 37; ++x)
      img.set(x, y, plot::rgb{std::uint8_t(x * 7), std::uint8_t(y * 23), std::uint8_t(x ^ y)});
  const auto path = std::filesystem::temp_directory_path() / "posenc_plot_test_roundtrip.png";
  plot::write_png(img, path);
  const plot::image back = plot::read_png(path);
  REQUIRE(back.width() == 37);
  REQUIRE(back.height() == 11);
  for (int y = 0; y < 11; ++y)
    for (int x = 0; x < 37; ++x) CHECK(back.at(x, y) == img.at(x, y));
  std::filesystem::remove(path);
  CHECK_THROWS_AS(plot::write_png(plot::image(), path), std::runtime_error);
  CHECK_THROWS_AS(plot::read_png(path), std::runtime_error);
}

TEST_CASE("heatmap draws each cell in its colour and rejects bad input") {
  plot::matrix m(2, 2);
  m << 0, 1, 1, 0;
  plot::heatmap_options o;
  o.range = plot::value_range{0, 1};
  o.width = o.height = 100;
  o.title = "checker";
  o.x_label = "x";
  o.y_label = "y";
  const plot::image img = plot::heatmap(m, o);
  // 2 x 2 cells of 50 x 50 pixels, half of each colour (the colour bar adds a few more).
  CHECK(count(img, plot::map_color(plot::colormap::viridis, 0)) >= 5000);
  CHECK(count(img, plot::map_color(plot::colormap::viridis, 1)) >= 5000);
  CHECK(count(img, plot::map_color(plot::colormap::viridis, 0)) < 5200);

  plot::matrix big = plot::matrix::Zero(1000, 3);
  big(500, 1) = std::numeric_limits<double>::quiet_NaN();
  o.annotate = true;
  CHECK(plot::heatmap(big, o).width() > 100);  // more rows than pixels: sampled

  o.annotate = false;
  CHECK_THROWS_AS(plot::heatmap(plot::matrix(0, 3), o), std::invalid_argument);
  o.x_tick_labels = {"a"};
  CHECK_THROWS_AS(plot::heatmap(m, o), std::invalid_argument);
  o.x_tick_labels = {"a", "b"};
  o.y_tick_labels = {"c", "d"};
  CHECK_NOTHROW(plot::heatmap(m, o));
  o.range = plot::value_range{1, 1};
  CHECK_THROWS_AS(plot::heatmap(m, o), std::invalid_argument);
}

TEST_CASE("heatmap grid: a shared scale maps equal values to equal colours") {
  plot::heatmap_options o;
  o.width = o.height = 60;
  plot::matrix a = plot::matrix::Constant(3, 3, 0.5), b(3, 3);
  b << 0, 0, 0, 0, 1, 0, 0, 0, 0;
  const plot::image shared = plot::heatmap_grid({{a, o}, {b, o}}, 2, plot::scale::shared, "shared");
  CHECK(count(shared, plot::map_color(plot::colormap::viridis, 0.5)) >= 3600);
  const plot::image separate = plot::heatmap_grid({{a, o}, {b, o}}, 1, plot::scale::separate);
  CHECK(separate.height() > separate.width());
  CHECK_THROWS_AS(plot::heatmap_grid({}, 2, plot::scale::shared), std::invalid_argument);
  CHECK_THROWS_AS(plot::heatmap_grid({{a, o}}, 0, plot::scale::shared), std::invalid_argument);
  o.range = plot::value_range{0, 1};  // no auto range to trip over the empty panel first
  CHECK_THROWS_AS(plot::heatmap_grid({{a, o}, {plot::matrix(0, 2), o}}, 2, plot::scale::shared),
                  std::invalid_argument);
  o.width = 0;
  CHECK_THROWS_AS(plot::heatmap_grid({{a, o}}, 1, plot::scale::shared), std::invalid_argument);
}

TEST_CASE("line plot draws its series and rejects bad input") {
  plot::series s;
  s.name = "line";
  for (int i = 0; i < 50; ++i) {
    s.xs.push_back(i);
    s.ys.push_back(i == 25 ? std::numeric_limits<double>::quiet_NaN() : std::sin(i / 5.0));
  }
  plot::series dots = s;
  dots.name = "dots";
  dots.line_width = 0;
  dots.mark = plot::marker::square;
  dots.color = plot::rgb{200, 0, 0};
  plot::line_options o;
  o.title = "t";
  o.x_label = "x";
  o.y_label = "y";
  const plot::image img = plot::line_plot({s, dots}, o);
  CHECK(count(img, plot::series_color(0)) > 300);
  CHECK(count(img, plot::rgb{200, 0, 0}) > 49 * 25);

  // Axes much narrower than the data: far-away points are clipped, never overflow.
  plot::line_options zoom = o;
  zoom.x_min = 10;
  zoom.x_max = 10 + 1e-9;
  zoom.y_min = 0;
  zoom.y_max = 1e-12;
  plot::series huge = dots;
  huge.line_width = 3;
  huge.mark = plot::marker::circle;
  CHECK(plot::line_plot({s, huge, dots}, zoom).width() > 0);

  plot::series bad = s;
  bad.ys.pop_back();
  CHECK_THROWS_AS(plot::line_plot({bad}, o), std::invalid_argument);
  plot::series empty;
  CHECK_THROWS_AS(plot::line_plot({empty}, o), std::invalid_argument);
  CHECK_THROWS_AS(plot::compose({}, 2), std::invalid_argument);
  CHECK(plot::compose({img, img, img}, 2).width() == 2 * img.width());
}

int main() {
  for (const auto& [name, fn] : registry()) {
    const int before = failures;
    fn();
    std::cout << (failures == before ? "ok    " : "FAIL  ") << name << "\n";
  }
  std::cout << (failures == 0 ? "all plot tests passed\n" : "plot tests FAILED\n");
  return failures == 0 ? 0 : 1;
}
