// The tour's attention section: one sentence with repeated words, self-attention weights
// with no positions, sinusoidal (added to the inputs), RoPE, ALiBi and T5 side by side.
//   1. without positions the two "the" (and the two "cat") rows attend identically: the
//      kernel cannot tell them apart; every scheme separates them;
//   2. ALiBi and T5 biases are functions of j - i only (Toeplitz), shown as matrices.

#include <cmath>
#include <cstdint>
#include <posenc/attention.hpp>
#include <posenc/core/random.hpp>
#include <posenc/encoding/sinusoidal.hpp>
#include <string>
#include <vector>

#include "tour.hpp"

namespace tour {
namespace {

namespace plot = posenc_plot;
using posenc::Index;
using dmatrix = plot::matrix;

const std::vector<std::string> sentence = {"the", "cat", "sat", "on",  "the",
                                           "mat", "and", "the", "cat", "slept"};

/// One fixed random embedding per word (seeded by the word), so equal words are equal rows.
dmatrix embed(Index d) {
  dmatrix x(static_cast<Index>(sentence.size()), d);
  for (std::size_t t = 0; t < sentence.size(); ++t) {
    std::uint64_t seed = 1469598103934665603ULL;  // FNV-1a of the word
    for (char c : sentence[t]) seed = (seed ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
    posenc::random_generator gen(seed);
    for (Index c = 0; c < d; ++c) x(static_cast<Index>(t), c) = gen.normal();
  }
  return x;
}

/// An illustrative T5 table [32, 1]: keys just before the query favoured, decaying with the
/// bucket's distance; keys after the query mildly penalised.
dmatrix t5_table(const posenc::t5_bucket_config& cfg) {
  dmatrix t = dmatrix::Zero(cfg.num_buckets, 1);
  for (Index rel = -300; rel <= 300; ++rel) {
    const Index b = posenc::t5_bucket(rel, cfg);
    const double n = std::abs(static_cast<double>(rel));
    t(b, 0) = rel <= 0 ? 3.0 * std::exp(-n / 2.0) : -0.5 - 0.1 * n;
  }
  return t;
}

double row_diff(const dmatrix& w, Index a, Index b) {
  return (w.row(a) - w.row(b)).cwiseAbs().maxCoeff();
}

}  // namespace

void section_attention(tour_context& ctx) {
  const Index L = static_cast<Index>(sentence.size()), d = 16;
  const dmatrix x = embed(d);
  posenc::attention_config opt;  // bidirectional, scale 1/sqrt(d)
  struct result {
    std::string name;
    dmatrix w;
  };
  std::vector<result> results;
  auto run = [&](const std::string& name, const dmatrix& q, const auto& policy,
                 const posenc::attention_config& o) {
    dmatrix w;
    posenc::attention_with_weights(q, q, q, w, o, policy);
    results.push_back({name, w});
  };
  run("no positions", x, posenc::no_position_policy{}, opt);
  const posenc::sinusoidal<double> pe(posenc::sinusoidal_config::vaswani(d, 10000.0));
  const dmatrix xs = x + pe.table(L);
  run("sinusoidal (x + PE)", xs, posenc::no_position_policy{}, opt);
  run("RoPE (base 1e4)", x, posenc::rotary_policy(d), opt);
  run("ALiBi (m = 1/2, symmetric)", x,
      posenc::alibi_policy(8, posenc::alibi_form::symmetric).only_head(0), opt);
  const posenc::t5_bucket_config cfg{32, 128, true};
  posenc::attention_config t5opt = opt;
  t5opt.scale =
      1.0 / std::sqrt(static_cast<double>(d));  // our embeddings are unscaled: keep 1/sqrt(d)
  run("T5 (illustrative table)", x, posenc::t5_bias_policy(t5_table(cfg), cfg), t5opt);

  // 1. Repeated words: rows 0, 4, 7 are "the"; rows 1, 8 are "cat".
  const double same = std::max(row_diff(results[0].w, 0, 4), row_diff(results[0].w, 1, 8));
  ctx.finding(
      format("no positions: the rows of the repeated words 'the' (0, 4) and 'cat' (1, 8) "
             "are identical (max |diff| = %.1e)",
             same));
  // Equal up to rounding: with -march flags the compiler may fuse products differently for
  // different rows (FMA contraction), so the rows can differ in the last bit.
  ctx.check(same < 1e-12, "without positions equal tokens attend identically");
  for (std::size_t s = 1; s < results.size(); ++s) {
    const double diff = std::min(row_diff(results[s].w, 0, 4), row_diff(results[s].w, 1, 8));
    ctx.finding(format("%s: the same rows now differ (min over both pairs of max |diff| = %.3f)",
                       results[s].name.c_str(), diff));
    ctx.check(diff > 1e-3, results[s].name + " separates equal tokens at different positions");
  }
  std::vector<plot::panel> panels;
  for (const auto& r : results) {
    plot::panel p;
    p.values = r.w;
    p.options.title = r.name;
    p.options.x_tick_labels = sentence;
    p.options.y_tick_labels = sentence;
    p.options.x_label = "key";
    p.options.y_label = "query";
    p.options.cmap = plot::colormap::blues;
    p.options.range = plot::value_range{0.0, 1.0};
    p.options.width = 360;
    p.options.height = 360;
    panels.push_back(std::move(p));
  }
  ctx.save(
      plot::heatmap_grid(panels, 3, plot::scale::shared,
                         "Self-attention weights for the same sentence, by position scheme",
                         "weight"),
      "attention_schemes.png",
      "attention weights of one sentence: no positions, sinusoidal, RoPE, ALiBi, T5 side by side");

  // 2. The biases themselves: ALiBi (4 of 8 heads, symmetric form) and T5 buckets, all Toeplitz.
  const Index n = 24;
  std::vector<plot::panel> biases;
  double toeplitz = 0;
  for (Index h : {0, 2, 5, 7}) {
    plot::panel p;
    posenc::attention_shape s;
    s.heads = 8;
    s.len_q = n;
    s.len_k = n;
    s.dim = 1;
    p.values =
        posenc::materialize_bias(posenc::alibi_policy(8, posenc::alibi_form::symmetric), 0, h, s);
    for (Index i = 1; i < n; ++i)
      toeplitz = std::max(
          toeplitz, (p.values.block(i, 1, n - i, n - i) - p.values.block(i - 1, 0, n - i, n - i))
                        .cwiseAbs()
                        .maxCoeff());
    p.options.title = format("ALiBi head %lld (m = %.3g)", static_cast<long long>(h),
                             posenc::alibi_slopes(8)[static_cast<std::size_t>(h)]);
    p.options.x_label = "key j";
    p.options.y_label = "query i";
    p.options.cmap = plot::colormap::viridis;
    p.options.width = 300;
    p.options.height = 300;
    biases.push_back(std::move(p));
  }
  plot::panel tb;
  tb.values = posenc::t5_buckets(n, n, cfg).cast<double>();
  tb.options.title = "T5 buckets (32, bidirectional)";
  tb.options.x_label = "key j";
  tb.options.y_label = "query i";
  tb.options.width = 300;
  tb.options.height = 300;
  for (Index i = 1; i < n; ++i)
    toeplitz = std::max(
        toeplitz, (tb.values.block(i, 1, n - i, n - i) - tb.values.block(i - 1, 0, n - i, n - i))
                      .cwiseAbs()
                      .maxCoeff());
  biases.push_back(std::move(tb));
  ctx.finding(
      format("ALiBi biases and T5 buckets depend only on j - i: every diagonal is constant "
             "(max change along a diagonal = %.1e)",
             toeplitz));
  ctx.check(toeplitz == 0.0, "ALiBi and T5 biases are Toeplitz (functions of j - i)");
  ctx.save(plot::heatmap_grid(biases, 5, plot::scale::separate,
                              "Relative biases: ALiBi heads and T5 buckets"),
           "attention_biases.png",
           "ALiBi symmetric biases of four heads and the T5 bucket matrix, 24 x 24");
}

}  // namespace tour
