// The tour's rotary section:
//   1. the RoPE relative property: <R(m) q, R(n) k> against the offset m - n, computed from
//      several start positions with posenc's rotation: one curve, whatever the start;
//   2. the effective frequency spectrum of every long-context scaling (rope_config), as
//      log10 inv_freq and as the ratio to unscaled RoPE, with each attention factor.

#include <algorithm>
#include <cmath>
#include <posenc/core/random.hpp>
#include <posenc/encoding/rotary.hpp>
#include <string>
#include <utility>
#include <vector>

#include "tour.hpp"

namespace tour {
namespace {

namespace plot = posenc_plot;
using posenc::Index;
using dmatrix = plot::matrix;

void relative_property(tour_context& ctx) {
  // One Llama-2 head: D = 128, base 1e4, half pairing; a random query and key.
  const Index d = 128, kmax = 200;
  posenc::random_generator gen(31);
  dmatrix q(1, d), k(1, d);
  for (Index i = 0; i < d; ++i) {
    q(0, i) = gen.normal();
    k(0, i) = gen.normal();
  }
  posenc::rotary_embedding<double> rope(d);
  const Index starts[] = {0, 100, 1000, 100000};
  const double width[] = {7, 4, 2.5, 0};
  const double dash[] = {0, 10, 4, 0};
  const plot::marker mark[] = {plot::marker::none, plot::marker::none, plot::marker::none,
                               plot::marker::circle};
  std::vector<plot::series> curves;
  std::vector<double> first;
  double spread = 0;
  for (std::size_t s = 0; s < 4; ++s) {
    // keys at n = start, queries at m = start + offset: all offsets in one apply call
    dmatrix qs = q.replicate(kmax + 1, 1);
    rope.apply(qs, starts[s]);
    const dmatrix ks = rope.rotated(k, starts[s], posenc::rope_role::key);
    plot::series c;
    c.name = format("key at n = %lld", static_cast<long long>(starts[s]));
    for (Index off = 0; off <= kmax; ++off) {
      const double dot = qs.row(off).dot(ks.row(0));
      c.xs.push_back(double(off));
      c.ys.push_back(dot);
      if (s == 0)
        first.push_back(dot);
      else
        spread = std::max(spread, std::abs(dot - first[static_cast<std::size_t>(off)]));
    }
    c.line_width = width[s];
    c.dash = dash[s];
    c.mark = mark[s];
    c.marker_size = 2.0;
    curves.push_back(std::move(c));
  }
  const double q_dot_k = q.row(0).dot(k.row(0));
  ctx.check(std::abs(first[0] - q_dot_k) <= 1e-12, "at offset 0 the rotated dot product is q.k");
  ctx.check(spread <= 1e-9,
            format("q.k after RoPE depends only on m - n (max spread over starts %.1e)", spread));
  const auto mm = std::minmax_element(first.begin() + 1, first.end());
  ctx.finding(format(
      "RoPE relative property: q.k = %.3f unrotated; after rotation it depends only on the "
      "offset m - n (curves from keys at n = 0, 100, 1000, 100000 agree to %.1e) and swings "
      "between %.2f and %.2f over offsets 1..%lld",
      q_dot_k, std::max(spread, 1e-16), *mm.first, *mm.second, static_cast<long long>(kmax)));
  plot::line_options lo;
  lo.title = "RoPE: <R(m) q, R(n) k> against m - n, from four starts";
  lo.x_label = "offset m - n";
  lo.y_label = "rotated q . k";
  ctx.save(plot::line_plot(curves, lo), "rope_relative.png",
           "RoPE: the rotated query-key dot product against the offset, from four key positions");
}

void frequency_spectrum(tour_context& ctx) {
  // One head of 128 dims, base 1e4, original context 4096 extended 4x (LongRoPE's lists are
  // illustrative, rising from 1 to 4 with the wavelength, as the searched lists do).
  const Index d = 128, orig = 4096;
  const double factor = 4;
  const Index long_len = 4 * orig;
  auto base_cfg = [&](posenc::rope_scaling_type t) {
    posenc::rope_config c;
    c.head_dim = d;
    c.scaling = t;
    c.factor = factor;
    c.original_max_positions = orig;
    return c;
  };
  struct entry {
    const char* name;
    posenc::rope_config cfg;
    Index seq_len;
  };
  std::vector<entry> entries;
  entries.push_back({"none", base_cfg(posenc::rope_scaling_type::none), 0});
  entries.push_back({"linear", base_cfg(posenc::rope_scaling_type::linear), 0});
  entries.push_back({"ntk", base_cfg(posenc::rope_scaling_type::ntk), 0});
  entries.push_back({"dynamic", base_cfg(posenc::rope_scaling_type::dynamic), long_len});
  entries.push_back({"yarn", base_cfg(posenc::rope_scaling_type::yarn), 0});
  entries.push_back({"llama3", base_cfg(posenc::rope_scaling_type::llama3), 0});
  {
    auto c = base_cfg(posenc::rope_scaling_type::longrope);
    for (Index i = 0; i < d / 2; ++i) {
      const double t = double(i) / double(d / 2 - 1);
      c.short_factor.push_back(1.0 + 0.1 * t);
      c.long_factor.push_back(1.0 + 3.0 * t * t);
    }
    entries.push_back({"longrope", c, long_len});
  }
  entries.push_back({"xpos", base_cfg(posenc::rope_scaling_type::xpos), 0});

  const posenc::rope_frequencies plain = entries[0].cfg.frequencies(0);
  std::vector<plot::series> logs, ratios;
  std::string factors;
  bool positive = true;
  for (std::size_t e = 0; e < entries.size(); ++e) {
    const posenc::rope_frequencies f = entries[e].cfg.frequencies(entries[e].seq_len);
    plot::series a, b;
    a.name = b.name = entries[e].name;
    for (std::size_t i = 0; i < f.inv_freq.size(); ++i) {
      positive = positive && f.inv_freq[i] > 0;
      a.xs.push_back(double(i));
      a.ys.push_back(std::log10(f.inv_freq[i]));
      b.xs.push_back(double(i));
      b.ys.push_back(f.inv_freq[i] / plain.inv_freq[i]);
    }
    // none and xpos share their frequencies: none thick underneath, xpos dashed on top
    if (e == 0) a.line_width = b.line_width = 8;
    if (std::string(entries[e].name) == "xpos") {
      a.dash = b.dash = 10;
      a.line_width = b.line_width = 3;
    }
    logs.push_back(std::move(a));
    ratios.push_back(std::move(b));
    factors += format("%s%s %.4f", e ? ", " : "", entries[e].name, f.attention_factor);
  }
  ctx.check(positive, "every scaling gives positive frequencies");
  const auto lin = entries[1].cfg.frequencies(0);
  ctx.check(std::abs(lin.inv_freq[0] / plain.inv_freq[0] - 1 / factor) <= 1e-15,
            "linear scaling divides every frequency by the factor");
  const auto l3 = entries[5].cfg.frequencies(0);
  ctx.check(l3.inv_freq[0] == plain.inv_freq[0] &&
                std::abs(l3.inv_freq.back() * factor - plain.inv_freq.back()) <= 1e-18,
            "llama3 keeps the fastest pair and divides the slowest by the factor");
  ctx.finding("RoPE scalings (d 128, base 1e4, 4096 -> 16384 positions): attention factors " +
              factors +
              "; linear divides all frequencies by 4, ntk/dynamic bend the slow end, yarn and "
              "llama3 keep the "
              "fast pairs and interpolate the slow ones");
  plot::line_options lo;
  lo.title = "Effective RoPE frequencies";
  lo.x_label = "pair i";
  lo.y_label = "log10 inv_freq";
  lo.width = 460;
  plot::line_options ro = lo;
  ro.title = "Ratio to unscaled RoPE";
  ro.y_label = "inv_freq / plain";
  ro.y_min = 0;
  ro.y_max = 1.1;
  ctx.save(
      plot::compose({plot::line_plot(logs, lo), plot::line_plot(ratios, ro)}, 2,
                    "RoPE scalings: 4096 -> 16384 positions, d = 128"),
      "rope_scaling_spectrum.png",
      "Effective RoPE frequency of each pair for every scaling, and its ratio to unscaled RoPE");
}

}  // namespace

void section_rotary(tour_context& ctx) {
  relative_property(ctx);
  frequency_spectrum(ctx);
}

}  // namespace tour
