// The second translation unit of the consumer_strict_* tests: a program that writes a
// .safetensors file and nothing else, as in issue 26. g++ 12 -O2 -std=c++20 once reported a
// false -Warray-bounds (memmove) inside io::write_safetensors here, and only where the
// vector code it inlines has no other caller: in consumer_strict.cpp it stays silent.
#include <posenc/io/safetensors.hpp>

int main() {
  using matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const matrix wpe = matrix::Random(16, 8);
  posenc::io::write_safetensors("wpe.safetensors", {{"wpe.weight", wpe}}, {{"format", "pt"}});
  return 0;
}
