// 04: attention with positions inside the kernel. A small grouped-query layer (8 query
// heads, 2 KV heads, head dim 16) runs causal attention with ALiBi and with T5 relative
// biases; every output is checked against a naive loop written here from the formulas.
// Then the same layer decodes token by token through a KV cache and must reproduce the
// full causal pass, and a T5 table gets one gradient step that lowers the loss.
// Exits non-zero on any mismatch.

#include <cmath>
#include <cstdio>
#include <limits>
#include <posenc/attention.hpp>
#include <vector>

namespace {

using posenc::Index;
using mat = posenc::attention_matrix<double>;

mat inputs(Index rows, Index cols, double a) {
  mat m(rows, cols);
  for (Index i = 0; i < m.size(); ++i) m.data()[i] = std::sin(a * static_cast<double>(i + 1));
  return m;
}

// softmax_j(scale q_i.k_j + bias(i, j)) over j <= i, for head h of packed [L, H*d] inputs.
template <class Bias>
mat naive(const mat& q, const mat& k, const mat& v, Index H, Index Hkv, double scale, Bias bias) {
  const Index L = q.rows(), d = q.cols() / H, dv = v.cols() / Hkv;
  mat out = mat::Zero(L, H * dv);
  for (Index h = 0; h < H; ++h) {
    const Index g = h / (H / Hkv);
    for (Index i = 0; i < L; ++i) {
      std::vector<double> l(static_cast<std::size_t>(i + 1));
      double mx = -std::numeric_limits<double>::infinity(), sum = 0;
      for (Index j = 0; j <= i; ++j) {
        double dot = 0;
        for (Index c = 0; c < d; ++c) dot += q(i, h * d + c) * k(j, g * d + c);
        l[static_cast<std::size_t>(j)] = scale * dot + bias(h, i, j);
        mx = std::fmax(mx, l[static_cast<std::size_t>(j)]);
      }
      for (auto& x : l) sum += (x = std::exp(x - mx));
      for (Index j = 0; j <= i; ++j)
        for (Index c = 0; c < dv; ++c)
          out(i, h * dv + c) += l[static_cast<std::size_t>(j)] / sum * v(j, g * dv + c);
    }
  }
  return out;
}

}  // namespace

int main() {
  const Index L = 20, H = 8, Hkv = 2, d = 16;
  const mat q = inputs(L, H * d, 0.37), k = inputs(L, Hkv * d, 0.11), v = inputs(L, Hkv * d, 0.23);
  posenc::attention_config opt;
  opt.mask.causal = true;
  int bad = 0;

  // ALiBi: bias -m_h (i - j), slopes 2^-1 ... 2^-8 for 8 heads.
  const posenc::alibi_policy alibi(H);
  const mat a = posenc::multi_head_attention(q, k, v, H, Hkv, opt, alibi);
  const mat a_ref = naive(q, k, v, H, Hkv, 0.25, [](Index h, Index i, Index j) {
    return -std::ldexp(1.0, -static_cast<int>(h + 1)) * static_cast<double>(i - j);
  });
  const double e_alibi = (a - a_ref).cwiseAbs().maxCoeff();
  std::printf("ALiBi GQA attention vs naive loop: max |diff| = %.3g\n", e_alibi);
  bad += !(e_alibi < 1e-13);

  // T5: a learned table [32, H] by bucket of j - i (unidirectional), no 1/sqrt(d) scaling.
  mat table(32, H);
  for (Index b = 0; b < 32; ++b)
    for (Index h = 0; h < H; ++h)
      table(b, h) = std::cos(0.3 * static_cast<double>(b) + static_cast<double>(h));
  const posenc::t5_bucket_config cfg{32, 128, false};
  posenc::t5_bias_policy t5(table, cfg);
  posenc::attention_config t5opt = opt;
  t5opt.scale = 1.0;
  const mat t = posenc::multi_head_attention(q, k, v, H, Hkv, t5opt, t5);
  const mat t_ref = naive(q, k, v, H, Hkv, 1.0, [&](Index h, Index i, Index j) {
    // Unidirectional buckets: distance n = i - j; 16 exact buckets, log-spaced up to 128.
    const Index n = i - j;
    const Index b =
        n < 16
            ? n
            : std::min<Index>(31, 16 + static_cast<Index>(std::log(n / 16.0) / std::log(8.0) * 16));
    return table(b, h);
  });
  const double e_t5 = (t - t_ref).cwiseAbs().maxCoeff();
  std::printf("T5 GQA attention vs naive loop:    max |diff| = %.3g\n", e_t5);
  bad += !(e_t5 < 1e-13);

  // Decoding token by token through a KV cache reproduces the full causal pass.
  posenc::kv_cache<double> cache(Hkv, d, d);
  double e_dec = 0;
  for (Index i = 0; i < L; ++i) {
    const mat row =
        cache.step(q.middleRows(i, 1), k.middleRows(i, 1), v.middleRows(i, 1), H, {}, alibi);
    e_dec = std::fmax(e_dec, (row - a.middleRows(i, 1)).cwiseAbs().maxCoeff());
  }
  std::printf("KV-cache decode vs full causal:    max |diff| = %.3g over %ld tokens\n", e_dec,
              static_cast<long>(L));
  bad += !(e_dec < 1e-14);

  // One gradient step on the T5 table lowers L = 0.5 |out|^2 (dL/dout = out).
  const double before = 0.5 * t.squaredNorm();
  auto grad = t5.zero_gradient();
  posenc::multi_head_attention_backward(q, k, v, t, H, Hkv, t5opt, t5, grad);
  t5.table() -= (0.05 / grad.table.norm()) * grad.table;  // a short step along -gradient
  const double after = 0.5 * posenc::multi_head_attention(q, k, v, H, Hkv, t5opt, t5).squaredNorm();
  std::printf("T5 table SGD step: loss %.6f -> %.6f\n", before, after);
  bad += !(after < before);

  std::printf(bad ? "FAILED\n" : "all checks passed\n");
  return bad ? 1 : 0;
}
