#pragma once
// Paths of committed golden files and of scratch files, and loaders for goldens.

#include <posenc/io/npy.hpp>
#include <string>

namespace posenc_test {

/// POSENC_TEST_DATA_DIR + "/" + file: a committed file under tests/data/.
inline std::string data_path(const std::string& file) {
  return std::string(POSENC_TEST_DATA_DIR) + "/" + file;
}

/// POSENC_TEST_TMP_DIR + "/" + file: a scratch file in the build tree.
inline std::string tmp_path(const std::string& file) {
  return std::string(POSENC_TEST_TMP_DIR) + "/" + file;
}

/// A golden `.npy` under tests/data/ as a row-major matrix (rank 1 reads as [1, n]).
template <class Scalar = double>
posenc::io::matrix<Scalar> golden_matrix(const std::string& file) {
  return posenc::io::read_npy_matrix<Scalar>(data_path(file));
}

/// A golden `.npy` under tests/data/ as an N-d tensor.
template <class Scalar = double>
posenc::io::tensor<Scalar> golden(const std::string& file) {
  return posenc::io::read_npy<Scalar>(data_path(file));
}

}  // namespace posenc_test
