// Fuzz harness: Hugging Face config.json text (rope_config_from_hf_json,
// posenc/encoding/rotary/hf_config.hpp) on arbitrary bytes.
//
// The text is read without a layer type, and with "full_attention" / "sliding_attention"
// when it names them (Gemma-style per-layer rope_parameters). A config the reader accepts
// is used as a model would use it: its frequencies within and beyond the original context
// (dynamic NTK and LongRoPE switch there), a rotary embedding on the fly that rotates rows
// at near and far positions, and a cached one. No size is capped here: the library's own
// limits decide, and a std::bad_alloc is a finding. The harness's rows are bounded by what
// the library itself allocates for the config (one row of head_dim values for wide heads).

#include <cstddef>
#include <cstdint>
#include <limits>
#include <posenc/encoding/rotary.hpp>
#include <posenc/encoding/rotary/hf_config.hpp>
#include <string_view>
#include <vector>

#include "fuzz_support.hpp"

namespace {

using posenc::Index;

/// What a model does with an accepted config.
void use(const posenc::rope_config& cfg) {
  posenc_fuzz::guarded("rope_config::frequencies", [&] {
    (void)cfg.frequencies();
    if (cfg.original_max_positions < std::numeric_limits<Index>::max())
      (void)cfg.frequencies(cfg.original_max_positions + 1);
  });
  const Index rows = cfg.head_dim <= 4096 ? 3 : 1;
  const std::vector<Index> positions = {0, Index(1) << 20, 7};
  posenc_fuzz::guarded("rotary_embedding on the fly", [&] {
    posenc::rope_options opt;
    opt.cache = posenc::rope_cache_mode::on_the_fly;
    posenc::rotary_embedding<float> rope(cfg, Index(1) << 20, opt);
    posenc::row_matrix<float> x = posenc::row_matrix<float>::Constant(rows, cfg.head_dim, 0.5f);
    rope.apply(x, std::vector<Index>(positions.begin(), positions.begin() + rows),
               posenc::rope_role::key);
    rope.invert(x, Index(3));
  });
  posenc_fuzz::guarded("rotary_embedding cached", [&] {
    posenc::rotary_embedding<double> rope(cfg, 0);
    posenc::row_matrix<double> x = posenc::row_matrix<double>::Constant(rows, cfg.head_dim, -1.0);
    rope.apply(x, Index(0));
  });
}

void read(std::string_view text, std::string_view layer_type) {
  posenc::rope_config cfg;
  if (posenc_fuzz::guarded("rope_config_from_hf_json",
                           [&] { cfg = posenc::rope_config_from_hf_json(text, layer_type); }))
    use(cfg);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  read(text, {});
  for (std::string_view layer : {"full_attention", "sliding_attention"})
    if (text.find(layer) != std::string_view::npos) read(text, layer);
  return 0;
}
