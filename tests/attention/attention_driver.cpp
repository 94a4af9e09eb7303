// A small driver for tests/reference/torch_parity.py: batched multi-head attention from
// .npy files, so a script can compare posenc with PyTorch.
//
//   attention_driver --q Q.npy --k K.npy --v V.npy --heads H --kv-heads G
//                    [--causal] [--q-offset P] [--key-lengths L.npy] [--alibi]
//                    [--dtype f32|f64] --out O.npy [--weights W.npy]
//
// Q [B, Lq, H·d], K [B, Lk, G·d], V [B, Lk, G·dv] (heads packed along the last axis, as a
// fused projection writes them); O [B, Lq, H·dv]; W [B, H, Lq, Lk]; L int64 [B].
// Exit status: 0 on success, 2 on bad arguments or files (message on stderr).

#include <cstdint>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <map>
#include <posenc/attention.hpp>
#include <posenc/io/npy.hpp>
#include <string>
#include <vector>

namespace {

using posenc::Index;

template <class T>
int run(const std::map<std::string, std::string>& a) {
  const auto q = posenc::io::read_npy<T>(a.at("--q"));
  const auto k = posenc::io::read_npy<T>(a.at("--k"));
  const auto v = posenc::io::read_npy<T>(a.at("--v"));
  const Index H = std::stoll(a.at("--heads")), G = std::stoll(a.at("--kv-heads"));
  if (q.rank() != 3 || k.rank() != 3 || v.rank() != 3)
    throw std::runtime_error("q, k, v must be rank 3");
  if (H < 1 || G < 1 || q.shape[2] % H != 0 || k.shape[2] % G != 0 || v.shape[2] % G != 0)
    throw std::runtime_error("head counts do not divide the last axes");
  const Index B = q.shape[0], Lq = q.shape[1], Lk = k.shape[1], d = q.shape[2] / H,
              dv = v.shape[2] / G;
  posenc::attention_config opt;
  opt.mask.causal = a.count("--causal") != 0;
  if (a.count("--q-offset")) opt.q_offset = std::stoll(a.at("--q-offset"));
  if (a.count("--key-lengths")) {
    const auto lens = posenc::io::read_npy<std::int64_t>(a.at("--key-lengths"));
    opt.mask.key_lengths.assign(lens.data.begin(), lens.data.end());
  }
  std::vector<T> out(static_cast<std::size_t>(B * Lq * H * dv)),
      w(static_cast<std::size_t>(B * H * Lq * Lk));
  const auto qv = posenc::view_bshd(q.data.data(), B, Lq, H, d);
  const auto kv = posenc::view_bshd(k.data.data(), B, Lk, G, k.shape[2] / G);
  const auto vv = posenc::view_bshd(v.data.data(), B, Lk, G, dv);
  const auto ov = posenc::view_bshd(out.data(), B, Lq, H, dv);
  const auto wv = posenc::strided_view<T, 4>::contiguous(w.data(), {B, H, Lq, Lk});
  if (a.count("--alibi"))
    posenc::multi_head_attention(qv, kv, vv, ov, opt, posenc::alibi_policy(H), &wv);
  else
    posenc::multi_head_attention(qv, kv, vv, ov, opt, posenc::no_position_policy{}, &wv);
  posenc::io::write_npy(a.at("--out"), out.data(), {B, Lq, H * dv});
  if (a.count("--weights")) posenc::io::write_npy(a.at("--weights"), w.data(), {B, H, Lq, Lk});
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> a;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    if (f == "--causal" || f == "--alibi")
      a[f] = "1";
    else if (i + 1 < argc)
      a[f] = argv[++i];
    else {
      std::cerr << "attention_driver: flag " << f << " needs a value\n";
      return 2;
    }
  }
  try {
    for (const char* req : {"--q", "--k", "--v", "--heads", "--kv-heads", "--out"})
      if (!a.count(req)) throw std::runtime_error(std::string("missing ") + req);
    const std::string dt = a.count("--dtype") ? a.at("--dtype") : "f64";
    if (dt == "f32") return run<float>(a);
    if (dt == "f64") return run<double>(a);
    throw std::runtime_error("--dtype must be f32 or f64");
  } catch (const std::exception& e) {
    std::cerr << "attention_driver: " << e.what() << "\n";
    return 2;
  }
}
