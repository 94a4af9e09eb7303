// One GQA decode step over head-major K and V (each head's keys back to back: the path
// whose block kernels prefetch their rows), built as a release build is (NDEBUG, -O2) so
// that prefetch_kept.sh can look for the prefetches in its machine code. Exits 0 when the
// output is right: V is constant, so every output value is that constant whatever the
// scores.
#include <posenc/attention/flash.hpp>
#include <vector>

int main() {
  // past decode_chunk: the split-key decode; 8 query heads share 2 KV heads (groups of 4)
  constexpr long keys = 1100, heads = 8, kv_heads = 2, d = 64;
  std::vector<float> q(heads * d, 0.1f), k(keys * kv_heads * d), v(keys * kv_heads * d, 0.25f),
      out(heads * d, 0.0f);
  for (std::size_t i = 0; i < k.size(); ++i) k[i] = static_cast<float>(i % 7) * 0.125f;
  posenc::attention_config config;
  config.mask.causal = true;
  config.q_offset = keys - 1;
  posenc::flash_multi_head_attention(posenc::view_bshd(q.data(), 1, 1, heads, d),
                                     posenc::view_bhsd(k.data(), 1, kv_heads, keys, d),
                                     posenc::view_bhsd(v.data(), 1, kv_heads, keys, d),
                                     posenc::view_bshd(out.data(), 1, 1, heads, d), config,
                                     posenc::no_position_policy{});
  for (float x : out)
    if (!(x > 0.2499f && x < 0.2501f)) return 1;
  return 0;
}
