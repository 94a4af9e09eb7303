// Compiling this must fail (CTest matches the message): the device flash kernel takes only
// the policies it can compute inside its tiles. POSENC_CASE 1: the CPU's rotary_policy (the
// device one is posenc::cuda::rotary_policy); 2: Shaw's clipped embeddings.
#include <posenc/attention/rotary_policy.hpp>
#include <posenc/cuda.cuh>
#include <posenc/encoding/shaw.hpp>

void call(const posenc::heads_view<const float>& q, const posenc::heads_view<const float>& k,
          const posenc::heads_view<const float>& v, const posenc::heads_view<float>& out) {
#if POSENC_CASE == 1
  posenc::cuda::flash_multi_head_attention(q, k, v, out, {}, posenc::rotary_policy(64));
#else
  const posenc::shaw_policy shaw(posenc::shaw_clip::symmetric(4), 64, 64);
  posenc::cuda::flash_multi_head_attention(q, k, v, out, {}, shaw);
#endif
}
