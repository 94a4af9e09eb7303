// The names posenc 0.1 used stay for one release as deprecated aliases of the new ones
// (docs/architecture.md, "Names"): code written for 0.1 compiles and computes the same.
// This file is compiled with -Wno-deprecated-declarations; everything else in the tree
// uses the new names (their warnings are errors there).
#include <posenc/posenc.hpp>
#include <type_traits>
#include <vector>

#include "attention_support.hpp"
#include "support/catch.hpp"

using posenc::Index;
using posenc_test::random_matrix;

TEST_CASE("the former names are the new entities", "[names]") {
  STATIC_REQUIRE(std::is_same_v<posenc::no_position, posenc::no_position_policy>);
  STATIC_REQUIRE(std::is_same_v<posenc::attention_options, posenc::attention_config>);
  STATIC_REQUIRE(std::is_same_v<posenc::flash_config, posenc::flash_options>);
  STATIC_REQUIRE(std::is_same_v<posenc::shaw_relative<float>, posenc::shaw_policy<float>>);
  STATIC_REQUIRE(std::is_same_v<posenc::shaw_relative<>, posenc::shaw_policy<float>>);
  STATIC_REQUIRE(std::is_same_v<posenc::transformer_xl_relative<double>,
                                posenc::transformer_xl_policy<double>>);
  STATIC_REQUIRE(
      std::is_same_v<posenc::backend::rope_token<float>, posenc::kernels::rope_token<float>>);
  STATIC_REQUIRE(std::is_same_v<posenc::backend::rope_real_t<Eigen::half>, float>);
  STATIC_REQUIRE(std::is_same_v<posenc::backend::sinusoidal_rows_args<double>,
                                posenc::kernels::sinusoidal_rows_args<double>>);
}

TEST_CASE("the former call forms compute what the new ones do", "[names]") {
  posenc::learned_table<float> t(16, 4, 7);
  const std::vector<Index> pos{3, 0, 15};
  CHECK(t.lookup(pos) == t.at(pos));
  const posenc::dmatrix q = random_matrix(5, 8, 1), k = random_matrix(6, 8, 2),
                        v = random_matrix(6, 8, 3), dout = random_matrix(5, 8, 4);
  posenc::attention_options opt;
  opt.mask.causal = true;
  opt.q_offset = 1;
  CHECK(posenc::attention<posenc::backend::scalar>(q, k, v, opt) ==
        posenc::attention(q, k, v, opt));
  posenc::dmatrix w_old, w_new;
  CHECK(posenc::attention_with_weights<posenc::backend::scalar>(q, k, v, w_old, opt) ==
        posenc::attention_with_weights(q, k, v, w_new, opt));
  CHECK(w_old == w_new);
  CHECK(posenc::multi_head_attention<posenc::backend::scalar>(q, k, v, 2, 2, opt) ==
        posenc::multi_head_attention(q, k, v, 2, 2, opt));
  CHECK(posenc::attention_backward<posenc::backend::scalar>(q, k, v, dout, opt).dq ==
        posenc::attention_backward(q, k, v, dout, opt).dq);
  posenc::no_gradient g;
  CHECK(posenc::multi_head_attention_backward<posenc::backend::scalar>(q, k, v, dout, 2, 2, opt,
                                                                       posenc::no_position{}, g)
            .dk == posenc::multi_head_attention_backward(q, k, v, dout, 2, 2, opt,
                                                         posenc::no_position_policy{}, g)
                       .dk);
  const posenc::flash_config threads{2};
  CHECK(posenc::flash_attention(q, k, v, opt, posenc::no_position{}, threads) ==
        posenc::flash_attention(q, k, v, opt));
}
