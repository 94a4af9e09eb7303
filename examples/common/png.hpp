#pragma once
// The tour's picture type: an 8-bit RGB raster, and writing (and reading back) PNG files.

#include <cstdint>
#include <filesystem>
#include <vector>

namespace posenc_plot {

/// An sRGB colour, 8 bits per channel.
struct rgb {
  std::uint8_t r = 0;  ///< red
  std::uint8_t g = 0;  ///< green
  std::uint8_t b = 0;  ///< blue
  friend bool operator==(rgb a, rgb b) { return a.r == b.r && a.g == b.g && a.b == b.b; }
  friend bool operator!=(rgb a, rgb b) { return !(a == b); }
};

/// A width x height RGB raster, rows top to bottom, 3 bytes per pixel.
/// Writes outside the image (or outside the clip rectangle) are ignored, so drawing code
/// never has to bounds-check; reads outside it are an error (std::out_of_range).
class image {
 public:
  /// A 0 x 0 image.
  image() = default;
  /// A width x height image filled with `fill`. Throws std::invalid_argument for a negative size.
  image(int width, int height, rgb fill = {255, 255, 255});

  int width() const noexcept { return width_; }    ///< pixels per row
  int height() const noexcept { return height_; }  ///< rows
  /// True for a 0 x 0 (or 0-wide / 0-high) image, which write_png refuses.
  bool empty() const noexcept { return width_ == 0 || height_ == 0; }
  /// The pixels, row-major RGB (what a PNG encoder takes).
  const std::uint8_t* data() const noexcept { return pixels_.data(); }

  /// The colour at (x, y); throws std::out_of_range outside the image.
  rgb at(int x, int y) const;
  /// Sets (x, y) when it lies inside the image and the clip rectangle.
  void set(int x, int y, rgb c) noexcept;
  /// Mixes `c` over the pixel with opacity alpha in [0, 1] (anti-aliased drawing).
  void blend(int x, int y, rgb c, double alpha) noexcept;
  /// Fills the rectangle [x, x + w) x [y, y + h), clipped.
  void fill_rect(int x, int y, int w, int h, rgb c) noexcept;
  /// A one-pixel outline of the rectangle [x, x + w) x [y, y + h).
  void outline_rect(int x, int y, int w, int h, rgb c) noexcept;
  /// Copies `src` with its top-left corner at (x, y), clipped.
  void blit(const image& src, int x, int y) noexcept;

  /// Restricts later writes to [x, x + w) x [y, y + h) until reset_clip().
  void set_clip(int x, int y, int w, int h) noexcept;
  /// Makes the whole image writable again.
  void reset_clip() noexcept;

 private:
  bool writable(int x, int y) const noexcept {
    return x >= clip_x0_ && x < clip_x1_ && y >= clip_y0_ && y < clip_y1_;
  }
  int width_ = 0, height_ = 0;
  int clip_x0_ = 0, clip_y0_ = 0, clip_x1_ = 0, clip_y1_ = 0;
  std::vector<std::uint8_t> pixels_;
};

/// Writes `img` as an 8-bit RGB PNG. Throws std::runtime_error when the image is empty
/// or the file cannot be written.
void write_png(const image& img, const std::filesystem::path& path);

/// Reads a PNG file (any bit depth or colour type) as 8-bit RGB; for checks and tests.
/// Throws std::runtime_error when the file is missing or not a valid PNG.
image read_png(const std::filesystem::path& path);

}  // namespace posenc_plot
