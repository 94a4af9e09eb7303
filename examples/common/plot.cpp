#include "plot.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <limits>
#include <stdexcept>

#include "font.hpp"

namespace posenc_plot {

namespace {

constexpr int pad = 10;        // blank space around blocks of a picture
constexpr int tick_len = 5;    // tick marks, outside the plot area
constexpr int tick_gap = 4;    // between a tick mark and its label
constexpr int bar_width = 18;  // colour bar

struct control_point {
  double t;
  rgb c;
};

rgb interpolate(const control_point* pts, std::size_t n, double t) noexcept {
  if (std::isnan(t)) return colors::missing;
  t = std::clamp(t, 0.0, 1.0);
  std::size_t i = 1;
  while (i + 1 < n && pts[i].t < t) ++i;
  const control_point& a = pts[i - 1];
  const control_point& b = pts[i];
  const double u = b.t > a.t ? (t - a.t) / (b.t - a.t) : 0.0;
  auto mix = [u](std::uint8_t x, std::uint8_t y) {
    return static_cast<std::uint8_t>(std::lround(x + u * (y - x)));
  };
  return {mix(a.c.r, b.c.r), mix(a.c.g, b.c.g), mix(a.c.b, b.c.b)};
}

// viridis sampled at eleven evenly spaced points; linear in between is within a few
// levels of the full map.
constexpr std::array<control_point, 11> viridis_pts{{{0.0, {68, 1, 84}},
                                                     {0.1, {72, 36, 117}},
                                                     {0.2, {65, 68, 135}},
                                                     {0.3, {53, 95, 141}},
                                                     {0.4, {42, 120, 142}},
                                                     {0.5, {33, 145, 140}},
                                                     {0.6, {34, 168, 132}},
                                                     {0.7, {68, 191, 112}},
                                                     {0.8, {122, 209, 81}},
                                                     {0.9, {189, 223, 38}},
                                                     {1.0, {253, 231, 37}}}};

// Blue - white - red, symmetric, pure white at the centre so zero reads as "nothing".
constexpr std::array<control_point, 9> diverging_pts{{{0.0, {5, 48, 97}},
                                                      {0.125, {33, 102, 172}},
                                                      {0.25, {67, 147, 195}},
                                                      {0.375, {166, 206, 227}},
                                                      {0.5, {255, 255, 255}},
                                                      {0.625, {244, 178, 160}},
                                                      {0.75, {214, 96, 77}},
                                                      {0.875, {178, 24, 43}},
                                                      {1.0, {103, 0, 31}}}};

constexpr std::array<control_point, 5> blues_pts{{{0.0, {255, 255, 255}},
                                                  {0.25, {198, 219, 239}},
                                                  {0.5, {107, 174, 214}},
                                                  {0.75, {33, 113, 181}},
                                                  {1.0, {8, 48, 107}}}};

double luminance(rgb c) noexcept { return (0.299 * c.r + 0.587 * c.g + 0.114 * c.b) / 255.0; }

void draw_bold(image& img, int x, int y, std::string_view s, int scale, rgb c, align h) {
  draw_text(img, x, y, s, scale, c, h);
  draw_text(img, x + 1, y, s, scale, c, h);
}
int bold_width(std::string_view s, int scale) { return s.empty() ? 0 : text_width(s, scale) + 1; }

void check_range(value_range r, const char* where) {
  if (!std::isfinite(r.lo) || !std::isfinite(r.hi) || !(r.hi > r.lo))
    throw std::invalid_argument(std::string(where) + ": value range [" + std::to_string(r.lo) +
                                ", " + std::to_string(r.hi) + "] must be finite with lo < hi");
}

double to_unit(value_range r, double v) { return (v - r.lo) / (r.hi - r.lo); }

// --- colour bar ------------------------------------------------------------------------

struct bar_ticks {
  std::vector<double> values;
  std::vector<std::string> labels;
  int label_width = 0;
};

bar_ticks make_bar_ticks(value_range r, int height, int s) {
  bar_ticks t;
  t.values = nice_ticks(r.lo, r.hi, std::clamp(height / (text_height(s) * 3), 2, 8));
  const double step = t.values.size() > 1 ? t.values[1] - t.values[0] : r.hi - r.lo;
  for (double v : t.values) {
    t.labels.push_back(format_tick(v, step));
    t.label_width = std::max(t.label_width, text_width(t.labels.back(), s));
  }
  return t;
}

int colorbar_width(value_range r, int height, const std::string& label, int s) {
  const bar_ticks t = make_bar_ticks(r, height, s);
  return bar_width + tick_len + tick_gap + t.label_width +
         (label.empty() ? 0 : pad + text_height(s));
}

// Draws the bar with its top-left corner at (x, y), `height` tall; labels to the right.
void draw_colorbar(image& img, int x, int y, int height, value_range r, colormap cmap,
                   const std::string& label, int s) {
  for (int yy = 0; yy < height; ++yy) {
    const double t = height > 1 ? 1.0 - static_cast<double>(yy) / (height - 1) : 0.5;
    img.fill_rect(x, y + yy, bar_width, 1, map_color(cmap, t));
  }
  img.outline_rect(x - 1, y - 1, bar_width + 2, height + 2, colors::axis);
  const bar_ticks t = make_bar_ticks(r, height, s);
  const int cap = font::cap_height * s;
  for (std::size_t i = 0; i < t.values.size(); ++i) {
    const int yy =
        y + static_cast<int>(std::lround((1.0 - to_unit(r, t.values[i])) * (height - 1)));
    img.fill_rect(x + bar_width + 1, yy, tick_len, 1, colors::axis);
    draw_text(img, x + bar_width + 1 + tick_len + tick_gap, yy - cap / 2, t.labels[i], s,
              colors::text);
  }
  if (!label.empty()) {
    const int lx = x + bar_width + 1 + tick_len + tick_gap + t.label_width + pad;
    draw_text(img, lx, y + height / 2, label, s, colors::text, align::center, true);
  }
}

// --- polylines ---------------------------------------------------------------------------

// Distance from (px, py) to the segment (x0, y0)-(x1, y1).
double segment_distance(double px, double py, double x0, double y0, double x1, double y1) {
  const double dx = x1 - x0, dy = y1 - y0;
  const double len2 = dx * dx + dy * dy;
  double u = len2 > 0 ? ((px - x0) * dx + (py - y0) * dy) / len2 : 0.0;
  u = std::clamp(u, 0.0, 1.0);
  const double ex = x0 + u * dx - px, ey = y0 + u * dy - py;
  return std::sqrt(ex * ex + ey * ey);
}

// A pixel coordinate clamped to just outside [0, limit), so that far-away (or NaN)
// coordinates never overflow an int and loops stay bounded by the image.
int to_pixel(double v, int limit) {
  if (!(v > -2.0)) return -2;
  if (!(v < limit + 2.0)) return limit + 2;
  return static_cast<int>(v);
}

void stroke(image& img, double x0, double y0, double x1, double y1, double width, rgb c) {
  const double r = width / 2 + 1;
  const int cx0 = std::max(to_pixel(std::floor(std::min(x0, x1) - r), img.width()), 0);
  const int cx1 = std::min(to_pixel(std::ceil(std::max(x0, x1) + r), img.width()), img.width() - 1);
  const int cy0 = std::max(to_pixel(std::floor(std::min(y0, y1) - r), img.height()), 0);
  const int cy1 =
      std::min(to_pixel(std::ceil(std::max(y0, y1) + r), img.height()), img.height() - 1);
  for (int y = cy0; y <= cy1; ++y)
    for (int x = cx0; x <= cx1; ++x) {
      const double d = segment_distance(x + 0.5, y + 0.5, x0, y0, x1, y1);
      img.blend(x, y, c, std::clamp(width / 2 + 0.5 - d, 0.0, 1.0));
    }
}

// A dashed segment continuing the dash pattern at `phase` (length already drawn).
void dashed(image& img, double x0, double y0, double x1, double y1, double width, rgb c,
            double dash, double& phase) {
  const double len = std::hypot(x1 - x0, y1 - y0);
  double at = 0;
  while (at < len) {
    const double in_period = std::fmod(phase, 2 * dash);
    const bool on = in_period < dash;
    const double piece = std::min(len - at, (on ? dash : 2 * dash) - in_period);
    if (on && len > 0) {
      const double a = at / len, b = (at + piece) / len;
      stroke(img, x0 + a * (x1 - x0), y0 + a * (y1 - y0), x0 + b * (x1 - x0), y0 + b * (y1 - y0),
             width, c);
    }
    at += piece;
    phase += piece;
  }
}

void draw_marker(image& img, marker m, double x, double y, double size, rgb c) {
  if (m == marker::circle) {
    draw_disc(img, x, y, size, c);
  } else if (m == marker::square) {
    const int s = std::clamp(static_cast<int>(std::lround(std::min(size, 1e4))), 0, 10000);
    img.fill_rect(to_pixel(std::round(x), img.width()) - s,
                  to_pixel(std::round(y), img.height()) - s, 2 * s + 1, 2 * s + 1, c);
  }
}

// --- heatmap layout --------------------------------------------------------------------

struct axis_ticks {
  std::vector<double> at;  // cell index (fractional: centre of the cell is i + 0.5)
  std::vector<std::string> labels;
  int max_width = 0;
};

axis_ticks index_ticks(Eigen::Index n, double start, int length_px, int label_px,
                       const std::vector<std::string>& categorical, int s) {
  axis_ticks t;
  if (!categorical.empty()) {
    // Skip labels when cells are too small to hold one each.
    const double cell = static_cast<double>(length_px) / static_cast<double>(n);
    const int every = std::max(1, static_cast<int>(std::ceil(label_px / std::max(cell, 1e-9))));
    for (Eigen::Index i = 0; i < n; i += every) {
      t.at.push_back(static_cast<double>(i) + 0.5);
      t.labels.push_back(categorical[static_cast<std::size_t>(i)]);
    }
  } else {
    const double lo = start, hi = start + static_cast<double>(n - 1);
    std::vector<double> v =
        nice_ticks(lo, hi, std::clamp(length_px / std::max(label_px, 1), 2, 10), true);
    const double step = v.size() > 1 ? v[1] - v[0] : 1.0;
    if (step < 1) {  // indices are integers: no fractional ticks
      v.clear();
      for (double x = std::ceil(lo); x <= hi; x += 1) v.push_back(x);
    }
    for (double x : v) {
      t.at.push_back(x - start + 0.5);
      t.labels.push_back(format_tick(x, std::max(step, 1.0)));
    }
  }
  for (const auto& l : t.labels) t.max_width = std::max(t.max_width, text_width(l, s));
  return t;
}

struct heatmap_layout {
  int area_x = 0, area_y = 0, area_w = 0, area_h = 0;
  int width = 0, height = 0;
  axis_ticks xt, yt;
  bool x_vertical = false;  // x tick labels rotated
  value_range range;
};

heatmap_layout layout_heatmap(Eigen::Index rows, Eigen::Index cols, const heatmap_options& o,
                              value_range range) {
  if (rows < 1 || cols < 1 || o.width < 1 || o.height < 1)
    throw std::invalid_argument("posenc_plot::heatmap: matrix is " + std::to_string(rows) + " x " +
                                std::to_string(cols) + " and plot " + std::to_string(o.width) +
                                " x " + std::to_string(o.height) + "; all must be at least 1");
  heatmap_layout L;
  L.range = range;
  const int s = std::max(1, o.text_scale);
  const int th = text_height(s);
  const int cell_w = o.width / static_cast<int>(std::min<Eigen::Index>(cols, o.width));
  const int cell_h = o.height / static_cast<int>(std::min<Eigen::Index>(rows, o.height));
  L.area_w = cols <= o.width ? cell_w * static_cast<int>(cols) : o.width;
  L.area_h = rows <= o.height ? cell_h * static_cast<int>(rows) : o.height;

  int widest_x = 0;
  for (const auto& l : o.x_tick_labels) widest_x = std::max(widest_x, text_width(l, s));
  const double cell_px = static_cast<double>(L.area_w) / static_cast<double>(cols);
  L.x_vertical = !o.x_tick_labels.empty() && widest_x > cell_px - 4;
  L.xt = index_ticks(
      cols, o.x_start, L.area_w,
      L.x_vertical ? th + 4 : (o.x_tick_labels.empty() ? text_width("00000", s) : widest_x + 8),
      o.x_tick_labels, s);
  L.yt = index_ticks(rows, o.y_start, L.area_h, th * 2, o.y_tick_labels, s);
  if (!o.y_tick_labels.empty())
    L.yt = index_ticks(rows, o.y_start, L.area_h, th + 2, o.y_tick_labels, s);

  const int title_h = o.title.empty() ? pad : th + 2 * pad;
  const int left = pad + (o.y_label.empty() ? 0 : th + pad) + L.yt.max_width + tick_len + tick_gap;
  const int x_tick_h = L.x_vertical ? L.xt.max_width : th;
  const int bottom = tick_len + tick_gap + x_tick_h + (o.x_label.empty() ? 0 : pad + th) + pad;
  int right = std::max(pad, L.xt.max_width / 2 + 2);
  if (o.colorbar) right = 2 * pad + colorbar_width(range, L.area_h, o.value_label, s) + pad;
  L.area_x = left;
  L.area_y = title_h;
  L.width = std::max(left + L.area_w + right, bold_width(o.title, s) + 2 * pad);
  L.height = title_h + L.area_h + bottom + (o.colorbar ? th / 2 : 0);
  return L;
}

}  // namespace

// ---------------------------------------------------------------------------------------

rgb series_color(std::size_t i) noexcept {
  static constexpr std::array<rgb, 8> cycle{{{0, 114, 178},
                                             {230, 97, 0},
                                             {0, 158, 115},
                                             {204, 51, 102},
                                             {117, 84, 170},
                                             {150, 110, 40},
                                             {86, 180, 233},
                                             {90, 90, 90}}};
  return cycle[i % cycle.size()];
}

rgb map_color(colormap cmap, double t) noexcept {
  switch (cmap) {
    case colormap::viridis:
      return interpolate(viridis_pts.data(), viridis_pts.size(), t);
    case colormap::diverging:
      return interpolate(diverging_pts.data(), diverging_pts.size(), t);
    case colormap::blues:
      return interpolate(blues_pts.data(), blues_pts.size(), t);
  }
  return colors::missing;
}

value_range auto_range(const Eigen::Ref<const matrix>& m, colormap cmap) {
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (Eigen::Index r = 0; r < m.rows(); ++r)
    for (Eigen::Index c = 0; c < m.cols(); ++c) {
      const double v = m(r, c);
      if (!std::isfinite(v)) continue;
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
  if (!(lo <= hi)) throw std::invalid_argument("posenc_plot::auto_range: no finite value to draw");
  if (cmap == colormap::diverging) {
    const double a = std::max(std::abs(lo), std::abs(hi));
    return a > 0 ? value_range{-a, a} : value_range{-1, 1};
  }
  if (hi == lo) return {lo - 0.5, hi + 0.5};
  return {lo, hi};
}

int text_width(std::string_view s, int scale) noexcept {
  if (s.empty()) return 0;
  return static_cast<int>(s.size()) * font::advance * scale - scale;
}

int text_height(int scale) noexcept { return font::glyph_height * scale; }

void draw_text(image& img, int x, int y, std::string_view s, int scale, rgb c, align h,
               bool vertical) {
  const int w = text_width(s, scale);
  const int shift = h == align::left ? 0 : (h == align::center ? w / 2 : w);
  for (std::size_t k = 0; k < s.size(); ++k) {
    for (int r = 0; r < font::glyph_height; ++r)
      for (int col = 0; col < font::glyph_width; ++col) {
        if (!font::ink(s[k], r, col)) continue;
        const int u = static_cast<int>(k) * font::advance * scale + col * scale;  // along the text
        const int v = r * scale;                                                  // across it
        if (vertical)  // rotated a quarter turn anticlockwise: reads bottom to top
          img.fill_rect(x + v, y + shift - u - scale, scale, scale, c);
        else
          img.fill_rect(x - shift + u, y + v, scale, scale, c);
      }
  }
}

void draw_line(image& img, double x0, double y0, double x1, double y1, double width, rgb c,
               double dash) {
  if (!(width > 0)) return;
  if (dash > 0) {
    double phase = 0;
    dashed(img, x0, y0, x1, y1, width, c, dash, phase);
  } else {
    stroke(img, x0, y0, x1, y1, width, c);
  }
}

void draw_disc(image& img, double cx, double cy, double radius, rgb c) {
  const int xa = std::max(0, to_pixel(std::floor(cx - radius - 1), img.width()));
  const int xb = std::min(img.width() - 1, to_pixel(std::ceil(cx + radius + 1), img.width()));
  const int ya = std::max(0, to_pixel(std::floor(cy - radius - 1), img.height()));
  const int yb = std::min(img.height() - 1, to_pixel(std::ceil(cy + radius + 1), img.height()));
  for (int y = ya; y <= yb; ++y)
    for (int x = xa; x <= xb; ++x) {
      const double d = std::hypot(x + 0.5 - cx, y + 0.5 - cy);
      img.blend(x, y, c, std::clamp(radius + 0.5 - d, 0.0, 1.0));
    }
}

std::vector<double> nice_ticks(double lo, double hi, int max_ticks, bool integer_steps) {
  if (!std::isfinite(lo) || !std::isfinite(hi)) return {};
  if (hi < lo) std::swap(lo, hi);
  if (hi == lo) return {lo};
  double rough = (hi - lo) / std::max(1, max_ticks - 1);
  if (integer_steps) rough = std::max(rough, 1.0);
  const double mag = std::pow(10.0, std::floor(std::log10(rough)));
  const double norm = rough / mag;
  // 2.5 only where it stays a whole number when whole numbers are asked for (25, 250, ...).
  const bool quarter = !integer_steps || mag >= 10;
  const double step = (norm <= 1                  ? 1
                       : norm <= 2                ? 2
                       : (quarter && norm <= 2.5) ? 2.5
                       : norm <= 5                ? 5
                                                  : 10) *
                      mag;
  std::vector<double> out;
  const double first = std::ceil(lo / step - 1e-9);
  for (double k = first;; k += 1) {
    double v = k * step;
    if (v > hi + 1e-9 * step) break;
    if (std::abs(v) < 1e-12 * step) v = 0;  // no "-0" from rounding
    out.push_back(v);
    if (out.size() > 1000) break;  // cannot happen with a finite positive step
  }
  return out;
}

std::string format_tick(double value, double step) {
  char buf[64];
  if (std::abs(value) >= 1e6 || (step > 0 && step < 1e-5)) {
    std::snprintf(buf, sizeof buf, "%.3g", value);
  } else {
    int decimals = 0;
    double s = std::abs(step);
    while (decimals < 6 && s > 0 && std::abs(s - std::round(s)) > 1e-6 * std::max(1.0, s)) {
      s *= 10;
      ++decimals;
    }
    std::snprintf(buf, sizeof buf, "%.*f", decimals, value);
  }
  std::string out(buf);
  // A value that rounds to zero prints without its sign.
  if (out[0] == '-' && out.find_first_not_of("-0.") == std::string::npos) out.erase(0, 1);
  return out;
}

// ---------------------------------------------------------------------------------------

image colorbar(value_range range, colormap cmap, int height, const std::string& label,
               int text_scale) {
  check_range(range, "posenc_plot::colorbar");
  const int s = std::max(1, text_scale);
  const int top = text_height(s) / 2 + pad;
  image img(pad + colorbar_width(range, height, label, s) + pad, top + height + top);
  draw_colorbar(img, pad, top, height, range, cmap, label, s);
  return img;
}

image heatmap(const Eigen::Ref<const matrix>& values, const heatmap_options& o) {
  const Eigen::Index rows = values.rows(), cols = values.cols();
  if (rows == 0 || cols == 0)
    throw std::invalid_argument("posenc_plot::heatmap: matrix is " + std::to_string(rows) + " x " +
                                std::to_string(cols) + "; it needs at least one value");
  if (!o.x_tick_labels.empty() && static_cast<Eigen::Index>(o.x_tick_labels.size()) != cols)
    throw std::invalid_argument("posenc_plot::heatmap: " + std::to_string(o.x_tick_labels.size()) +
                                " x tick labels for " + std::to_string(cols) + " columns");
  if (!o.y_tick_labels.empty() && static_cast<Eigen::Index>(o.y_tick_labels.size()) != rows)
    throw std::invalid_argument("posenc_plot::heatmap: " + std::to_string(o.y_tick_labels.size()) +
                                " y tick labels for " + std::to_string(rows) + " rows");
  if (o.width < 1 || o.height < 1)
    throw std::invalid_argument("posenc_plot::heatmap: plot size must be positive");
  const value_range range = o.range ? *o.range : auto_range(values, o.cmap);
  check_range(range, "posenc_plot::heatmap");

  const heatmap_layout L = layout_heatmap(rows, cols, o, range);
  const int s = std::max(1, o.text_scale);
  const int th = text_height(s), cap = font::cap_height * s;
  image img(L.width, L.height);

  if (!o.title.empty()) {
    // Centred over the plot area, kept inside the picture.
    const int half = bold_width(o.title, s) / 2;
    const int cx =
        std::clamp(L.area_x + L.area_w / 2, half + pad, std::max(half + pad, L.width - half - pad));
    draw_bold(img, cx, pad, o.title, s, colors::text, align::center);
  }

  // Cells: each pixel column/row samples the cell under its centre.
  for (int py = 0; py < L.area_h; ++py) {
    const Eigen::Index r =
        std::min<Eigen::Index>(rows - 1, static_cast<Eigen::Index>(py) * rows / L.area_h);
    for (int px = 0; px < L.area_w; ++px) {
      const Eigen::Index c =
          std::min<Eigen::Index>(cols - 1, static_cast<Eigen::Index>(px) * cols / L.area_w);
      const double v = values(r, c);
      const rgb col = std::isnan(v) ? colors::missing : map_color(o.cmap, to_unit(range, v));
      img.set(L.area_x + px, L.area_y + py, col);
    }
  }
  img.outline_rect(L.area_x - 1, L.area_y - 1, L.area_w + 2, L.area_h + 2, colors::axis);

  if (o.annotate) {
    const double cw = static_cast<double>(L.area_w) / static_cast<double>(cols);
    const double ch = static_cast<double>(L.area_h) / static_cast<double>(rows);
    for (Eigen::Index r = 0; r < rows; ++r)
      for (Eigen::Index c = 0; c < cols; ++c) {
        const double v = values(r, c);
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.*f", o.annotate_decimals, v);
        int ts = s;
        while (ts > 1 && (text_width(buf, ts) > cw - 4 || text_height(ts) > ch - 2)) --ts;
        if (text_width(buf, ts) > cw - 2 || font::cap_height * ts > ch - 2) continue;
        const rgb bg = std::isnan(v) ? colors::missing : map_color(o.cmap, to_unit(range, v));
        const int x = L.area_x + static_cast<int>(std::lround((static_cast<double>(c) + 0.5) * cw));
        const int y = L.area_y +
                      static_cast<int>(std::lround((static_cast<double>(r) + 0.5) * ch)) -
                      font::cap_height * ts / 2;
        draw_text(img, x, y, buf, ts, luminance(bg) < 0.5 ? colors::white : colors::black,
                  align::center);
      }
  }

  // x ticks below the area, y ticks to its left.
  const double cw = static_cast<double>(L.area_w) / static_cast<double>(cols);
  const double ch = static_cast<double>(L.area_h) / static_cast<double>(rows);
  const int x_axis_y = L.area_y + L.area_h + 1;
  for (std::size_t i = 0; i < L.xt.at.size(); ++i) {
    const int x = L.area_x + static_cast<int>(std::lround(L.xt.at[i] * cw - 0.5));
    img.fill_rect(x, x_axis_y, 1, tick_len, colors::axis);
    if (L.x_vertical)
      draw_text(img, x - cap / 2, x_axis_y + tick_len + tick_gap, L.xt.labels[i], s, colors::text,
                align::right, true);
    else
      draw_text(img, x, x_axis_y + tick_len + tick_gap, L.xt.labels[i], s, colors::text,
                align::center);
  }
  for (std::size_t i = 0; i < L.yt.at.size(); ++i) {
    const int y = L.area_y + static_cast<int>(std::lround(L.yt.at[i] * ch - 0.5));
    img.fill_rect(L.area_x - 1 - tick_len, y, tick_len, 1, colors::axis);
    draw_text(img, L.area_x - 1 - tick_len - tick_gap, y - cap / 2, L.yt.labels[i], s, colors::text,
              align::right);
  }
  const int x_tick_h = L.x_vertical ? L.xt.max_width : th;
  if (!o.x_label.empty())
    draw_text(img, L.area_x + L.area_w / 2, x_axis_y + tick_len + tick_gap + x_tick_h + pad,
              o.x_label, s, colors::text, align::center);
  if (!o.y_label.empty())
    draw_text(img, pad, L.area_y + L.area_h / 2, o.y_label, s, colors::text, align::center, true);

  if (o.colorbar)
    draw_colorbar(img, L.area_x + L.area_w + 2 * pad, L.area_y, L.area_h, range, o.cmap,
                  o.value_label, s);
  return img;
}

image heatmap_grid(const std::vector<panel>& panels, int columns, scale sc,
                   const std::string& title, const std::string& value_label) {
  if (panels.empty()) throw std::invalid_argument("posenc_plot::heatmap_grid: no panels");
  if (columns < 1)
    throw std::invalid_argument("posenc_plot::heatmap_grid: columns = " + std::to_string(columns) +
                                ": must be >= 1");
  std::vector<image> images;
  if (sc == scale::separate) {
    for (const auto& p : panels) images.push_back(heatmap(p.values, p.options));
    return compose(images, columns, title, panels.front().options.text_scale);
  }
  const colormap cmap = panels.front().options.cmap;
  value_range range;
  if (panels.front().options.range) {
    range = *panels.front().options.range;
  } else {
    range = auto_range(panels.front().values, cmap);
    for (const auto& p : panels) {
      const value_range r = auto_range(p.values, cmap);
      range.lo = std::min(range.lo, r.lo);
      range.hi = std::max(range.hi, r.hi);
    }
  }
  heatmap_layout first;
  for (std::size_t i = 0; i < panels.size(); ++i) {
    heatmap_options o = panels[i].options;
    o.cmap = cmap;
    o.range = range;
    o.colorbar = false;
    if (i == 0) first = layout_heatmap(panels[i].values.rows(), panels[i].values.cols(), o, range);
    images.push_back(heatmap(panels[i].values, o));
  }
  const int s = std::max(1, panels.front().options.text_scale);
  const image grid = compose(images, columns, title, s);
  // The bar spans the first panel's plot area, at the right of the whole grid.
  const int title_h = title.empty() ? 0 : text_height(s) + 2 * pad;
  int cell_h = 0;
  for (const auto& im : images) cell_h = std::max(cell_h, im.height());
  const int bar_y = title_h + (cell_h - images.front().height()) / 2 + first.area_y;
  const int extra = pad + colorbar_width(range, first.area_h, value_label, s) + 2 * pad;
  image out(grid.width() + extra, grid.height());
  out.blit(grid, 0, 0);
  draw_colorbar(out, grid.width() + pad, bar_y, first.area_h, range, cmap, value_label, s);
  return out;
}

// ---------------------------------------------------------------------------------------

image line_plot(const std::vector<series>& curves, const line_options& o) {
  const int s = std::max(1, o.text_scale);
  const int th = text_height(s), cap = font::cap_height * s;
  if (o.width < 1 || o.height < 1)
    throw std::invalid_argument("posenc_plot::line_plot: plot size must be positive");
  double xlo = std::numeric_limits<double>::infinity(), xhi = -xlo, ylo = xlo, yhi = -xlo;
  for (const auto& c : curves) {
    if (c.xs.size() != c.ys.size())
      throw std::invalid_argument("posenc_plot::line_plot: series '" + c.name + "' has " +
                                  std::to_string(c.xs.size()) + " xs and " +
                                  std::to_string(c.ys.size()) + " ys");
    for (std::size_t i = 0; i < c.xs.size(); ++i) {
      if (!std::isfinite(c.xs[i]) || !std::isfinite(c.ys[i])) continue;
      xlo = std::min(xlo, c.xs[i]);
      xhi = std::max(xhi, c.xs[i]);
      ylo = std::min(ylo, c.ys[i]);
      yhi = std::max(yhi, c.ys[i]);
    }
  }
  if (!(xlo <= xhi)) throw std::invalid_argument("posenc_plot::line_plot: no finite point to draw");
  auto widen = [](double& lo, double& hi, double frac) {
    if (hi == lo) {
      const double d = lo == 0 ? 1.0 : 0.5 * std::abs(lo);
      lo -= d;
      hi += d;
    } else {
      const double m = (hi - lo) * frac;
      lo -= m;
      hi += m;
    }
  };
  widen(xlo, xhi, 0.02);
  widen(ylo, yhi, 0.05);
  if (o.x_min) xlo = *o.x_min;
  if (o.x_max) xhi = *o.x_max;
  if (o.y_min) ylo = *o.y_min;
  if (o.y_max) yhi = *o.y_max;
  check_range({xlo, xhi}, "posenc_plot::line_plot (x)");
  check_range({ylo, yhi}, "posenc_plot::line_plot (y)");

  const std::vector<double> xt = nice_ticks(xlo, xhi, std::clamp(o.width / 90, 2, 10));
  const std::vector<double> yt = nice_ticks(ylo, yhi, std::clamp(o.height / 50, 2, 10));
  const double xstep = xt.size() > 1 ? xt[1] - xt[0] : xhi - xlo;
  const double ystep = yt.size() > 1 ? yt[1] - yt[0] : yhi - ylo;
  std::vector<std::string> xl, yl;
  int yl_w = 0, xl_w = 0;
  for (double v : xt) {
    xl.push_back(format_tick(v, xstep));
    xl_w = std::max(xl_w, text_width(xl.back(), s));
  }
  for (double v : yt) {
    yl.push_back(format_tick(v, ystep));
    yl_w = std::max(yl_w, text_width(yl.back(), s));
  }

  // Legend: swatch, then the name.
  const int swatch = 30;
  int legend_w = 0, legend_n = 0;
  for (const auto& c : curves)
    if (!c.name.empty()) {
      legend_w = std::max(legend_w, text_width(c.name, s));
      ++legend_n;
    }
  const bool legend = o.legend && legend_n > 0;
  const int row_h = th + 6;
  const int legend_box_w = legend ? pad + swatch + pad + legend_w + pad : 0;
  const int legend_box_h = legend ? legend_n * row_h + pad : 0;

  const int title_h = o.title.empty() ? pad + cap / 2 : th + 2 * pad;
  const int left = pad + (o.y_label.empty() ? 0 : th + pad) + yl_w + tick_len + tick_gap;
  const int bottom = tick_len + tick_gap + th + (o.x_label.empty() ? 0 : pad + th) + pad;
  const int right = legend ? 2 * pad + legend_box_w + pad : std::max(pad, xl_w / 2 + pad);
  const int ax = left, ay = title_h, aw = o.width, ah = o.height;
  const int width = std::max(left + aw + right, bold_width(o.title, s) + 2 * pad);
  const int height = std::max(title_h + ah + bottom, title_h + legend_box_h + pad);
  image img(width, height);

  auto X = [&](double x) { return ax + (x - xlo) / (xhi - xlo) * aw; };
  auto Y = [&](double y) { return ay + ah - (y - ylo) / (yhi - ylo) * ah; };

  if (!o.title.empty()) draw_bold(img, width / 2, pad, o.title, s, colors::text, align::center);
  for (std::size_t i = 0; i < xt.size(); ++i) {
    const int x = static_cast<int>(std::lround(X(xt[i])));
    if (o.grid) img.fill_rect(x, ay, 1, ah, colors::grid);
    img.fill_rect(x, ay + ah, 1, tick_len, colors::axis);
    draw_text(img, x, ay + ah + tick_len + tick_gap, xl[i], s, colors::text, align::center);
  }
  for (std::size_t i = 0; i < yt.size(); ++i) {
    const int y = static_cast<int>(std::lround(Y(yt[i])));
    if (o.grid) img.fill_rect(ax, y, aw, 1, colors::grid);
    img.fill_rect(ax - 1 - tick_len, y, tick_len, 1, colors::axis);
    draw_text(img, ax - 1 - tick_len - tick_gap, y - cap / 2, yl[i], s, colors::text, align::right);
  }
  if (!o.x_label.empty())
    draw_text(img, ax + aw / 2, ay + ah + tick_len + tick_gap + th + pad, o.x_label, s,
              colors::text, align::center);
  if (!o.y_label.empty())
    draw_text(img, pad, ay + ah / 2, o.y_label, s, colors::text, align::center, true);

  img.set_clip(ax, ay, aw, ah);
  for (std::size_t k = 0; k < curves.size(); ++k) {
    const series& c = curves[k];
    const rgb col = c.color ? *c.color : series_color(k);
    double phase = 0;
    for (std::size_t i = 0; i + 1 < c.xs.size(); ++i) {
      const bool ok = std::isfinite(c.xs[i]) && std::isfinite(c.ys[i]) &&
                      std::isfinite(c.xs[i + 1]) && std::isfinite(c.ys[i + 1]);
      if (!ok || !(c.line_width > 0)) continue;
      if (c.dash > 0)
        dashed(img, X(c.xs[i]), Y(c.ys[i]), X(c.xs[i + 1]), Y(c.ys[i + 1]), c.line_width, col,
               c.dash, phase);
      else
        stroke(img, X(c.xs[i]), Y(c.ys[i]), X(c.xs[i + 1]), Y(c.ys[i + 1]), c.line_width, col);
    }
    if (c.mark != marker::none)
      for (std::size_t i = 0; i < c.xs.size(); ++i)
        if (std::isfinite(c.xs[i]) && std::isfinite(c.ys[i]))
          draw_marker(img, c.mark, X(c.xs[i]), Y(c.ys[i]), c.marker_size, col);
  }
  img.reset_clip();
  img.outline_rect(ax - 1, ay - 1, aw + 2, ah + 2, colors::axis);

  if (legend) {
    const int lx = ax + aw + 2 * pad, ly = ay;
    img.outline_rect(lx, ly, legend_box_w, legend_box_h, colors::grid);
    int row = 0;
    for (std::size_t k = 0; k < curves.size(); ++k) {
      const series& c = curves[k];
      if (c.name.empty()) continue;
      const rgb col = c.color ? *c.color : series_color(k);
      const int y = ly + pad / 2 + row * row_h + 3;
      const double mid = y + cap / 2.0;
      if (c.line_width > 0)
        draw_line(img, lx + pad, mid, lx + pad + swatch, mid, c.line_width, col, c.dash / 2);
      if (c.mark != marker::none)
        draw_marker(img, c.mark, lx + pad + swatch / 2.0, mid, c.marker_size, col);
      draw_text(img, lx + pad + swatch + pad, y, c.name, s, colors::text);
      ++row;
    }
  }
  return img;
}

image compose(const std::vector<image>& images, int columns, const std::string& title,
              int text_scale) {
  if (images.empty()) throw std::invalid_argument("posenc_plot::compose: no images");
  if (columns < 1)
    throw std::invalid_argument("posenc_plot::compose: columns = " + std::to_string(columns) +
                                ": must be >= 1");
  const int s = std::max(1, text_scale);
  int cw = 0, ch = 0;
  for (const auto& im : images) {
    cw = std::max(cw, im.width());
    ch = std::max(ch, im.height());
  }
  const int n = static_cast<int>(images.size());
  const int cols = std::min(columns, n);
  const int rows = (n + cols - 1) / cols;
  const int title_h = title.empty() ? 0 : text_height(s) + 2 * pad;
  const int width = std::max(cols * cw, bold_width(title, s) + 2 * pad);
  image out(width, title_h + rows * ch);
  if (!title.empty()) draw_bold(out, width / 2, pad, title, s, colors::text, align::center);
  for (int i = 0; i < n; ++i) {
    const image& im = images[static_cast<std::size_t>(i)];
    const int x = (i % cols) * cw + (cw - im.width()) / 2;
    const int y = title_h + (i / cols) * ch + (ch - im.height()) / 2;
    out.blit(im, x, y);
  }
  return out;
}

}  // namespace posenc_plot
