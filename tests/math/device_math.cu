// The maths layer is written once for host and device (POSENC_HOST_DEVICE): this file
// calls every function of include/posenc/math from a CUDA kernel, so that nvcc proves
// they compile as device code (CTest math_device_compile, when nvcc is found; CI has no
// GPU, so it compiles and does not run).
#include <posenc/math/alibi.hpp>
#include <posenc/math/clip.hpp>
#include <posenc/math/frequency.hpp>
#include <posenc/math/rotation.hpp>
#include <posenc/math/softmax.hpp>
#include <posenc/math/t5_bucket.hpp>

namespace pm = posenc::math;

__global__ void every_math_function(const long long* p, double* out) {
  const long long i = p[threadIdx.x];
  double c = 0, s = 0, ya = 0, yb = 0;
  const double w = pm::inv_freq(10000.0, i, 128) + pm::base_power(500000.0, i, 128) +
                   pm::log_spaced_freq(1.0, 0.1, i);
  pm::rope_cos_sin(pm::angle(i, w), 1.0, c, s);
  pm::rotate_pair(c, s, c, s, ya, yb);
  pm::rotate_pair_fused(ya, yb, c, s, ya, yb);
  float fs = 0, fc = 0;
  pm::angle_sum(0.5f, 0.25f, 0.125f, 0.75f, fs, fc);
  const double bias = pm::alibi_bias(pm::alibi_slope(i % 12, 12, 8.0), i - 3, i % 2 == 0) +
                      static_cast<double>(pm::alibi_reference(i, 40, true));
  const long long bucket = pm::t5_bucket(i - 64, 32, 128, true) + pm::clip_row(i - 5, 4, 2);
  const float r = pm::rescale(1.0f, 2.0f) * pm::inverse_sum<float>(static_cast<double>(i + 1));
  out[threadIdx.x] = ya + yb + fs + fc + bias + static_cast<double>(bucket) + r;
}
