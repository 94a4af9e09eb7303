// A user's translation unit under strict warnings (tests/install/CMakeLists.txt): every
// public header through a plain -I (the list is generated at configure time), then the main
// entry points called once each, so that the templates behind them are instantiated and
// checked too: g++ reports a sign conversion in a template only where it is instantiated,
// and -Warray-bounds only in optimised code. Compiled with -Werror; never run.
// (consumer_strict_safetensors.cpp is the second unit of the same tests.)
#include <cstdio>

#include "posenc_all_headers.hpp"

static_assert(POSENC_VERSION ==
                  POSENC_VERSION_MAJOR * 10000 + POSENC_VERSION_MINOR * 100 + POSENC_VERSION_PATCH,
              "POSENC_VERSION is major * 10000 + minor * 100 + patch");

namespace {

using posenc::Index;
template <class T>
using mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// Absolute encodings, RoPE on matrices and on [seq, head, dim] views (the SIMD kernels for
// float), attention with each bias policy, a KV cache, and the tiled kernel.
template <class T>
T encode_and_attend(Index L, Index H, Index d) {
  mat<T> x = mat<T>::Random(L, H * d);
  posenc::sinusoidal<T>(H * d).add_to(x);
  posenc::learned_table<T> wpe(L, H * d, /*seed=*/1);
  x += wpe.weights().topRows(L);

  mat<T> q = x, k = x, v = x;
  posenc::rotary_embedding<T> rope(d);
  rope.apply_qk(posenc::view_shd(q.data(), L, H, d), posenc::view_shd(k.data(), L, H, d), 0);
  mat<T> one = x.leftCols(d);
  rope.apply(one, 0, posenc::rope_role::key);

  posenc::attention_config opt;
  opt.mask.causal = true;
  mat<T> out = posenc::multi_head_attention(q, k, v, H, H, opt, posenc::alibi_policy(H));
  mat<T> table = mat<T>::Random(32, H);
  out += posenc::multi_head_attention(q, k, v, H, H, opt,
                                      posenc::t5_bias_policy(table, {32, 128, false}));

  posenc::kv_cache<T> cache(H, d, d);
  for (Index i = 0; i < L; ++i)
    out.middleRows(i, 1) -= cache.step(q.middleRows(i, 1), k.middleRows(i, 1), v.middleRows(i, 1),
                                       H, {}, posenc::alibi_policy(H));

  mat<T> flash(L, H * d);
  posenc::flash_multi_head_attention(posenc::view_shd(static_cast<const T*>(q.data()), L, H, d),
                                     posenc::view_shd(static_cast<const T*>(k.data()), L, H, d),
                                     posenc::view_shd(static_cast<const T*>(v.data()), L, H, d),
                                     posenc::view_shd(flash.data(), L, H, d), opt);
  return out.sum() + flash.sum();
}

// The file formats: write and read back .npy and .safetensors.
double round_trip() {
  const mat<float> m = mat<float>::Random(3, 4);
  posenc::io::write_npy("strict.npy", m);
  posenc::io::write_safetensors("strict.safetensors", {{"m", m}}, {{"format", "pt"}});
  const auto a = posenc::io::read_npy_matrix<float>("strict.npy", 3, 4);
  const auto b = posenc::io::read_safetensors_matrix<double>("strict.safetensors", "m", 3, 4);
  return static_cast<double>(a.sum()) + b.sum();
}

}  // namespace

int main() {
  const posenc::rope_config cfg = posenc::rope_config_from_hf_json(
      R"({"hidden_size": 4096, "num_attention_heads": 32, "rope_theta": 500000.0})");
  const double sum = static_cast<double>(encode_and_attend<float>(8, 2, 16)) +
                     encode_and_attend<double>(8, 2, 16) + round_trip() +
                     static_cast<double>(cfg.frequencies(8192).inv_freq.size());
  std::printf("posenc %s: %g\n", posenc::version_string, sum);
  return 0;
}
