// End to end: scaled models' q, k rows rotated by rotary_embedding built from a rope_config,
// against tests/reference/rope_scaling.py (Hugging Face rotate_half formulation, float64).
#include <posenc/encoding/rotary/hf_config.hpp>
#include <posenc/encoding/rotary/rotary.hpp>
#include <posenc/encoding/rotary/scaling.hpp>
#include <posenc/io/npy.hpp>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "support/catch.hpp"
#include "support/check.hpp"

using posenc::Index;
using posenc::rope_config;
using posenc::rope_scaling_type;

namespace {

template <class T>
posenc::io::matrix<T> load(const std::string& name) {
  return posenc::io::read_npy_matrix<T>(std::string(POSENC_TEST_DATA_DIR) + "/rope_scaling_" + name + ".npy");
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
    const posenc::rope_role role = which[0] == 'q' ? posenc::rope_role::query : posenc::rope_role::key;

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
  rope_config c;
  c.head_dim = 128;
  c.base = 1e6;
  c.scaling = rope_scaling_type::yarn;
  c.factor = 4.0;
  c.original_max_positions = 32768;
  check_apply(c, 131072, "qwen2_yarn");
  // Applied once: the rotated norm is the input norm times the factor, not its square.
  const auto x = load<double>("apply_qwen2_yarn_q");
  posenc::rotary_embedding<double> rope(c, 131072, on_the_fly());
  const auto y = rope.rotated(x, positions("qwen2_yarn"));
  const double a = 0.1 * std::log(4.0) + 1.0;
  for (Index i = 0; i < x.rows(); ++i) CHECK(std::abs(y.row(i).norm() - a * x.row(i).norm()) < 1e-12);
}

TEST_CASE("scaled RoPE end to end: Phi-3-mini-128k LongRoPE, long and short",
          "[rotary][scaling][golden][apply]") {
  rope_config c;
  c.head_dim = 96;
  c.scaling = rope_scaling_type::longrope;
  c.original_max_positions = 4096;
  c.factor = 32.0;
  c.long_factor = {1.0299999713897705, 1.0499999523162842, 1.0499999523162842, 1.0799999237060547,
                   1.2299998998641968, 1.2299998998641968, 1.2999999523162842, 1.4499999284744263,
                   1.5999999046325684, 1.6499998569488525, 1.8999998569488525, 2.859999895095825,
                   3.68999981880188,   5.419999599456787,  5.489999771118164,  5.489999771118164,
                   9.09000015258789,   11.579999923706055, 15.65999984741211,  15.769999504089355,
                   15.789999961853027, 18.360000610351562, 21.989999771118164, 23.079999923706055,
                   30.009998321533203, 32.35000228881836,  32.590003967285156, 35.56000518798828,
                   39.95000457763672,  53.840003967285156, 56.20000457763672,  57.95000457763672,
                   59.29000473022461,  59.77000427246094,  59.920005798339844, 61.190006256103516,
                   61.96000671386719,  62.50000762939453,  63.3700065612793,   63.48000717163086,
                   63.48000717163086,  63.66000747680664,  63.850006103515625, 64.08000946044922,
                   64.760009765625,    64.80001068115234,  64.81001281738281,  64.81001281738281};
  c.short_factor = {1.05, 1.05, 1.05, 1.1, 1.1, 1.1, 1.2500000000000002, 1.2500000000000002,
                    1.4000000000000004, 1.4500000000000004, 1.5500000000000005, 1.8500000000000008,
                    1.9000000000000008, 2.000000000000001, 2.000000000000001, 2.000000000000001,
                    2.000000000000001, 2.000000000000001, 2.000000000000001, 2.000000000000001,
                    2.000000000000001, 2.000000000000001, 2.000000000000001, 2.000000000000001,
                    2.000000000000001, 2.000000000000001, 2.000000000000001, 2.000000000000001,
                    2.000000000000001, 2.000000000000001, 2.000000000000001, 2.000000000000001,
                    2.1000000000000005, 2.1000000000000005, 2.2, 2.3499999999999996,
                    2.3499999999999996, 2.3499999999999996, 2.3499999999999996, 2.3999999999999995,
                    2.3999999999999995, 2.6499999999999986, 2.6999999999999984, 2.8999999999999977,
                    2.9499999999999975, 3.049999999999997, 3.049999999999997, 3.049999999999997};
  check_apply(c, 131072, "phi3_long");
  check_apply(c, 4096, "phi3_short");
}
