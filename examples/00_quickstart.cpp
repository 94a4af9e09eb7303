// 00: the README's usage example, compiled and run as a test. Sinusoidal positions added
// to token embeddings, RoPE on queries and keys, causal ALiBi attention; checks that a
// permutation of the tokens changes the output once positions are in.
#include <cstdio>
#include <posenc/posenc.hpp>

int main() {
  using matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const Eigen::Index L = 8, d = 64;
  const matrix x = matrix::Random(L, d);  // token embeddings, one token per row

  // Absolute: x + PE, the "Attention Is All You Need" table (positions 0..L-1).
  matrix h = x;
  posenc::sinusoidal<float>(d).add_to(h);

  // Rotary: Llama-style half pairing, base 10000, rotate Q and K in place.
  matrix q = h, k = h;
  posenc::rotary_embedding<float> rope(d);
  rope.apply(q, /*offset=*/0);
  rope.apply(k, 0, posenc::rope_role::key);

  // Attention with a causal mask and ALiBi biases (one head).
  posenc::attention_config config;
  config.mask.causal = true;
  const matrix out = posenc::attention(q, k, h, config, posenc::alibi_policy(1));
  std::printf("out[%ld x %ld], out(L-1, 0..3) = %.4f %.4f %.4f %.4f\n",
              static_cast<long>(out.rows()), static_cast<long>(out.cols()),
              static_cast<double>(out(L - 1, 0)), static_cast<double>(out(L - 1, 1)),
              static_cast<double>(out(L - 1, 2)), static_cast<double>(out(L - 1, 3)));

  // Order matters now: swapping two tokens does not just swap two output rows.
  matrix xs = x;
  xs.row(1).swap(xs.row(2));
  matrix hs = xs;
  posenc::sinusoidal<float>(d).add_to(hs);
  matrix qs = hs, ks = hs;
  rope.apply(qs, 0);
  rope.apply(ks, 0, posenc::rope_role::key);
  matrix outs = posenc::attention(qs, ks, hs, config, posenc::alibi_policy(1));
  outs.row(1).swap(outs.row(2));
  const double moved = (outs - out).cwiseAbs().maxCoeff();
  std::printf("swap tokens 1 and 2: max |f(Px) - P f(x)| = %.3g (0 would mean no order)\n", moved);

  // Llama-3.1 8B's rotary configuration, built field by field and from its config.json text:
  // both must give the same frequencies.
  posenc::rope_config cfg;
  cfg.head_dim = 128;
  cfg.base = 500000;
  cfg.scaling = posenc::rope_scaling_type::llama3;
  cfg.factor = 8;
  cfg.low_freq_factor = 1;
  cfg.high_freq_factor = 4;
  cfg.original_max_positions = 8192;
  posenc::rotary_embedding<float> rope31(cfg, /*seq_len=*/131072);
  const auto cfg2 = posenc::rope_config_from_hf_json(R"({
    "hidden_size": 4096, "num_attention_heads": 32, "rope_theta": 500000.0,
    "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                     "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}})");
  const auto f1 = cfg.frequencies(131072), f2 = cfg2.frequencies(131072);
  const bool same = f1.inv_freq == f2.inv_freq && f1.attention_factor == f2.attention_factor;
  std::printf("Llama-3.1 rope: %zu frequencies, inv_freq[63] = %.6g, config.json agrees: %s\n",
              f1.inv_freq.size(), f1.inv_freq.back(), same ? "yes" : "NO");
  return moved > 1e-3 && same ? 0 : 1;
}
