#pragma once
// A small plotting library for the tour's pictures: colour maps, heatmaps with a colour
// bar and axis ticks, line plots with a legend, and panels side by side. Pictures are
// posenc_plot::image rasters (png.hpp); write them with write_png.
//
//     posenc_plot::heatmap_options o;
//     o.title = "Sinusoidal encoding";  o.x_label = "dimension";  o.y_label = "position";
//     o.cmap = posenc_plot::colormap::diverging;
//     posenc_plot::write_png(posenc_plot::heatmap(table, o), dir / "heatmap.png");
//
// Matrices are drawn like a table: row 0 at the top, column 0 at the left.
// Text uses the hand-drawn bitmap font in font.hpp (printable ASCII).

#include <Eigen/Core>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "png.hpp"

namespace posenc_plot {

/// The matrix type the plots take (row-major, double). Any Eigen expression converts to
/// `Eigen::Ref<const matrix>`, e.g. `table.cast<double>()`.
using matrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

/// The fixed colours of every picture.
namespace colors {
inline constexpr rgb white{255, 255, 255};    ///< background
inline constexpr rgb black{0, 0, 0};          ///< annotations on light cells
inline constexpr rgb text{30, 30, 30};        ///< titles, labels, tick labels
inline constexpr rgb axis{70, 70, 70};        ///< frames and tick marks
inline constexpr rgb grid{225, 225, 225};     ///< grid lines, legend frame
inline constexpr rgb missing{200, 200, 200};  ///< NaN cells
}  // namespace colors

/// The default colour of series i in a line plot (a colour-blind-friendly cycle of 8).
rgb series_color(std::size_t i) noexcept;

// ---------------------------------------------------------------------------------------
// Colour maps

/// viridis: perceptually uniform dark purple -> blue -> green -> yellow, for magnitudes.
/// diverging: blue -> white -> red, for signed data (white at the middle of the range).
/// blues: white -> dark blue, for probabilities such as attention weights.
enum class colormap { viridis, diverging, blues };

/// The colour of `t` in [0, 1] (clamped); NaN maps to colors::missing.
rgb map_color(colormap cmap, double t) noexcept;

/// A closed value interval [lo, hi] mapped onto a colour map.
struct value_range {
  double lo = 0;  ///< maps to the first colour of the map
  double hi = 1;  ///< maps to the last
};

/// The range of the finite values of `m`: [min, max], or [-a, a] with a = max |v| for the
/// diverging map (so zero is white). A constant matrix gets a unit-wide range around its
/// value. Throws std::invalid_argument when `m` has no finite value.
value_range auto_range(const Eigen::Ref<const matrix>& m, colormap cmap);

// ---------------------------------------------------------------------------------------
// Text and shapes

/// Horizontal alignment of text relative to its anchor point.
enum class align { left, center, right };

/// Width in pixels of `s` drawn at integer `scale` (each font pixel becomes scale x scale).
int text_width(std::string_view s, int scale) noexcept;
/// Height in pixels of a line of text at `scale`, descenders included.
int text_height(int scale) noexcept;
/// Draws `s` with its top edge at y; `h` aligns it on x. With `vertical` the text runs
/// bottom to top (a y-axis label) and (x, y) is its left edge and vertical position,
/// `h` aligning it along the vertical direction around y.
void draw_text(image& img, int x, int y, std::string_view s, int scale, rgb c,
               align h = align::left, bool vertical = false);
/// An anti-aliased line segment of the given width (in pixels); `dash` > 0 draws it
/// dashed, with dashes and gaps of that length.
void draw_line(image& img, double x0, double y0, double x1, double y1, double width, rgb c,
               double dash = 0);
/// An anti-aliased filled disc.
void draw_disc(image& img, double cx, double cy, double radius, rgb c);

/// Round tick positions (steps of 1, 2, 2.5 or 5 times a power of ten) inside [lo, hi],
/// at most `max_ticks` of them. With `integer_steps` the step is a whole number (index axes).
std::vector<double> nice_ticks(double lo, double hi, int max_ticks, bool integer_steps = false);
/// A tick label: as many decimals as the tick step needs, no "-0".
std::string format_tick(double value, double step);

// ---------------------------------------------------------------------------------------
// Heatmaps

/// Everything a heatmap can show; defaults give an untitled viridis map with a colour bar.
struct heatmap_options {
  std::string title;        ///< bold, above the plot
  std::string x_label;      ///< below the x axis (columns)
  std::string y_label;      ///< left of the y axis (rows)
  std::string value_label;  ///< beside the colour bar
  colormap cmap = colormap::viridis;
  std::optional<value_range> range;  ///< default: auto_range(values, cmap)
  /// Index of the first column / row, for numeric ticks (e.g. positions starting at 500).
  double x_start = 0, y_start = 0;
  /// Categorical tick labels, one per column / row (e.g. tokens); replace numeric ticks.
  std::vector<std::string> x_tick_labels, y_tick_labels;
  /// Prints each value in its cell (for small matrices such as 6 x 6 attention weights).
  bool annotate = false;
  int annotate_decimals = 2;
  bool colorbar = true;
  /// The plot area's target size in pixels; cells are whole pixels where they fit.
  int width = 512, height = 400;
  int text_scale = 2;  ///< font scale of ticks and labels (the title is drawn bold)
};

/// A heatmap of `values` ([rows, cols], row 0 at the top) with title, axis labels, ticks
/// and a colour bar. NaN cells are grey. Throws std::invalid_argument for an empty matrix,
/// an empty or non-finite range, or a tick-label list whose size does not match.
image heatmap(const Eigen::Ref<const matrix>& values, const heatmap_options& options = {});

/// A standalone vertical colour bar of plot height `height`, with ticks and a caption.
image colorbar(value_range range, colormap cmap, int height, const std::string& label = "",
               int text_scale = 2);

/// One heatmap of a grid.
struct panel {
  matrix values;
  heatmap_options options;  ///< title, labels, ticks; range and colour bar set by the grid
};

/// How the panels of a grid map values to colours.
enum class scale {
  shared,   ///< one range over all panels, one colour bar at the right
  separate  ///< each panel its own range and colour bar
};

/// Heatmaps side by side, `columns` per row, under an optional overall title. With
/// scale::shared, every panel uses the union of their ranges (or the first panel's
/// explicit range when it has one) and the colour map of the first panel.
image heatmap_grid(const std::vector<panel>& panels, int columns, scale s,
                   const std::string& title = "", const std::string& value_label = "");

// ---------------------------------------------------------------------------------------
// Line plots

/// The symbol drawn at each point of a series.
enum class marker { none, circle, square };

/// One curve: points (xs[i], ys[i]) joined in order; a NaN in ys breaks the line.
struct series {
  std::string name;  ///< legend entry (empty: not listed)
  std::vector<double> xs, ys;
  std::optional<rgb> color;  ///< default: series_color(index)
  double line_width = 2.0;   ///< 0: markers only
  double dash = 0;           ///< > 0: dashed, dash length in pixels
  marker mark = marker::none;
  double marker_size = 3.5;  ///< radius in pixels
};

/// Axes, labels and size of a line plot.
struct line_options {
  std::string title;                                 ///< bold, above the plot
  std::string x_label;                               ///< below the x axis
  std::string y_label;                               ///< left of the y axis, reading upwards
  std::optional<double> x_min, x_max, y_min, y_max;  ///< default: the data, plus a margin
  bool legend = true;                                ///< drawn to the right of the plot area
  bool grid = true;
  int width = 600, height = 380;  ///< the plot area in pixels
  int text_scale = 2;             ///< font scale of ticks and labels
};

/// Curves on shared axes with ticks, grid and a legend. Throws std::invalid_argument when
/// a series has xs and ys of different sizes, or there is no finite point to draw.
image line_plot(const std::vector<series>& curves, const line_options& options = {});

// ---------------------------------------------------------------------------------------
// Composition

/// Pictures on a grid, `columns` per row, each centred in a cell as large as the largest,
/// under an optional title. Throws std::invalid_argument for no images or columns < 1.
image compose(const std::vector<image>& images, int columns, const std::string& title = "",
              int text_scale = 2);

}  // namespace posenc_plot
