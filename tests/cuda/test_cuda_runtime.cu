// The CUDA runtime layer (backend/cuda/runtime.cuh): buffers, copies of Eigen matrices,
// errors as posenc::error, the device error flag.
#include <posenc/cuda.cuh>
#include <string>
#include <vector>

#include "support/catch.hpp"

namespace pc = posenc::cuda;
using posenc::Index;

namespace {

__global__ void report_indices(unsigned long long* flag, const Index* bad, int count) {
  const int i = static_cast<int>(threadIdx.x);
  if (i < count) pc::report_bad_index(flag, bad[i]);
}

__global__ void never_launched(int*) {}

bool message_has(const posenc::error& e, const std::string& part) {
  return std::string(e.what()).find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("cuda runtime: an Eigen matrix goes to the device and back row-major, bit for bit") {
  // column-major on the host: to_device stores it row-major, one token per row
  const Eigen::MatrixXf host = Eigen::MatrixXf::Random(37, 19);
  auto d = pc::to_device(host);
  REQUIRE(d.size() == 37 * 19);
  const posenc::row_matrix<float> back = pc::to_host(d, 37, 19);
  CHECK((back.array() == host.array()).all());
  // a device-to-device round trip through a second buffer
  pc::device_buffer<float> copy(d.size());
  pc::check(cudaMemcpy(copy.data(), d.data(), d.bytes(), cudaMemcpyDeviceToDevice), "cudaMemcpy");
  CHECK((pc::to_host(copy, 37, 19).array() == host.array()).all());
  // zero() clears
  copy.zero();
  CHECK((pc::to_host(copy, 37, 19).array() == 0.0f).all());
}

TEST_CASE("cuda runtime: buffers move, resize and refuse bad sizes") {
  pc::device_buffer<double> a(10);
  const double* p = a.data();
  pc::device_buffer<double> b(std::move(a));
  CHECK(b.data() == p);
  CHECK(a.empty());
  CHECK(a.data() == nullptr);
  b.resize(0);
  CHECK(b.empty());
  pc::device_buffer<float> e;
  CHECK(e.size() == 0);
  CHECK_THROWS_WITH(pc::device_buffer<float>(-3),
                    "posenc::cuda::device_buffer: count = -3: must be >= 0");
  CHECK_THROWS_AS(pc::copy_to_device(b.data(), static_cast<const double*>(nullptr), -1),
                  posenc::error);
  // to_host of more than the buffer holds is refused before any copy
  pc::device_buffer<float> small(6);
  CHECK_THROWS_AS(pc::to_host(small, 3, 4), posenc::error);
  // an impossible allocation is a posenc::error naming cudaMalloc and the CUDA message
  try {
    pc::device_buffer<char> huge(Index(1) << 62);
    FAIL("allocated 4 EiB");
  } catch (const posenc::error& err) {
    CHECK(message_has(err, "posenc::cuda: cudaMalloc: "));
    CHECK(message_has(err, "cudaErrorMemoryAllocation"));
  }
}

TEST_CASE("cuda runtime: CUDA errors and launch failures become posenc::error") {
  CHECK_THROWS_WITH(pc::check(cudaErrorInvalidValue, "cudaSomething"),
                    std::string("posenc::cuda: cudaSomething: ") +
                        cudaGetErrorString(cudaErrorInvalidValue) + " (cudaErrorInvalidValue)");
  CHECK_NOTHROW(pc::check(cudaSuccess, "fine"));
  // 4096 threads per block is more than any device allows
  never_launched<<<1, 4096>>>(nullptr);
  try {
    pc::check_launch("never_launched");
    FAIL("the launch did not fail");
  } catch (const posenc::error& err) {
    CHECK(message_has(err, "launch of never_launched"));
  }
  CHECK(pc::device_count() >= 1);
}

TEST_CASE("cuda runtime: the error flag keeps the smallest reported index") {
  pc::error_flag flag;
  flag.arm(nullptr);
  CHECK(flag.first_bad(nullptr) == -1);
  const std::vector<Index> bad = {17, 5, 40, 5, 9};
  pc::device_buffer<Index> d(static_cast<Index>(bad.size()));
  pc::copy_to_device(d.data(), bad.data(), d.size());
  report_indices<<<1, 32>>>(flag.device(), d.data(), static_cast<int>(bad.size()));
  pc::check_launch("report_indices");
  CHECK(flag.first_bad(nullptr) == 5);
  // arm() resets it
  flag.arm(nullptr);
  CHECK(flag.first_bad(nullptr) == -1);
}

TEST_CASE("cuda runtime: an error already thrown is not blamed on the next launch") {
  // the failed allocation is reported by check(); a later check_launch must not see it
  CHECK_THROWS_AS(pc::device_buffer<char>(Index(1) << 62), posenc::error);
  pc::error_flag flag;
  flag.arm(nullptr);
  const std::vector<Index> bad = {3};
  auto d = pc::device_buffer<Index>(1);
  pc::copy_to_device(d.data(), bad.data(), 1);
  report_indices<<<1, 32>>>(flag.device(), d.data(), 1);
  CHECK_NOTHROW(pc::check_launch("report_indices"));
  CHECK(flag.first_bad(nullptr) == 3);
}
