#include "png.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

// The only translation unit that compiles stb_image_write's implementation (and stb_image's
// PNG decoder, for read_png).
#define STB_IMAGE_WRITE_IMPLEMENTATION
#include <stb_image_write.h>
#define STB_IMAGE_IMPLEMENTATION
#define STBI_ONLY_PNG
#define STBI_NO_HDR
#define STBI_NO_LINEAR
#include <stb_image.h>

namespace posenc_plot {

image::image(int width, int height, rgb fill) {
  if (width < 0 || height < 0)
    throw std::invalid_argument("posenc_plot::image: size " + std::to_string(width) + " x " +
                                std::to_string(height) + " must not be negative");
  width_ = width;
  height_ = height;
  pixels_.resize(static_cast<std::size_t>(width) * static_cast<std::size_t>(height) * 3);
  for (std::size_t i = 0; i < pixels_.size(); i += 3) {
    pixels_[i] = fill.r;
    pixels_[i + 1] = fill.g;
    pixels_[i + 2] = fill.b;
  }
  reset_clip();
}

rgb image::at(int x, int y) const {
  if (x < 0 || y < 0 || x >= width_ || y >= height_)
    throw std::out_of_range("posenc_plot::image::at: (" + std::to_string(x) + ", " +
                            std::to_string(y) + ") is outside " + std::to_string(width_) + " x " +
                            std::to_string(height_));
  const std::size_t i = (static_cast<std::size_t>(y) * static_cast<std::size_t>(width_) +
                         static_cast<std::size_t>(x)) *
                        3;
  return {pixels_[i], pixels_[i + 1], pixels_[i + 2]};
}

void image::set(int x, int y, rgb c) noexcept {
  if (!writable(x, y)) return;
  const std::size_t i = (static_cast<std::size_t>(y) * static_cast<std::size_t>(width_) +
                         static_cast<std::size_t>(x)) *
                        3;
  pixels_[i] = c.r;
  pixels_[i + 1] = c.g;
  pixels_[i + 2] = c.b;
}

void image::blend(int x, int y, rgb c, double alpha) noexcept {
  if (!writable(x, y) || !(alpha > 0)) return;
  alpha = std::min(alpha, 1.0);
  const std::size_t i = (static_cast<std::size_t>(y) * static_cast<std::size_t>(width_) +
                         static_cast<std::size_t>(x)) *
                        3;
  auto mix = [alpha](std::uint8_t under, std::uint8_t over) {
    return static_cast<std::uint8_t>(std::lround(under + alpha * (over - under)));
  };
  pixels_[i] = mix(pixels_[i], c.r);
  pixels_[i + 1] = mix(pixels_[i + 1], c.g);
  pixels_[i + 2] = mix(pixels_[i + 2], c.b);
}

void image::fill_rect(int x, int y, int w, int h, rgb c) noexcept {
  const int x0 = std::max(x, clip_x0_), x1 = std::min(x + w, clip_x1_);
  const int y0 = std::max(y, clip_y0_), y1 = std::min(y + h, clip_y1_);
  for (int yy = y0; yy < y1; ++yy)
    for (int xx = x0; xx < x1; ++xx) set(xx, yy, c);
}

void image::outline_rect(int x, int y, int w, int h, rgb c) noexcept {
  if (w <= 0 || h <= 0) return;
  fill_rect(x, y, w, 1, c);
  fill_rect(x, y + h - 1, w, 1, c);
  fill_rect(x, y, 1, h, c);
  fill_rect(x + w - 1, y, 1, h, c);
}

void image::blit(const image& src, int x, int y) noexcept {
  for (int yy = 0; yy < src.height_; ++yy)
    for (int xx = 0; xx < src.width_; ++xx) {
      const std::size_t i = (static_cast<std::size_t>(yy) * static_cast<std::size_t>(src.width_) +
                             static_cast<std::size_t>(xx)) *
                            3;
      set(x + xx, y + yy, {src.pixels_[i], src.pixels_[i + 1], src.pixels_[i + 2]});
    }
}

void image::set_clip(int x, int y, int w, int h) noexcept {
  clip_x0_ = std::clamp(x, 0, width_);
  clip_y0_ = std::clamp(y, 0, height_);
  clip_x1_ = std::clamp(x + std::max(w, 0), clip_x0_, width_);
  clip_y1_ = std::clamp(y + std::max(h, 0), clip_y0_, height_);
}

void image::reset_clip() noexcept {
  clip_x0_ = clip_y0_ = 0;
  clip_x1_ = width_;
  clip_y1_ = height_;
}

void write_png(const image& img, const std::filesystem::path& path) {
  if (img.empty()) throw std::runtime_error("write_png: " + path.string() + ": the image is empty");
  const int ok = stbi_write_png(path.string().c_str(), img.width(), img.height(), 3, img.data(),
                                img.width() * 3);
  if (!ok) throw std::runtime_error("write_png: cannot write " + path.string());
}

image read_png(const std::filesystem::path& path) {
  int w = 0, h = 0, channels = 0;
  stbi_uc* px = stbi_load(path.string().c_str(), &w, &h, &channels, 3);
  if (!px) {
    const char* why = stbi_failure_reason();
    throw std::runtime_error("read_png: cannot read " + path.string() + ": " +
                             (why ? why : "unknown error"));
  }
  image img(w, h);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      const std::size_t i = (static_cast<std::size_t>(y) * static_cast<std::size_t>(w) +
                             static_cast<std::size_t>(x)) *
                            3;
      img.set(x, y, {px[i], px[i + 1], px[i + 2]});
    }
  stbi_image_free(px);
  return img;
}

}  // namespace posenc_plot
