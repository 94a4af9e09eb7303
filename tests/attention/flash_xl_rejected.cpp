// Must NOT compile: Transformer-XL's position term is reference-only in the tiled kernel,
// and the static_assert says so (tests/attention/CMakeLists.txt checks the message).
#include <posenc/attention/flash.hpp>
#include <posenc/encoding/transformer_xl.hpp>

int main() {
  using fmat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const fmat q = fmat::Ones(4, 8);
  const posenc::transformer_xl_policy<float> xl(1, 8);
  return static_cast<int>(posenc::flash_attention(q, q, q, {}, xl).size());
}
