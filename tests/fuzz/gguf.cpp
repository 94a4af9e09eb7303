// Fuzz harness: the GGUF reader (posenc/io/gguf.hpp) and the model config built from its
// metadata (posenc::model_config_from_gguf, posenc/encoding/rotary/model_config.hpp) on
// arbitrary bytes.
//
// The input is written to a file and opened with io::gguf_file. An accepted file must be
// self-consistent: each key and tensor name is found again by lookup, every array element
// decodes, every typed getter either answers or throws posenc::error, each tensor of a known
// type lies inside the file, and the unquantised tensors read with their header's shape. Its
// model config is then built (llama.cpp's pairing, and a given one) and its frequencies
// computed. Seeds: corpus/gguf/, written by make_gguf_inputs.py.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <posenc/encoding/rotary/model_config.hpp>
#include <posenc/io/gguf.hpp>
#include <string>
#include <vector>

#include "fuzz_support.hpp"

namespace {

namespace io = posenc::io;

/// Decodes every element of an array (and of the arrays inside it).
void walk(const io::gguf_value& v) {
  if (v.type != io::gguf_type::array) return;
  for (std::uint64_t k = 0; k < v.count; ++k) {
    const io::gguf_value e = v.element(k);
    if (e.type != v.element_type) posenc_fuzz::fail("gguf_value::element", "wrong element type");
    walk(e);
  }
}

void use_config(io::gguf_file& g) {
  posenc::model_config m;
  if (posenc_fuzz::guarded("model_config_from_gguf",
                           [&] { m = posenc::model_config_from_gguf(g); })) {
    if (m.num_attention_heads <= 0 || m.num_key_value_heads <= 0 || m.head_dim <= 0 ||
        m.num_attention_heads % m.num_key_value_heads != 0 || m.rotary_dim > m.head_dim)
      posenc_fuzz::fail("model_config_from_gguf", "accepted an inconsistent shape");
    posenc_fuzz::guarded("rope_config::frequencies", [&] {
      (void)m.rope.frequencies();
      if (m.max_position_embeddings > 0) (void)m.rope.frequencies(m.max_position_embeddings + 1);
    });
  }
  posenc_fuzz::guarded("model_config_from_gguf with a pairing", [&] {
    (void)posenc::model_config_from_gguf(g, posenc::rope_pairing::half);
  });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static posenc_fuzz::input_file input("gguf", ".gguf");
  const std::string& path = input.write(data, size);

  std::unique_ptr<io::gguf_file> file;
  if (!posenc_fuzz::guarded("gguf_file", [&] { file = std::make_unique<io::gguf_file>(path); }))
    return 0;
  io::gguf_file& g = *file;
  if (g.version() != 2 && g.version() != 3) posenc_fuzz::fail("gguf_file", "accepted a version");
  if (g.alignment() == 0 || g.data_start() % g.alignment() != 0)
    posenc_fuzz::fail("gguf_file", "data start off the alignment");

  for (const io::gguf_kv& kv : g.metadata()) {
    if (g.find(kv.key) != &kv.value) posenc_fuzz::fail("gguf_file::find", "lookup differs");
    walk(kv.value);
    posenc_fuzz::guarded("get_integer", [&] { (void)g.get_integer(kv.key); });
    posenc_fuzz::guarded("get_number", [&] { (void)g.get_number(kv.key); });
    posenc_fuzz::guarded("get_bool", [&] { (void)g.get_bool(kv.key); });
    posenc_fuzz::guarded("get_string", [&] { (void)g.get_string(kv.key); });
    posenc_fuzz::guarded("get_numbers", [&] { (void)g.get_numbers(kv.key); });
    posenc_fuzz::guarded("get_strings", [&] { (void)g.get_strings(kv.key); });
  }

  for (const io::gguf_tensor_info& t : g.tensors()) {
    if (g.find_tensor(t.name) != &t) posenc_fuzz::fail("gguf_file::find_tensor", "lookup differs");
    if (t.offset % g.alignment() != 0) posenc_fuzz::fail("gguf_file", "offset off the alignment");
    if (t.bytes && g.data_start() + t.offset + *t.bytes > size)
      posenc_fuzz::fail("gguf_file", "accepted a tensor past the end of the file");
    io::tensor<double> x;
    if (posenc_fuzz::guarded("gguf_file::read", [&] { x = g.read<double>(t.name); }) &&
        (x.shape != t.shape() || static_cast<posenc::Index>(x.data.size()) != x.size()))
      posenc_fuzz::fail("gguf_file::read", "the tensor differs from the header's shape");
  }
  use_config(g);
  return 0;
}
