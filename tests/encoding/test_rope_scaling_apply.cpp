// End to end: scaled models' q, k rows rotated by rotary_embedding built from a rope_config,
// against tests/reference/rope_scaling.py (Hugging Face rotate_half formulation, float64).
#include <cmath>
#include <cstdint>
#include <posenc/encoding/rotary/hf_config.hpp>
#include <posenc/encoding/rotary/rotary.hpp>
#include <posenc/encoding/rotary/scaling.hpp>
#include <posenc/io/npy.hpp>
#include <string>
#include <vector>

#include "support/catch.hpp"
#include "support/check.hpp"
#include "support/rope_models.hpp"

using posenc::Index;
using posenc::rope_config;

namespace {

template <class T>
posenc::io::matrix<T> load(const std::string& name) {
  return posenc::io::read_npy_matrix<T>(std::string(POSENC_TEST_DATA_DIR) + "/rope_scaling_" +
                                        name + ".npy");
}

// Positions reach 131071: a cached embedding would fill 131072 rows of cos/sin per object.
posenc::rope_options on_the_fly() {
  posenc::rope_options o;
  o.cache = posenc::rope_cache_mode::on_the_fly;
  return o;
}

std::vector<Index> positions(const std::string& model) {
  const auto p = load<std::int64_t>("apply_" + model + "_pos");
  return std::vector<Index>(p.data(), p.data() + p.size());
}

// Rotates the golden q, k of `model` with `config` at the golden positions, in double and in
// float (exact mode), and compares with the reference rows.
void check_apply(const rope_config& config, Index seq_len, const std::string& model) {
  INFO("model " << model << ", seq_len " << seq_len);
  const std::vector<Index> pos = positions(model);
  for (const char* which : {"q", "k"}) {
    INFO(which);
    const auto x = load<double>("apply_" + model + "_" + which);
    const auto ref = load<double>("apply_" + model + "_" + which + "_rot");
    REQUIRE(x.rows() == static_cast<Index>(pos.size()));
    const posenc::rope_role role =
        which[0] == 'q' ? posenc::rope_role::query : posenc::rope_role::key;

    posenc::rotary_embedding<double> rope(config, seq_len, on_the_fly());
    const auto y = rope.rotated(x, pos, role);
    CHECK(posenc_test::max_abs_diff(y, ref) < 1e-12);

    posenc::rotary_embedding<float> ropef(config, seq_len, on_the_fly());
    const posenc::io::matrix<float> xf = x.cast<float>();
    const auto yf = ropef.rotated(xf, pos, role);
    // float32 input rounding alone is ~6e-8; the angles are not rounded to float32.
    CHECK(posenc_test::rel_norm_err(yf, ref) < 2e-6);
  }
}

}  // namespace

TEST_CASE("scaled RoPE end to end: Llama-3.1 8B", "[rotary][scaling][golden][apply]") {
  const rope_config c = posenc::rope_config_from_hf_json(R"({
    "hidden_size": 4096, "num_attention_heads": 32, "max_position_embeddings": 131072,
    "rope_theta": 500000.0,
    "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"}})");
  check_apply(c, 131072, "llama31_8b");
}

TEST_CASE("scaled RoPE end to end: Qwen2 YaRN (attention factor applied once)",
          "[rotary][scaling][golden][apply]") {
  const rope_config c = posenc_test::qwen2_yarn();
  check_apply(c, 131072, "qwen2_yarn");
  // Applied once: the rotated norm is the input norm times the factor, not its square.
  const auto x = load<double>("apply_qwen2_yarn_q");
  posenc::rotary_embedding<double> rope(c, 131072, on_the_fly());
  const auto y = rope.rotated(x, positions("qwen2_yarn"));
  const double a = 0.1 * std::log(4.0) + 1.0;
  for (Index i = 0; i < x.rows(); ++i)
    CHECK(std::abs(y.row(i).norm() - a * x.row(i).norm()) < 1e-12);
}

TEST_CASE("scaled RoPE end to end: Phi-3-mini-128k LongRoPE, long and short",
          "[rotary][scaling][golden][apply]") {
  const rope_config c = posenc_test::phi3();
  check_apply(c, 131072, "phi3_long");
  check_apply(c, 4096, "phi3_short");
}
