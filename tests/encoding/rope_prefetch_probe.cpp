// A streaming RoPE call (more than rope_streaming_bytes of q) in both pairings, built as a
// release build is (NDEBUG, -O2), so that prefetch_kept.sh can look for its prefetches
// (simd::rope_stream_ahead) in the machine code. Exits 0 when the rotations equal the
// portable kernel's within the packet kernels' bound, 77 (skipped) where the build has
// no packet backend (the portable kernel asks for nothing ahead).
#include <cmath>
#include <posenc/encoding/rotary.hpp>
#include <vector>

int main() {
  if constexpr (!posenc::simd::has_packet_arch_v<posenc::default_backend>) {
    return 77;
  } else {
    // 2100 tokens x 8 heads x 128 floats: 8.2 MiB, past the 8 MiB streaming threshold
    constexpr long tokens = 2100, heads = 8, d = 128;
    static_assert(tokens * heads * d * 4 > posenc::kernels::rope_streaming_bytes, "streams");
    std::vector<float> x(static_cast<std::size_t>(tokens * heads * d));
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i));
    for (auto pairing : {posenc::rope_pairing::half, posenc::rope_pairing::interleaved}) {
      posenc::rotary_embedding<float> fast(d, -1, 10000.0, pairing);
      posenc::rotary_embedding<float, posenc::backend::scalar> portable(d, -1, 10000.0, pairing);
      std::vector<float> a = x, b = x;
      fast.apply(posenc::view_shd(a.data(), tokens, heads, d), posenc::Index{0});
      portable.apply(posenc::view_shd(b.data(), tokens, heads, d), posenc::Index{0});
      for (std::size_t i = 0; i < a.size(); ++i)
        if (!(std::abs(a[i] - b[i]) <= 1e-6f)) return 1;
    }
    return 0;
  }
}
