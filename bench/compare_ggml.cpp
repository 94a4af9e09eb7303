// ggml's CPU kernels measured beside posenc's (issue 27): ggml_flash_attn_ext in decode
// shape (the kernel under llama.cpp's token generation) and ggml_rope_ext in place on q and
// k, timed the way bench_decode and bench_rope time posenc (one warm-up, then calls for at
// least 0.5 s, the median), with a correctness check of both against naive double loops.
// Not part of the CMake build (posenc does not depend on ggml); build it against a ggml
// checkout (CPU only, static, no OpenMP):
//
//   cmake -S ggml -B ggml-build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
//         -DBUILD_SHARED_LIBS=OFF -DGGML_BUILD_TESTS=OFF -DGGML_BUILD_EXAMPLES=OFF
//         -DGGML_OPENMP=OFF
//   cmake --build ggml-build -j2
//   g++ -O2 -march=native -std=c++17 -Iggml/include bench/compare_ggml.cpp \
//       ggml-build/src/libggml.a ggml-build/src/libggml-cpu.a ggml-build/src/libggml-base.a \
//       -lpthread -lm -o compare_ggml
//   ./compare_ggml check; ./compare_ggml decode; ./compare_ggml rope
//   ./compare_ggml check --token-major; ./compare_ggml decode --token-major
//
// decode: K/V f32 and f16, 4k / 16k / 64k keys, 8/8 and 32/8 heads, d = 128 (and 64 at
// 16k), 1 and 2 threads; GB/s of the unique K + V bytes (as bench_decode counts them).
// --token-major: K and V in llama.cpp's (and bench_decode's) token-major layout.
// rope: q and k [4096 tokens, 64 heads, 128] f32, mode 0 (interleaved pairs) and NEOX
// (half), 1 and 2 threads; G elements/s of q + k.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ggml-cpu.h"
#include "ggml.h"

using clk = std::chrono::steady_clock;

static double now_s() {
  return std::chrono::duration<double>(clk::now().time_since_epoch()).count();
}

// fast deterministic RNG, uniform in [-1, 1]
struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 1) {}
  inline float next() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return (float)((s >> 40) * (1.0 / 8388608.0)) - 1.0f;  // 24 bits -> [-1,1)
  }
};

static void fill_f32(float* p, size_t n, uint64_t seed) {
  Rng r(seed);
  for (size_t i = 0; i < n; ++i) p[i] = r.next();
}

static void fill_tensor(ggml_tensor* t, uint64_t seed) {
  const size_t n = ggml_nelements(t);
  if (t->type == GGML_TYPE_F32) {
    fill_f32((float*)t->data, n, seed);
  } else if (t->type == GGML_TYPE_F16) {
    const size_t blk = 1 << 16;
    std::vector<float> tmp(blk);
    ggml_fp16_t* dst = (ggml_fp16_t*)t->data;
    Rng r(seed);
    for (size_t i = 0; i < n; i += blk) {
      const size_t m = std::min(blk, n - i);
      for (size_t j = 0; j < m; ++j) tmp[j] = r.next();
      ggml_fp32_to_fp16_row(tmp.data(), dst + i, (int64_t)m);
    }
  } else {
    std::abort();
  }
}

// graph + threadpool + work buffer, built once per case
struct Runner {
  ggml_threadpool* tp = nullptr;
  ggml_cgraph* gf = nullptr;
  ggml_cplan plan{};
  std::vector<uint8_t> work;

  Runner(ggml_cgraph* g, int n_threads) : gf(g) {
    ggml_threadpool_params p = ggml_threadpool_params_default(n_threads);
    tp = ggml_threadpool_new(&p);
    if (!tp) {
      fprintf(stderr, "threadpool_new failed\n");
      std::exit(1);
    }
    plan = ggml_graph_plan(gf, n_threads, tp);
    if (plan.work_size > 0) {
      work.resize(plan.work_size);
      plan.work_data = work.data();
    }
  }
  ~Runner() { ggml_threadpool_free(tp); }

  void compute() {
    if (ggml_graph_compute(gf, &plan) != GGML_STATUS_SUCCESS) {
      fprintf(stderr, "ggml_graph_compute failed\n");
      std::exit(1);
    }
  }

  // one warm-up, then repeat until >= min_s and >= min_calls; returns median seconds/call
  double time_median(double min_s = 0.5, int min_calls = 5) {
    compute();
    std::vector<double> t;
    const double start = now_s();
    while ((int)t.size() < min_calls || now_s() - start < min_s) {
      const double t0 = now_s();
      compute();
      t.push_back(now_s() - t0);
    }
    std::sort(t.begin(), t.end());
    const size_t n = t.size();
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
  }
};

static ggml_context* make_ctx(size_t data_bytes, int n_tensors) {
  ggml_init_params ip;
  ip.mem_size = data_bytes + (size_t)n_tensors * (ggml_tensor_overhead() + 64) +
                ggml_graph_overhead() + (1 << 20);
  ip.mem_buffer = nullptr;
  ip.no_alloc = false;
  ggml_context* ctx = ggml_init(ip);
  if (!ctx) {
    fprintf(stderr, "ggml_init failed\n");
    std::exit(1);
  }
  return ctx;
}

// ---------------------------------------------------------------------------
// (A) flash attention, decode shape (1 query per head)
//   q   : [d, 1 (n_batch), heads,    1]  f32
//   k   : [d, keys,        kv_heads, 1]  f32|f16
//   v   : [d, keys,        kv_heads, 1]  f32|f16  (not transposed)
//   out : [d, heads, 1 (n_batch),    1]  f32     (permuted result)
struct AttnCase {
  ggml_context* ctx;
  ggml_tensor *q, *k, *v, *out;
  ggml_cgraph* gf;
};

// --token-major: K and V stored token by token ([d, kv_heads, keys], every head of a token
// side by side, the layout of llama.cpp's KV cache and of bench_decode's posenc rows) and
// handed to the kernel as the permuted view [d, keys, kv_heads], as llama.cpp does; else
// each head's keys contiguous ([d, keys, kv_heads] tensors).
static bool g_token_major = false;

static AttnCase build_attn(ggml_type kv_type, int keys, int heads, int kv_heads, int d) {
  const size_t es = ggml_type_size(kv_type);
  const size_t bytes = (size_t)d * heads * 4 * 2 + 2 * (size_t)d * keys * kv_heads * es + 4 * 256;
  AttnCase c;
  c.ctx = make_ctx(bytes, 8);
  c.q = ggml_new_tensor_4d(c.ctx, GGML_TYPE_F32, d, 1, heads, 1);
  fill_tensor(c.q, 1);
  if (g_token_major) {
    ggml_tensor* ks = ggml_new_tensor_3d(c.ctx, kv_type, d, kv_heads, keys);
    ggml_tensor* vs = ggml_new_tensor_3d(c.ctx, kv_type, d, kv_heads, keys);
    fill_tensor(ks, 2);
    fill_tensor(vs, 3);
    c.k = ggml_permute(c.ctx, ks, 0, 2, 1, 3);  // [d, keys, kv_heads], strided
    c.v = ggml_permute(c.ctx, vs, 0, 2, 1, 3);
  } else {
    c.k = ggml_new_tensor_4d(c.ctx, kv_type, d, keys, kv_heads, 1);
    c.v = ggml_new_tensor_4d(c.ctx, kv_type, d, keys, kv_heads, 1);
    fill_tensor(c.k, 2);
    fill_tensor(c.v, 3);
  }
  c.out = ggml_flash_attn_ext(c.ctx, c.q, c.k, c.v, /*mask*/ nullptr, 1.0f / std::sqrt((float)d),
                              /*max_bias*/ 0.0f, /*logit_softcap*/ 0.0f);
  ggml_flash_attn_ext_set_prec(c.out,
                               GGML_PREC_F32);  // as llama.cpp does (CPU: same path as default)
  c.gf = ggml_new_graph(c.ctx);
  ggml_build_forward_expand(c.gf, c.out);
  return c;
}

// element (i, j, g) of a K or V tensor [d, keys, kv_heads], contiguous or a permuted view
static float get_at(const ggml_tensor* t, int i, int j, int g) {
  const char* p = (const char*)t->data + i * t->nb[0] + j * t->nb[1] + g * t->nb[2];
  if (t->type == GGML_TYPE_F32) return *(const float*)p;
  return ggml_fp16_to_fp32(*(const ggml_fp16_t*)p);
}

// naive double reference: out[h][:] = softmax(q_h . K_g^T * scale) V_g, g = h / (heads/kv_heads)
static double attn_check_one(ggml_type kv_type, int keys, int heads, int kv_heads, int d,
                             int threads) {
  AttnCase c = build_attn(kv_type, keys, heads, kv_heads, d);
  {
    Runner r(c.gf, threads);
    r.compute();
  }
  const double scale = 1.0 / std::sqrt((double)d);
  const int grp = heads / kv_heads;
  const float* q = (const float*)c.q->data;
  const float* o = (const float*)c.out->data;
  double max_err = 0.0;
  std::vector<double> s(keys), acc(d);
  for (int h = 0; h < heads; ++h) {
    const int g = h / grp;
    const float* qh = q + (size_t)h * d;  // q->nb[2] == d*4 since ne1 == 1
    double m = -INFINITY;
    for (int j = 0; j < keys; ++j) {
      double dot = 0;
      for (int i = 0; i < d; ++i) dot += (double)qh[i] * get_at(c.k, i, j, g);
      s[j] = dot * scale;
      m = std::max(m, s[j]);
    }
    double sum = 0;
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int j = 0; j < keys; ++j) {
      const double p = std::exp(s[j] - m);
      sum += p;
      for (int i = 0; i < d; ++i) acc[i] += p * get_at(c.v, i, j, g);
    }
    for (int i = 0; i < d; ++i) {
      // result [d, heads, 1, 1]: element (i, h) at h*d + i
      const double ref = acc[i] / sum;
      max_err = std::max(max_err, std::fabs(ref - (double)o[(size_t)h * d + i]));
    }
  }
  ggml_free(c.ctx);
  return max_err;
}

static void run_check_attn() {
  struct {
    ggml_type t;
    int keys, heads, kvh, d, th;
  } cs[] = {
      {GGML_TYPE_F32, 300, 8, 8, 64, 1},  // required case (keys < 512: per-head path)
      {GGML_TYPE_F32, 300, 32, 8, 64, 1},
      {GGML_TYPE_F32, 300, 8, 8, 64, 2},
      {GGML_TYPE_F32, 300, 32, 8, 64, 2},
      {GGML_TYPE_F32, 1000, 8, 8, 64, 2},  // keys >= 512: split-KV decode path + reduction
      {GGML_TYPE_F32, 1000, 32, 8, 64, 2},
      {GGML_TYPE_F16, 300, 32, 8, 64, 1},
      {GGML_TYPE_F16, 1000, 32, 8, 64, 2},
  };
  for (auto& x : cs) {
    const double e = attn_check_one(x.t, x.keys, x.heads, x.kvh, x.d, x.th);
    printf("check decode %s keys=%d heads=%d/%d d=%d threads=%d max_abs_err=%.3e\n",
           x.t == GGML_TYPE_F32 ? "f32" : "f16", x.keys, x.heads, x.kvh, x.d, x.th, e);
    fflush(stdout);
  }
}

static void bench_decode(ggml_type kv_type, int keys, int heads, int kv_heads, int d, int threads) {
  AttnCase c = build_attn(kv_type, keys, heads, kv_heads, d);
  double med;
  {
    Runner r(c.gf, threads);
    med = r.time_median();
  }
  const double gbs = 2.0 * keys * kv_heads * d * ggml_type_size(kv_type) / med / 1e9;
  printf("ggml decode %s keys=%d heads=%d/%d d=%d threads=%d median_ms=%.4f GB/s=%.2f layout=%s\n",
         kv_type == GGML_TYPE_F32 ? "f32" : "f16", keys, heads, kv_heads, d, threads, med * 1e3,
         gbs, g_token_major ? "token" : "head");
  fflush(stdout);
  ggml_free(c.ctx);
}

// ---------------------------------------------------------------------------
// (B) RoPE in place on q and k: [d=128, heads=64, tokens=4096] f32, pos = 0..4095
static const int RD = 128, RH = 64, RT = 4096;

struct RopeCase {
  ggml_context* ctx;
  ggml_tensor *q, *k, *pos, *rq, *rk;
  ggml_cgraph* gf;
};

static RopeCase build_rope(int mode) {
  const size_t n = (size_t)RD * RH * RT;
  RopeCase c;
  c.ctx = make_ctx(2 * n * 4 + RT * 4 + 4096, 8);
  c.q = ggml_new_tensor_3d(c.ctx, GGML_TYPE_F32, RD, RH, RT);
  c.k = ggml_new_tensor_3d(c.ctx, GGML_TYPE_F32, RD, RH, RT);
  c.pos = ggml_new_tensor_1d(c.ctx, GGML_TYPE_I32, RT);
  fill_tensor(c.q, 11);
  fill_tensor(c.k, 12);
  for (int t = 0; t < RT; ++t) ((int32_t*)c.pos->data)[t] = t;
  // freq_base 10000, freq_scale 1, ext_factor 0 (no YaRN), attn_factor 1, beta_fast 32, beta_slow
  // 1, n_ctx_orig 0
  c.rq = ggml_rope_ext_inplace(c.ctx, c.q, c.pos, nullptr, RD, mode, 0, 10000.0f, 1.0f, 0.0f, 1.0f,
                               32.0f, 1.0f);
  c.rk = ggml_rope_ext_inplace(c.ctx, c.k, c.pos, nullptr, RD, mode, 0, 10000.0f, 1.0f, 0.0f, 1.0f,
                               32.0f, 1.0f);
  c.gf = ggml_new_graph(c.ctx);
  ggml_build_forward_expand(c.gf, c.rq);
  ggml_build_forward_expand(c.gf, c.rk);
  return c;
}

static const char* rope_name(int mode) {
  return mode == GGML_ROPE_TYPE_NEOX ? "neox" : "interleaved";
}

static void run_check_rope(int mode) {
  RopeCase c = build_rope(mode);
  const int toks[] = {0, 1, 7, 100, 1000, 4095};
  const size_t row = (size_t)RD * RH;
  std::vector<float> q0, k0;
  for (int t : toks) {
    q0.insert(q0.end(), (float*)c.q->data + t * row, (float*)c.q->data + (t + 1) * row);
    k0.insert(k0.end(), (float*)c.k->data + t * row, (float*)c.k->data + (t + 1) * row);
  }
  {
    Runner r(c.gf, 2);
    r.compute();
  }
  double max_err = 0.0;
  std::string per_tok;
  for (size_t ti = 0; ti < sizeof(toks) / sizeof(toks[0]); ++ti) {
    const int t = toks[ti];
    const double prev_max = max_err;
    max_err = 0.0;
    for (int which = 0; which < 2; ++which) {
      const float* x0 = (which ? k0.data() : q0.data()) + ti * row;
      const float* x1 = (const float*)(which ? c.k->data : c.q->data) + t * row;
      for (int h = 0; h < RH; ++h) {
        const float* a = x0 + h * RD;
        const float* b = x1 + h * RD;
        for (int i = 0; i < RD / 2; ++i) {
          const double th = t * std::pow(10000.0, -2.0 * i / RD);
          const double cs = std::cos(th), sn = std::sin(th);
          const int i0 = mode == GGML_ROPE_TYPE_NEOX ? i : 2 * i;
          const int i1 = mode == GGML_ROPE_TYPE_NEOX ? i + RD / 2 : 2 * i + 1;
          const double r0 = a[i0] * cs - a[i1] * sn;
          const double r1 = a[i0] * sn + a[i1] * cs;
          max_err = std::max(max_err, std::fabs(r0 - b[i0]));
          max_err = std::max(max_err, std::fabs(r1 - b[i1]));
        }
      }
    }
    char buf[64];
    snprintf(buf, sizeof buf, " pos%d:%.1e", t, max_err);
    per_tok += buf;
    max_err = std::max(max_err, prev_max);
  }
  printf(
      "check rope %s tokens={0,1,7,100,1000,4095} all heads, q+k max_abs_err=%.3e (per pos:%s)\n",
      rope_name(mode), max_err, per_tok.c_str());
  fflush(stdout);
  ggml_free(c.ctx);
}

static void bench_rope(int mode, int threads) {
  RopeCase c = build_rope(mode);
  double med;
  {
    Runner r(c.gf, threads);
    med = r.time_median();
  }
  const double ge = 2.0 * RT * RH * RD / med / 1e9;
  printf("ggml rope %s threads=%d median_ms=%.4f Gelem/s=%.3f\n", rope_name(mode), threads,
         med * 1e3, ge);
  fflush(stdout);
  ggml_free(c.ctx);
}

// ---------------------------------------------------------------------------
int main(int argc, char** argv) {
  std::string what = "all";
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--quick")
      quick = true;
    else if (a == "--token-major")
      g_token_major = true;
    else if (a == "decode" || a == "rope" || a == "check" || a == "all")
      what = a;
    else {
      fprintf(stderr, "usage: %s [decode|rope|check|all] [--quick] [--token-major]\n", argv[0]);
      return 2;
    }
  }
  ggml_cpu_init();
  const double t_start = now_s();

  if (what == "check" || what == "all") {
    run_check_attn();
    run_check_rope(0);
    run_check_rope(GGML_ROPE_TYPE_NEOX);
  }
  if (what == "decode" || what == "all") {
    if (quick) {
      for (int th : {1, 2}) bench_decode(GGML_TYPE_F32, 16384, 8, 8, 128, th);
    } else {
      for (ggml_type t : {GGML_TYPE_F32, GGML_TYPE_F16})
        for (int keys : {4096, 16384, 65536})
          for (auto hk : {std::make_pair(8, 8), std::make_pair(32, 8)})
            for (int d : {128, 64}) {
              if (d == 64 && keys != 16384) continue;
              for (int th : {1, 2}) bench_decode(t, keys, hk.first, hk.second, d, th);
            }
    }
  }
  if (what == "rope" || what == "all") {
    if (quick) {
      bench_rope(0, 1);
    } else {
      for (int mode : {0, GGML_ROPE_TYPE_NEOX})
        for (int th : {1, 2}) bench_rope(mode, th);
    }
  }
  fprintf(stderr, "total wall time %.1f s\n", now_s() - t_start);
  return 0;
}
