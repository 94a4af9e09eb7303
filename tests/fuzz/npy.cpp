// Fuzz harness: the .npy reader (posenc/io/npy.hpp) on arbitrary bytes.
//
// The input is written to a file and read back by every entry point: read_npy_info,
// read_npy for each Scalar, read_npy_matrix. A file read as double is written again and
// must read back bit for bit (write_npy is numpy.save's format). A float32 read goes on
// to what `posenc rope` does with its --in file: rows [L, D] or [L, H, D] rotated with
// plain RoPE of head dim D at positions 0..L-1.

#include <cstddef>
#include <cstdint>
#include <posenc/encoding/rotary.hpp>
#include <posenc/io/npy.hpp>
#include <string>

#include "fuzz_support.hpp"

namespace {

/// `posenc rope --head-dim D --in X.npy` (examples/cli/cmd_rope.cpp): the rows of a rank-2
/// [L, D] or rank-3 [L, H, D] array rotated at positions 0..L-1, frequencies for L tokens.
void rotate_like_the_cli(posenc::io::tensor<float>& x) {
  if (x.shape.size() != 2 && x.shape.size() != 3) return;  // the CLI's usage error
  const posenc::Index len = x.shape[0];
  const posenc::Index width = x.shape.back();
  const posenc::Index heads = x.shape.size() == 3 ? x.shape[1] : 1;
  posenc::rope_config cfg;
  cfg.head_dim = width;
  posenc::rope_options opt;
  opt.cache = posenc::rope_cache_mode::on_the_fly;
  posenc::rotary_embedding<float> rope(cfg, len, opt);
  rope.apply(posenc::view_shd(x.data.data(), len, heads, width), posenc::Index(0));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace io = posenc::io;
  static posenc_fuzz::input_file file("npy", ".npy");
  static posenc_fuzz::input_file copy("npy-copy", ".npy");
  const std::string& path = file.write(data, size);

  posenc_fuzz::guarded("read_npy_info", [&] { (void)io::read_npy_info(path); });
  io::tensor<double> t;
  if (posenc_fuzz::guarded("read_npy<double>", [&] { t = io::read_npy<double>(path); })) {
    io::tensor<double> back;
    posenc_fuzz::must("write_npy and read_npy<double> of its file", [&] {
      io::write_npy(copy.path(), t);
      back = io::read_npy<double>(copy.path());
    });
    if (!posenc_fuzz::same_values(t, back))
      posenc_fuzz::fail("write_npy", "the written file does not read back as the same tensor");
  }
  posenc_fuzz::guarded("read_npy<std::int64_t>", [&] { (void)io::read_npy<std::int64_t>(path); });
  posenc_fuzz::guarded("read_npy<std::int32_t>", [&] { (void)io::read_npy<std::int32_t>(path); });
  posenc_fuzz::guarded("read_npy<std::uint8_t>", [&] { (void)io::read_npy<std::uint8_t>(path); });
  posenc_fuzz::guarded("read_npy_matrix<double>", [&] { (void)io::read_npy_matrix<double>(path); });
  posenc_fuzz::guarded("read_npy<float> and the rope CLI's rotation", [&] {
    io::tensor<float> x = io::read_npy<float>(path);
    rotate_like_the_cli(x);
  });
  return 0;
}
