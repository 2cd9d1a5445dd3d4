// Inputs for the codec tests: bf16 bytes with chosen high bytes, Gaussian bf16, round trips.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "common/codec/frame_codec.h"

namespace k3::codec::test {

// Little-endian bf16 bytes of `n` values: high byte from `hi(i)`, low byte random.
template <class Hi>
std::vector<uint8_t> Bf16Bytes(size_t n, Hi hi, uint32_t seed = 7) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> b(2 * n);
  for (size_t i = 0; i < n; ++i) {
    b[2 * i] = static_cast<uint8_t>(rng());
    b[2 * i + 1] = static_cast<uint8_t>(hi(i));
  }
  return b;
}

// N(0, sigma) rounded to bf16 (nearest, ties to even), as little-endian bytes.
inline std::vector<uint8_t> GaussianBf16(size_t n, double sigma, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> d(0.0, sigma);
  std::vector<uint8_t> b(2 * n);
  for (size_t i = 0; i < n; ++i) {
    const float f = static_cast<float>(d(rng));
    uint32_t u;
    std::memcpy(&u, &f, 4);
    u += 0x7FFFu + ((u >> 16) & 1u);
    b[2 * i] = static_cast<uint8_t>(u >> 16);
    b[2 * i + 1] = static_cast<uint8_t>(u >> 24);
  }
  return b;
}

inline bool HasAvx2() { return __builtin_cpu_supports("avx2"); }

}  // namespace k3::codec::test
