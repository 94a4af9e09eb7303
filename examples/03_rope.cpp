// 03: rotary position embeddings (RoPE) as in Llama: rotate the queries and keys of a
// GQA attention layer (8 query heads, 2 KV heads, head dim 64) in place, decode one more
// token with a start offset, and check every number against a naive loop over the RoFormer
// formula; then show that q.k depends only on the distance between the two positions.
// Exits non-zero on any mismatch.

#include <cmath>
#include <cstdio>
#include <posenc/encoding/rotary.hpp>
#include <vector>

int main() {
  using posenc::Index;
  const Index L = 12, Hq = 8, Hk = 2, D = 64;

  // Deterministic inputs: q [L, Hq, D] and k [L, Hk, D], one token per row.
  std::vector<float> q(static_cast<std::size_t>(L * Hq * D)),
      k(static_cast<std::size_t>(L * Hk * D));
  for (std::size_t i = 0; i < q.size(); ++i)
    q[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i)));
  for (std::size_t i = 0; i < k.size(); ++i)
    k[i] = static_cast<float>(std::cos(0.11 * static_cast<double>(i)));
  const std::vector<float> q0 = q, k0 = k;

  // Llama layout: half pairing (dim i turns with dim i + D/2), base 10000, positions 0..L-1.
  posenc::rotary_embedding<float> rope(D);
  rope.apply_qk(posenc::view_shd(q.data(), L, Hq, D), posenc::view_shd(k.data(), L, Hk, D), 0);

  // Naive: y_i = x_i cos(p w_i) - x_{i+D/2} sin(p w_i), y_{i+D/2} = x_{i+D/2} cos + x_i sin.
  auto naive = [&](const std::vector<float>& x, Index heads, Index l, Index h, Index d) {
    const Index i = d % (D / 2);
    const double w = 1.0 / std::pow(10000.0, 2.0 * static_cast<double>(i) / static_cast<double>(D));
    const double c = std::cos(static_cast<double>(l) * w), s = std::sin(static_cast<double>(l) * w);
    const double a = x[static_cast<std::size_t>((l * heads + h) * D + i)];
    const double b = x[static_cast<std::size_t>((l * heads + h) * D + i + D / 2)];
    return d < D / 2 ? a * c - b * s : b * c + a * s;
  };
  double worst = 0;
  for (Index l = 0; l < L; ++l)
    for (Index d = 0; d < D; ++d) {
      for (Index h = 0; h < Hq; ++h)
        worst = std::fmax(worst, std::fabs(q[static_cast<std::size_t>((l * Hq + h) * D + d)] -
                                           naive(q0, Hq, l, h, d)));
      for (Index h = 0; h < Hk; ++h)
        worst = std::fmax(worst, std::fabs(k[static_cast<std::size_t>((l * Hk + h) * D + d)] -
                                           naive(k0, Hk, l, h, d)));
    }
  std::printf("max |rope(q, k) - naive RoFormer loop| = %.3g (float32)\n", worst);

  // Decoding: the last token rotated alone at offset L-1 equals its row in the full pass.
  std::vector<float> last(k0.end() - Hk * D, k0.end());
  rope.apply(posenc::view_shd(last.data(), 1, Hk, D), L - 1, posenc::rope_role::key);
  double decode = 0;
  for (Index j = 0; j < Hk * D; ++j)
    decode = std::fmax(decode, std::fabs(last[static_cast<std::size_t>(j)] -
                                         k[static_cast<std::size_t>((L - 1) * Hk * D + j)]));
  std::printf("max |decode step at offset %ld - full pass| = %.3g\n", static_cast<long>(L - 1),
              decode);

  // The relative property: <R(m) q, R(n) k> depends only on m - n.
  posenc::rotary_embedding<double> rope64(D);
  Eigen::Matrix<double, 1, Eigen::Dynamic> qv(D), kv(D);
  for (Index d = 0; d < D; ++d) {
    qv(d) = q0[static_cast<std::size_t>(d)];
    kv(d) = k0[static_cast<std::size_t>(d)];
  }
  std::printf("q.k at distance 3 from several starts:");
  double spread = 0, first = 0;
  for (Index start : {0, 10, 1000, 100000}) {
    const double dot = rope64.rotated(qv, start + 3)
                           .row(0)
                           .dot(rope64.rotated(kv, start, posenc::rope_role::key).row(0));
    if (start == 0) first = dot;
    spread = std::fmax(spread, std::fabs(dot - first));
    std::printf(" %.6f", dot);
  }
  std::printf("\nspread = %.3g\n", spread);

  const bool ok = worst < 2e-6 && decode == 0.0 && spread < 1e-9;
  std::printf("%s\n", ok ? "ok" : "MISMATCH");
  return ok ? 0 : 1;
}
