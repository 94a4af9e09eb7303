// Fuzz harness: the .safetensors reader (posenc/io/safetensors.hpp) on arbitrary bytes.
//
// The input is written to a file and opened with io::safetensors_file (the header parsed
// once) and with the free functions, which must accept and refuse the same files and
// agree: read_safetensors_header lists the tensors of names() and info(), in header order.
// Every tensor is then looked up and read: as double, as one more Scalar (chosen from the
// input's size and the tensor's place, so that each conversion is met across inputs) and
// as a float matrix; the first also through read_safetensors and read_safetensors_matrix,
// which must return the same values. A name the file does not have must be an error.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <posenc/io/safetensors.hpp>
#include <string>
#include <vector>

#include "fuzz_support.hpp"

namespace {

namespace io = posenc::io;

bool same_info(const io::safetensors_info& a, const io::safetensors_info& b) {
  return a.name == b.name && a.type == b.type && a.shape == b.shape && a.begin == b.begin &&
         a.end == b.end;
}

/// Reads tensor `info` as Scalar: a value that does not convert is an error, but what is
/// returned has the header's shape.
template <class Scalar>
void read_as(io::safetensors_file& f, const io::safetensors_info& info) {
  posenc_fuzz::guarded("safetensors_file::read", [&] {
    const io::tensor<Scalar> t = f.read<Scalar>(info.name);
    if (t.shape != info.shape || static_cast<posenc::Index>(t.data.size()) != t.size())
      posenc_fuzz::fail("safetensors_file::read", "the tensor differs from the header's shape");
  });
}

void read_one(io::safetensors_file& f, const io::safetensors_info& info, std::size_t choice) {
  switch (choice % 4) {
    case 0:
      read_as<float>(f, info);
      break;
    case 1:
      read_as<std::int64_t>(f, info);
      break;
    case 2:
      read_as<std::int32_t>(f, info);
      break;
    default:
      read_as<std::uint8_t>(f, info);
      break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static posenc_fuzz::input_file input("safetensors", ".safetensors");
  const std::string& path = input.write(data, size);

  std::unique_ptr<io::safetensors_file> file;
  const bool opened = posenc_fuzz::guarded(
      "safetensors_file", [&] { file = std::make_unique<io::safetensors_file>(path); });
  io::safetensors_header h;
  const bool valid = posenc_fuzz::guarded("read_safetensors_header",
                                          [&] { h = io::read_safetensors_header(path); });
  if (opened != valid)
    posenc_fuzz::fail("read_safetensors_header",
                      "accepts a file safetensors_file refuses, or the other way round");
  if (!valid) return 0;

  io::safetensors_file& f = *file;
  const std::vector<std::string> names = f.names();
  if (names.size() != h.tensors.size() || f.size() != h.tensors.size() ||
      f.header().tensors.size() != h.tensors.size() || f.header().data_start != h.data_start)
    posenc_fuzz::fail("safetensors_file", "not the tensors read_safetensors_header lists");
  for (std::size_t k = 0; k < names.size(); ++k) {
    const io::safetensors_info& info = h.tensors[k];
    if (names[k] != info.name || !f.contains(info.name) || !same_info(f.info(info.name), info) ||
        !same_info(f.header().tensors[k], info))
      posenc_fuzz::fail("safetensors_file", "names, lookup or entries differ from the header's");
    io::tensor<double> t;
    const bool got =
        posenc_fuzz::guarded("safetensors_file::read", [&] { t = f.read<double>(info.name); });
    if (got && t.shape != info.shape)
      posenc_fuzz::fail("safetensors_file::read", "the tensor differs from the header's shape");
    if (k == 0) {
      io::tensor<double> u;
      const bool got_too = posenc_fuzz::guarded(
          "read_safetensors", [&] { u = io::read_safetensors<double>(path, info.name); });
      if (got != got_too || (got && !posenc_fuzz::same_values(t, u)))
        posenc_fuzz::fail("read_safetensors", "differs from safetensors_file::read");
    }
    read_one(f, info, k + size);
    posenc_fuzz::guarded("safetensors_file::read_matrix",
                         [&] { (void)f.read_matrix<float>(info.name); });
    if (k == 0)
      posenc_fuzz::guarded("read_safetensors_matrix",
                           [&] { (void)io::read_safetensors_matrix<float>(path, info.name); });
  }

  // not a key of a valid header: a header's keys are valid UTF-8, this is not
  const std::string absent = "\xff";
  if (f.contains(absent) || posenc_fuzz::guarded("safetensors_file::info of an absent name",
                                                 [&] { (void)f.info(absent); }))
    posenc_fuzz::fail("safetensors_file", "found a tensor the header does not have");
  if (posenc_fuzz::guarded("read_safetensors of an absent name",
                           [&] { (void)io::read_safetensors<double>(path, absent); }))
    posenc_fuzz::fail("read_safetensors", "read a tensor the header does not have");
  return 0;
}
