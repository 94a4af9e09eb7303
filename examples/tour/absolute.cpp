// The tour's first section: absolute positions. It reproduces the classic tutorial
// demonstrations with posenc's own tables and property helpers:
//   1. attention without positions is permutation-equivariant, with sinusoidal positions not;
//   2. the sinusoidal table as a heatmap;  3. a few of its dimensions as waves;
//   4. the cosine similarity of positions; 5. PE(p).PE(p+k) against the offset k;
//   6. a learned table next to the sinusoidal one;  plus the classic 10 x 6 table and the
//   sqrt(d) scaling of token embeddings.

#include <algorithm>
#include <cmath>
#include <posenc/attention/attention.hpp>
#include <posenc/core/random.hpp>
#include <posenc/encoding/learned.hpp>
#include <posenc/encoding/properties.hpp>
#include <posenc/encoding/sinusoidal.hpp>
#include <string>
#include <utility>
#include <vector>

#include "tour.hpp"

namespace tour {
namespace {

namespace plot = posenc_plot;
using posenc::Index;
using dmatrix = plot::matrix;  // row-major double, one token per row

constexpr double pi = 3.14159265358979323846;

dmatrix random_normal(Index rows, Index cols, double stddev, posenc::random_generator& gen) {
  dmatrix m(rows, cols);
  for (Index r = 0; r < rows; ++r)
    for (Index c = 0; c < cols; ++c) m(r, c) = stddev * gen.normal();
  return m;
}

// Rows of m reordered: out(i, :) = m(perm[i], :), i.e. P m.
dmatrix permute_rows(const dmatrix& m, const std::vector<Index>& perm) {
  dmatrix out(m.rows(), m.cols());
  for (std::size_t i = 0; i < perm.size(); ++i) out.row(static_cast<Index>(i)) = m.row(perm[i]);
  return out;
}

// One self-attention head f(X) = softmax(X Wq (X Wk)^T / sqrt(d)) X Wv, computed by posenc's
// reference attention.
struct self_attention {
  dmatrix wq, wk, wv;
  dmatrix operator()(const dmatrix& x, dmatrix* weights = nullptr) const {
    const dmatrix q = x * wq, k = x * wk, v = x * wv;
    if (weights) return posenc::attention_with_weights(q, k, v, *weights);
    return posenc::attention(q, k, v);
  }
};

double max_abs(const dmatrix& a, const dmatrix& b) { return (a - b).cwiseAbs().maxCoeff(); }

// ---------------------------------------------------------------------------------------

void classic_table(tour_context& ctx) {
  const posenc::sinusoidal<double> enc(6);
  const auto t = enc.table(10);
  ctx.log << "  The classic 10 x 6 table (Vaswani, d = 6, positions 0..9), 4 decimals:\n";
  for (Index p = 0; p < t.rows(); ++p) {
    ctx.log << "    p=" << p << " ";
    for (Index c = 0; c < t.cols(); ++c) ctx.log << format(" %7.4f", t(p, c));
    ctx.log << "\n";
  }
  // Row 1 as every tutorial prints it.
  const double row1[6] = {0.8415, 0.5403, 0.0464, 0.9989, 0.0022, 1.0000};
  double dev = 0;
  for (Index c = 0; c < 6; ++c) dev = std::max(dev, std::abs(t(1, c) - row1[c]));
  ctx.check(dev <= 5e-5, format("row 1 of the 10 x 6 table matches 0.8415 0.5403 0.0464 0.9989 "
                                "0.0022 1.0000 (max deviation %.1e)",
                                dev));
  ctx.finding(format("classic 10 x 6 table: row 1 = %.4f %.4f %.4f %.4f %.4f %.4f", t(1, 0),
                     t(1, 1), t(1, 2), t(1, 3), t(1, 4), t(1, 5)));
}

// 1. f(PX) = P f(X) without positions; adding PE(p) breaks it.
void permutation(tour_context& ctx) {
  const Index d = 16;
  posenc::random_generator gen(7);
  const self_attention f{random_normal(d, d, 1 / std::sqrt(double(d)), gen),
                         random_normal(d, d, 1 / std::sqrt(double(d)), gen),
                         random_normal(d, d, 1 / std::sqrt(double(d)), gen)};
  const posenc::sinusoidal<double> enc(d);

  // "the dog bites the man" and "the man bites the dog": the same words, dog and man swapped.
  const std::vector<std::string> vocab = {"the", "dog", "bites", "man"};
  const dmatrix emb = random_normal(Index(vocab.size()), d, 1.0, gen);
  const std::vector<Index> ids_a = {0, 1, 2, 0, 3};
  const std::vector<Index> perm = {0, 4, 2, 3, 1};  // sentence b, row i = sentence a, row perm[i]
  dmatrix xa(5, d);
  for (Index i = 0; i < 5; ++i) xa.row(i) = emb.row(ids_a[static_cast<std::size_t>(i)]);
  const dmatrix xb = permute_rows(xa, perm);
  std::vector<std::string> words_a, words_b;
  for (Index id : ids_a) words_a.push_back(vocab[static_cast<std::size_t>(id)]);
  for (Index i : perm) words_b.push_back(words_a[static_cast<std::size_t>(i)]);

  const dmatrix pe = enc.table(5);
  dmatrix wa, wb, wa_pe, wb_pe;
  const dmatrix ya = f(xa, &wa), yb = f(xb, &wb);
  const dmatrix ya_pe = f(xa + pe, &wa_pe), yb_pe = f(xb + pe, &wb_pe);
  double err_plain = max_abs(yb, permute_rows(ya, perm));
  double err_pe = max_abs(yb_pe, permute_rows(ya_pe, perm));

  // The same on a longer random sequence with a random permutation (Fisher-Yates).
  const Index len = 64;
  const dmatrix x = random_normal(len, d, 1.0, gen);
  std::vector<Index> shuffle(static_cast<std::size_t>(len));
  for (Index i = 0; i < len; ++i) shuffle[static_cast<std::size_t>(i)] = i;
  for (Index i = len - 1; i > 0; --i) {
    const auto j = static_cast<Index>(gen.uniform() * double(i + 1));
    std::swap(shuffle[static_cast<std::size_t>(i)],
              shuffle[static_cast<std::size_t>(std::min(j, i))]);
  }
  const dmatrix px = permute_rows(x, shuffle), pe_long = enc.table(len);
  err_plain = std::max(err_plain, max_abs(f(px), permute_rows(f(x), shuffle)));
  const double err_pe_long = max_abs(f(px + pe_long), permute_rows(f(x + pe_long), shuffle));
  err_pe = std::min(err_pe, err_pe_long);

  ctx.check(err_plain <= 1e-12,
            format("without positions f(PX) = P f(X) to 1e-12 (got %.2e)", err_plain));
  ctx.check(err_pe > 1e-3,
            format("with sinusoidal positions f(PX + PE) != P f(X + PE) (got %.2e)", err_pe));
  ctx.finding(
      format("permutation: without positions max |f(PX) - P f(X)| = %.1e (equivariant, "
             "double); with sinusoidal positions >= %.3f (order now matters)",
             err_plain, err_pe));

  plot::heatmap_options o;
  o.cmap = plot::colormap::blues;
  o.range = plot::value_range{0, 1};
  o.annotate = true;
  o.x_label = "key";
  o.y_label = "query";
  o.width = o.height = 330;
  std::vector<plot::panel> panels;
  auto add = [&](const dmatrix& w, const std::vector<std::string>& words,
                 const std::string& title) {
    plot::heatmap_options p = o;
    p.title = title;
    p.x_tick_labels = p.y_tick_labels = words;
    panels.push_back({w, p});
  };
  add(wa, words_a, "no PE: the dog bites the man");
  add(wb, words_b, "no PE: the man bites the dog");
  add(wa_pe, words_a, "with PE: the dog bites the man");
  add(wb_pe, words_b, "with PE: the man bites the dog");
  ctx.save(plot::heatmap_grid(
               panels, 2, plot::scale::shared,
               "Attention weights: without positions, swapping words only swaps rows and columns",
               "attention weight"),
           "permutation.png", "Attention weights with and without positions for two word orders");
}

// 2.-5. The sinusoidal table, its waves, its similarity structure and its offset property.
void sinusoidal_table(tour_context& ctx) {
  const Index len = 100, d = 128;
  const posenc::sinusoidal<double> enc(d);
  const dmatrix t = enc.table(len);

  plot::heatmap_options o;
  o.title = "Sinusoidal encoding (Vaswani), 100 positions x 128 dims";
  o.x_label = "dimension i (sin at even i, cos at odd i)";
  o.y_label = "position p";
  o.value_label = "PE(p, i)";
  o.cmap = plot::colormap::diverging;
  o.range = plot::value_range{-1, 1};
  const auto& w = enc.frequencies();
  const auto closest = posenc::min_pairwise_distance(t);
  ctx.check(closest.distance > 0.1, format("all %lld positions are distinct (closest pair at %.3f)",
                                           static_cast<long long>(len), closest.distance));
  ctx.finding(format(
      "sinusoidal table %lld x %lld: values in [%.4f, %.4f]; wavelengths 2 pi / w_i from "
      "%.2f (dims 0, 1) to %.0f (dims %lld, %lld); closest pair of positions %lld and %lld at "
      "distance %.3f",
      static_cast<long long>(len), static_cast<long long>(d), t.minCoeff(), t.maxCoeff(),
      2 * pi / w.front(), 2 * pi / w.back(), static_cast<long long>(d - 2),
      static_cast<long long>(d - 1), static_cast<long long>(closest.first),
      static_cast<long long>(closest.second), closest.distance));
  ctx.save(plot::heatmap(t, o), "sinusoidal_heatmap.png",
           "The sinusoidal table, 100 positions x 128 dims");

  // Waves: a few sin dimensions against the position, checked against the formula itself.
  std::vector<plot::series> waves;
  double formula_dev = 0;
  const Index dims[] = {0, 8, 16, 32, 64};
  for (std::size_t k = 0; k < 5; ++k) {
    const Index i = dims[k];
    const double wi = std::pow(10000.0, -double(i) / double(d));
    plot::series s;
    s.name = format("dim %lld, period %.1f", static_cast<long long>(i), 2 * pi / wi);
    for (Index p = 0; p < len; ++p) {
      s.xs.push_back(double(p));
      s.ys.push_back(t(p, i));
      formula_dev = std::max(formula_dev, std::abs(t(p, i) - std::sin(double(p) * wi)));
    }
    if (i == 0) {  // the fastest wave: show that it is sampled at integer positions
      s.mark = plot::marker::circle;
      s.marker_size = 2.5;
      s.line_width = 1.2;
    }
    waves.push_back(std::move(s));
  }
  ctx.check(formula_dev <= 1e-12,
            format("table columns equal sin(p / 10000^(i/d)) (max deviation %.1e)", formula_dev));
  plot::line_options lo;
  lo.title = "Each dimension is a sinusoid; the period grows geometrically with i";
  lo.x_label = "position p";
  lo.y_label = "PE(p, i)";
  lo.y_min = -1.15;
  lo.y_max = 1.15;
  ctx.finding(format(
      "sinusoids: dims 0, 8, 16, 32, 64 have periods %.1f, %.1f, %.1f, %.1f, %.1f positions "
      "(the table equals sin(p / 10000^(i/d)) to %.1e)",
      2 * pi / w[0], 2 * pi / w[4], 2 * pi / w[8], 2 * pi / w[16], 2 * pi / w[32], formula_dev));
  ctx.save(plot::line_plot(waves, lo), "sinusoids.png",
           "Five sin dimensions of the table against the position");

  // Cosine similarity: every row has norm sqrt(d/2), so S(p, q) depends on q - p only.
  const dmatrix sim = posenc::cosine_similarity(t);
  double toeplitz_dev = 0;
  for (Index p = 0; p < len; ++p)
    for (Index q = 0; q < len; ++q)
      toeplitz_dev = std::max(toeplitz_dev, std::abs(sim(p, q) - sim(0, std::abs(q - p))));
  ctx.check(toeplitz_dev <= 1e-12,
            format("cosine similarity depends on |p - q| only (max deviation %.1e)", toeplitz_dev));
  ctx.check(std::abs(sim.diagonal().minCoeff() - 1) <= 1e-12,
            "cosine similarity is 1 on the diagonal");
  plot::heatmap_options so;
  so.title = "Cosine similarity of positions (d = 128)";
  so.x_label = "position q";
  so.y_label = "position p";
  so.value_label = "cos(PE(p), PE(q))";
  so.width = so.height = 400;
  ctx.finding(
      format("cosine similarity: %.4f for neighbours, %.4f at distance 10, %.4f at distance 50; "
             "it depends only on the distance (to %.0e)",
             sim(0, 1), sim(0, 10), sim(0, 50), std::max(toeplitz_dev, 1e-16)));
  ctx.save(plot::heatmap(sim, so), "cosine_similarity.png",
           "Cosine similarity between the positions of the table");

  // Dot product PE(p).PE(p+k) from several starts: the same curve, sum_i cos(k w_i).
  const Index kmax = 49;
  const Index starts[] = {0, 10, 25, 50};
  const Eigen::VectorXd closed = posenc::offset_dot_products(enc, kmax);
  const posenc::learned_table<double> learned(len, d, 2017);
  std::vector<plot::series> sin_curves, learned_curves;
  double dev = 0, learned_spread = 0;
  std::vector<Eigen::VectorXd> learned_dots;
  const double dash[] = {0, 10, 4, 0};
  const plot::marker mark[] = {plot::marker::none, plot::marker::none, plot::marker::none,
                               plot::marker::circle};
  const double width[] = {7, 4, 2.5, 0};
  for (std::size_t s = 0; s < 4; ++s) {
    const Eigen::VectorXd dots = posenc::offset_dot_products(t, starts[s], kmax);
    const Eigen::VectorXd ldots = posenc::offset_dot_products(learned.weights(), starts[s], kmax);
    dev = std::max(dev, (dots - closed).cwiseAbs().maxCoeff());
    if (!learned_dots.empty())
      learned_spread =
          std::max(learned_spread, (ldots - learned_dots.front()).cwiseAbs().maxCoeff());
    learned_dots.push_back(ldots);
    plot::series a, b;
    a.name = b.name = format("start p = %lld", static_cast<long long>(starts[s]));
    for (Index k = 0; k <= kmax; ++k) {
      a.xs.push_back(double(k));
      a.ys.push_back(dots(k));
      b.xs.push_back(double(k));
      b.ys.push_back(ldots(k));
    }
    // Drawn thick to thin, dashed and dotted, so that coinciding curves stay visible.
    a.line_width = width[s];
    a.dash = dash[s];
    a.mark = mark[s];
    sin_curves.push_back(std::move(a));
    learned_curves.push_back(std::move(b));
  }
  ctx.check(dev <= 1e-9,
            format("PE(p).PE(p+k) is the same for every start p (max deviation %.1e)", dev));
  plot::line_options dl;
  dl.title = "Sinusoidal: PE(p).PE(p+k) depends on k only";
  dl.x_label = "offset k";
  dl.y_label = "dot product";
  dl.width = 480;
  plot::line_options ll = dl;
  ll.title = "Learned (random init): no such structure";
  ctx.finding(
      format("dot product vs offset: from starts 0, 10, 25, 50 the curves coincide to %.1e "
             "(= sum_i cos(k w_i): %.2f at k = 0, %.2f at k = 1, %.2f at k = 10); a learned "
             "table's curves differ by up to %.3f (its value at k = 0 is %.3f)",
             dev, closed(0), closed(1), closed(10), learned_spread, learned_dots.front()(0)));
  ctx.save(plot::compose({plot::line_plot(sin_curves, dl), plot::line_plot(learned_curves, ll)}, 2),
           "dot_vs_offset.png",
           "Dot product of positions p and p + k against the offset k, from four starts");

  // The linear map behind it: PE(p + k) = T_k PE(p), the same T_k for every p.
  const dmatrix big = enc.table(1101);
  double rot_err = 0;
  for (Index k : {1, 7, 50, 100}) {
    const dmatrix tk = posenc::offset_rotation(enc, k);
    rot_err =
        std::max(rot_err, max_abs(big.middleRows(k, 1001), big.topRows(1001) * tk.transpose()));
  }
  ctx.check(rot_err <= 1e-12,
            format("PE(p + k) = T_k PE(p) to 1e-12 for p <= 1000 (got %.1e)", rot_err));
  ctx.finding(
      format("relative offsets are linear: max |PE(p + k) - T_k PE(p)| = %.1e over p = 0..1000, "
             "k = 1, 7, 50, 100 (T_k: 2 x 2 rotations by k w_i)",
             rot_err));
}

// The input of the first layer, sqrt(d) E + PE (Vaswani et al., section 3.4): with token
// embeddings initialised N(0, 1/d), as the paper's shared embedding is, the sqrt(d) factor
// brings them to the scale of PE instead of letting PE drown them.
void scaled_embeddings(tour_context& ctx) {
  const Index len = 10, d = 64;
  const posenc::sinusoidal<double> enc(d);
  posenc::random_generator gen(11);
  const dmatrix e = random_normal(len, d, 1 / std::sqrt(double(d)), gen);
  dmatrix plain = e, scaled = e;
  enc.add_to(plain);
  enc.add_to(scaled, 0, posenc::embedding_scale::sqrt_dim);
  const dmatrix pe = enc.table(len);
  const double dev =
      std::max(max_abs(plain, e + pe), max_abs(scaled, std::sqrt(double(d)) * e + pe));
  ctx.check(dev <= 1e-12,
            format("add_to gives E + PE and sqrt(d) E + PE (max deviation %.1e)", dev));
  const double n_e = e.rowwise().norm().mean(), n_pe = pe.rowwise().norm().mean();
  ctx.finding(
      format("embedding scale (d = %lld): token embeddings N(0, 1/d) have mean norm %.2f, PE rows "
             "%.2f = sqrt(d/2); sqrt(d) E has %.2f, so input = sqrt(d) E + PE keeps both visible",
             static_cast<long long>(d), n_e, n_pe, std::sqrt(double(d)) * n_e));
}

// 6. A learned table next to the sinusoidal one.
void learned_vs_sinusoidal(tour_context& ctx) {
  const Index len = 100, d = 128;
  const posenc::sinusoidal<double> enc(d);
  const posenc::learned_table<double> learned(len, d, 2017);
  const dmatrix t = enc.table(len), w = learned.weights();
  const dmatrix s_sim = posenc::cosine_similarity(t), l_sim = posenc::cosine_similarity(w);

  const double mean = w.mean();
  const double sd = std::sqrt((w.array() - mean).square().sum() / double(w.size() - 1));
  double off = 0;
  for (Index p = 0; p < len; ++p)
    for (Index q = 0; q < len; ++q)
      if (p != q) off += std::abs(l_sim(p, q));
  off /= double(len * (len - 1));
  ctx.check(std::abs(sd - 0.02) < 0.002,
            format("learned init has standard deviation 0.02 (measured %.4f)", sd));

  std::string message;
  try {
    (void)learned.at(std::vector<Index>{len});
  } catch (const posenc::error& e) {
    message = e.what();
  }
  ctx.check(!message.empty(),
            "a learned table has no row for a position past max_len (posenc::error)");
  const dmatrix far = enc.at(std::vector<Index>{100000});

  plot::heatmap_options o;
  o.cmap = plot::colormap::diverging;
  o.x_label = "dimension";
  o.y_label = "position";
  o.width = 384;
  o.height = 300;
  plot::heatmap_options a = o, b = o, c = o, e = o;
  a.title = "Sinusoidal table";
  a.value_label = "PE";
  b.title = "Learned table, N(0, 0.02) init";
  b.value_label = "W";
  c.title = "Sinusoidal: cosine similarity";
  e.title = "Learned: cosine similarity";
  c.cmap = e.cmap = plot::colormap::viridis;
  c.x_label = e.x_label = "position";
  c.width = c.height = e.width = e.height = 300;
  c.range = e.range = plot::value_range{-0.4, 1};
  c.value_label = e.value_label = "cos";
  ctx.finding(
      format("learned vs sinusoidal: the learned table starts as noise (std %.4f, mean |cos| "
             "between positions %.3f) while the sinusoidal one has neighbour similarity %.3f; "
             "sinusoidal extrapolates (PE(100000) row 0 = %.4f), the learned table refuses: \"%s\"",
             sd, off, s_sim(0, 1), far(0, 0), message.c_str()));
  ctx.save(plot::heatmap_grid({{t, a}, {w, b}, {s_sim, c}, {l_sim, e}}, 2, plot::scale::separate,
                              "Learned vs sinusoidal absolute positions (100 x 128)"),
           "learned_vs_sinusoidal.png",
           "A learned table (at initialization) next to the sinusoidal table");
}

}  // namespace

void section_absolute(tour_context& ctx) {
  classic_table(ctx);
  permutation(ctx);
  sinusoidal_table(ctx);
  scaled_embeddings(ctx);
  learned_vs_sinusoidal(ctx);
}

}  // namespace tour
