// AVX2+FMA bodies of the dense and MXFP4 products. Compiled with -mavx2 -mfma (this file only)
// and reached only through the run-time dispatch in matmul.cpp.
//
// Determinism: every (token, row) output uses the same accumulators and the same instruction
// sequence whatever block of rows/tokens it is computed in; the templates below only change
// how many independent outputs are interleaved, never the arithmetic of one of them.
// Keep this file free of std:: templates and other inline library code (see kernels_detail.h).
#include <immintrin.h>

#include "dense_body.h"
#include "kernels_detail.h"
#include "simd_helpers.h"

namespace k3::kern::detail {
namespace {

// 32 E2M1 codes (16 bytes, element 2j in the low nibble of byte j) -> four vectors of 8
// floats, each equal to 2^25 times the E2M1 value. Steps, chosen to spread the work over the
// shuffle and the plain integer units:
//  - both 128-bit halves get the 16 bytes; the low half keeps the low nibbles (even elements),
//    the high half the high nibbles (odd elements);
//  - pshufb looks up 2*E2M1, an exact int8 (0,1,2,3,4,6,8,12 and negatives);
//  - vector j takes byte j of every dword into the dword's top byte with zeros below (a shift,
//    a pshufb or an AND), so the int32 is value * 2^24 with the right sign and the
//    int->float convert is exact.
// Vector j holds elements {0,8,16,24,1,9,17,25} + 2j; x is permuted the same way (PermuteX).
inline void Decode32(const uint8_t* p, __m256i lut, __m256i low4, __m256i shift, const __m256i spread[4],
                     __m256 w[4]) {
  const __m256i b = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m256i codes = _mm256_and_si256(_mm256_srlv_epi32(b, shift), low4);
  const __m256i v = _mm256_shuffle_epi8(lut, codes);
  w[0] = _mm256_cvtepi32_ps(_mm256_slli_epi32(v, 24));
  w[1] = _mm256_cvtepi32_ps(_mm256_shuffle_epi8(v, spread[1]));
  w[2] = _mm256_cvtepi32_ps(_mm256_shuffle_epi8(v, spread[2]));
  w[3] = _mm256_cvtepi32_ps(_mm256_and_si256(v, spread[3]));
}

// Decoded values carry 2 (doubling) * 2^24 (top byte). PermuteX takes the factor out of x
// (a power-of-two multiply, exact unless |x| < 2^-101), which saves a multiply per group.
constexpr float kDecodeUnscale = 1.0f / 33554432.0f;  // 2^-25

// Per-group constants of Decode32, built once per row block.
struct DecodeConsts {
  __m256i lut, low4, shift, spread[4];
  DecodeConsts() {
    lut = _mm256_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12,
                           0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
    low4 = _mm256_set1_epi8(0x0F);
    shift = _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4);
    for (int j = 1; j <= 2; ++j) {  // byte j of each dword -> its top byte; -1: pshufb writes 0
      const char c = static_cast<char>(j);
      spread[j] = _mm256_setr_epi8(-1, -1, -1, c, -1, -1, -1, c + 4, -1, -1, -1, c + 8, -1, -1, -1, c + 12,
                                   -1, -1, -1, c, -1, -1, -1, c + 4, -1, -1, -1, c + 8, -1, -1, -1, c + 12);
    }
    spread[0] = _mm256_setzero_si256();              // unused (a shift)
    spread[3] = _mm256_set1_epi32(int32_t(0xFF000000u));  // an AND mask
  }
};

// Group g of one row against NT tokens: one FMA chain over the group's 32-column blocks (the
// group scale is applied by the caller). Same arithmetic as the 32-wide case below.
template <int NT>
inline void GroupSums(const uint8_t* pr, int64_t g, int64_t cols, int64_t group, const DecodeConsts& k,
                      const float* x, __m256 out[NT]) {
  const int64_t c0 = g * group;
  __m256 w[4];
  Decode32(pr + c0 / 2, k.lut, k.low4, k.shift, k.spread, w);
  for (int j = 0; j < NT; ++j) out[j] = _mm256_mul_ps(w[0], _mm256_loadu_ps(x + j * cols + c0));
  for (int64_t c = c0; c < c0 + group; c += 32) {
    if (c > c0) Decode32(pr + c / 2, k.lut, k.low4, k.shift, k.spread, w);
    for (int j = 0; j < NT; ++j) {
      const float* xs = x + j * cols + c;
      if (c > c0) out[j] = _mm256_fmadd_ps(w[0], _mm256_loadu_ps(xs), out[j]);
      out[j] = _mm256_fmadd_ps(w[1], _mm256_loadu_ps(xs + 8), out[j]);
      out[j] = _mm256_fmadd_ps(w[2], _mm256_loadu_ps(xs + 16), out[j]);
      out[j] = _mm256_fmadd_ps(w[3], _mm256_loadu_ps(xs + 24), out[j]);
    }
  }
}

// acc[j] += scale * (sum of group g for token j). For 32-wide groups (all of K3) each token's
// partial sums are finished before the next token's start, which keeps the register count low
// enough for NT = 4 without spilling; the arithmetic per token is the same as GroupSums.
template <int NT, bool kGroup32>
inline void GroupAccumulate(const uint8_t* pr, int64_t g, int64_t cols, int64_t group, float s,
                            const DecodeConsts& k, const float* x, __m256 acc[NT]) {
  const __m256 sv = _mm256_set1_ps(s);
  if (!kGroup32) {
    __m256 gs[NT];
    GroupSums<NT>(pr, g, cols, group, k, x, gs);
    for (int j = 0; j < NT; ++j) acc[j] = _mm256_fmadd_ps(gs[j], sv, acc[j]);
    return;
  }
  const int64_t c0 = g * 32;
  __m256 w[4];
  Decode32(pr + c0 / 2, k.lut, k.low4, k.shift, k.spread, w);
  for (int j = 0; j < NT; ++j) {
    const float* xs = x + j * cols + c0;
    __m256 p = _mm256_mul_ps(w[0], _mm256_loadu_ps(xs));
    p = _mm256_fmadd_ps(w[1], _mm256_loadu_ps(xs + 8), p);
    p = _mm256_fmadd_ps(w[2], _mm256_loadu_ps(xs + 16), p);
    p = _mm256_fmadd_ps(w[3], _mm256_loadu_ps(xs + 24), p);
    acc[j] = _mm256_fmadd_ps(p, sv, acc[j]);
  }
}

// One MXFP4 row against NT tokens (x already permuted), groups [g0, g1) with g0 even. Each
// group's sum, times its scale, goes into one of two running accumulators (even/odd group, to
// hide the FMA latency); the loop is unrolled by two so both stay in registers. Decoding is
// shared by the NT tokens. Accumulators start from / are saved to `st` ([NT][2], nullptr =
// start from zero) exactly as in DotBlock; with `last` the result is reduced into y.
template <int NT, bool kGroup32>
void Mxfp4Block(const uint8_t* pr, const uint8_t* sr, int64_t cols, int64_t group,
                const float* scale, const DecodeConsts& k, const float* x, int64_t g0, int64_t g1,
                __m256* st, bool last, float* y, int64_t rows) {
  __m256 even[NT], odd[NT];
  for (int j = 0; j < NT; ++j) {
    even[j] = st ? st[2 * j] : _mm256_setzero_ps();
    odd[j] = st ? st[2 * j + 1] : _mm256_setzero_ps();
  }
  int64_t g = g0;
  for (; g + 2 <= g1; g += 2) {
    GroupAccumulate<NT, kGroup32>(pr, g, cols, group, scale[sr[g]], k, x, even);
    GroupAccumulate<NT, kGroup32>(pr, g + 1, cols, group, scale[sr[g + 1]], k, x, odd);
  }
  if (g < g1) GroupAccumulate<NT, kGroup32>(pr, g, cols, group, scale[sr[g]], k, x, even);  // last chunk only
  if (!last) {
    for (int j = 0; j < NT; ++j) {
      st[2 * j] = even[j];
      st[2 * j + 1] = odd[j];
    }
    return;
  }
  for (int j = 0; j < NT; ++j) y[j * rows] = HSum(_mm256_add_ps(even[j], odd[j]));
}

// One row of a 32-group MXFP4 matrix against one token: the arithmetic of Mxfp4Block<1, true>
// (same accumulators, same order) with plain pointer steps, which measured ~5% faster at T = 1
// than the general block. (Interleaving two rows spills registers and is slower.)
// It also prefetches the packed bytes kMxfp4Ahead bytes ahead, once per 64-byte line: the
// expert slots live in shared memory filled by another process, and the hardware prefetcher
// alone left the loads waiting (most samples on the load; measured in the pipeline at all
// resident, 2-vCPU machine: 5-14 ms less per token with 1 KiB, alternating tokens in one run;
// 2 KiB gained less; the same prefetch in the bf16 body cost 20 ms and is not done).
constexpr int64_t kMxfp4Ahead = 1024;
float Mxfp4RowT1(const uint8_t* p, const uint8_t* s, int64_t ngroups, const float* scale,
                 const DecodeConsts& k, const float* x) {
  __m256 even = _mm256_setzero_ps(), odd = _mm256_setzero_ps();
  const auto group = [&k](const uint8_t* pg, float sc, const float* xs, __m256& acc) {
    __m256 w[4];
    Decode32(pg, k.lut, k.low4, k.shift, k.spread, w);
    __m256 q = _mm256_mul_ps(w[0], _mm256_loadu_ps(xs));
    q = _mm256_fmadd_ps(w[1], _mm256_loadu_ps(xs + 8), q);
    q = _mm256_fmadd_ps(w[2], _mm256_loadu_ps(xs + 16), q);
    q = _mm256_fmadd_ps(w[3], _mm256_loadu_ps(xs + 24), q);
    acc = _mm256_fmadd_ps(q, _mm256_set1_ps(sc), acc);
  };
  int64_t g = 0;
  for (; g + 2 <= ngroups; g += 2, p += 32, x += 64) {
    if ((reinterpret_cast<uintptr_t>(p) & 32) == 0) _mm_prefetch(reinterpret_cast<const char*>(p) + kMxfp4Ahead, _MM_HINT_T0);
    group(p, scale[s[g]], x, even);
    group(p + 16, scale[s[g + 1]], x + 32, odd);
  }
  if (g < ngroups) group(p, scale[s[g]], x, even);
  return HSum(_mm256_add_ps(even, odd));
}

// Mxfp4Block for a run-time token count of 1..4.
template <bool kGroup32>
void Mxfp4Tokens(int nt, const uint8_t* pr, const uint8_t* sr, int64_t cols, int64_t group,
                 const float* scale, const DecodeConsts& k, const float* x, int64_t g0, int64_t g1,
                 __m256* st, bool last, float* y, int64_t rows) {
  switch (nt) {
    case 4: Mxfp4Block<4, kGroup32>(pr, sr, cols, group, scale, k, x, g0, g1, st, last, y, rows); break;
    case 3: Mxfp4Block<3, kGroup32>(pr, sr, cols, group, scale, k, x, g0, g1, st, last, y, rows); break;
    case 2: Mxfp4Block<2, kGroup32>(pr, sr, cols, group, scale, k, x, g0, g1, st, last, y, rows); break;
    default: Mxfp4Block<1, kGroup32>(pr, sr, cols, group, scale, k, x, g0, g1, st, last, y, rows); break;
  }
}

// Reorders x inside each block of 32 to the lane order of Decode32 (position 8j + d holds
// element {0,8,16,24,1,9,17,25}[d] + 2j) and multiplies it by kDecodeUnscale. n % 32 == 0.
void PermuteX(const float* x, int64_t n, float* out) {
  for (int64_t b = 0; b < n; b += 32) {
    for (int j = 0; j < 4; ++j) {
      for (int d = 0; d < 8; ++d) {
        const int e = (d < 4 ? 8 * d : 8 * (d - 4) + 1) + 2 * j;
        out[b + 8 * j + d] = x[b + e] * kDecodeUnscale;
      }
    }
  }
}

}  // namespace

void DenseAvx2(const void* w, bool bf16, int64_t rows, int64_t cols, const float* x, int64_t T,
               float* x_split, float* y) {
  if (bf16) SplitX(x, T, cols, x_split);  // once per call: x is reused by every row
  const int64_t nblocks = (rows + kRowBlock - 1) / kRowBlock;
  const bool parallel = rows * cols * T >= kParallelMinWork;
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t b = 0; b < nblocks; ++b) {
    const int64_t r0 = b * kRowBlock, r1 = Min(rows, r0 + kRowBlock);
    if (bf16) {
      DotRows<Bf16W>(static_cast<const uint16_t*>(w), r0, r1, cols, x_split, Bf16XStride(cols), T, y, rows);
    } else {
      DotRows<F32W>(static_cast<const float*>(w), r0, r1, cols, x, cols, T, y, rows);
    }
  }
}

void Mxfp4Avx2(const uint8_t* packed, const uint8_t* scales, int64_t rows, int64_t cols,
               int64_t group, const float* scale, const float* x_in, int64_t T, float* x_perm,
               float* y) {
  PermuteX(x_in, T * cols, x_perm);  // cols % 32 == 0, so blocks of 8 never straddle tokens
  const float* x = x_perm;
  const int64_t nblocks = (rows + kRowBlock - 1) / kRowBlock;
  const int64_t ngroups = cols / group;
  const bool parallel = rows * cols * T >= kParallelMinWork;
  // Column chunks of an even number of groups (~512 columns) keep the even/odd accumulator
  // assignment by absolute group index.
  const int64_t chunk = (kColChunk / group) >= 2 ? (kColChunk / group) & ~int64_t{1} : 2;
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t b = 0; b < nblocks; ++b) {
    const DecodeConsts k;
    const int64_t r0 = b * kRowBlock, r1 = Min(rows, r0 + kRowBlock);
    if (T == 1) {
      for (int64_t r = r0; r < r1; ++r) {
        const uint8_t* pr = packed + r * (cols / 2);
        const uint8_t* sr = scales + r * ngroups;
        if (group == 32) {
          y[r] = Mxfp4RowT1(pr, sr, ngroups, scale, k, x);
        } else {
          Mxfp4Block<1, false>(pr, sr, cols, group, scale, k, x, 0, ngroups, nullptr, true, y + r, rows);
        }
      }
      continue;
    }
    // Several tokens: as in DotRows, x for kTokChunk tokens and one column chunk stays in
    // L1 while the block's rows pass over it.
    __m256 st[kRowBlock * kTokChunk * 2];
    for (int64_t tc = 0; tc < T; tc += kTokChunk) {
      const int64_t tend = Min(T, tc + kTokChunk);
      for (auto& v : st) v = _mm256_setzero_ps();
      for (int64_t g0 = 0; g0 < ngroups; g0 += chunk) {
        const int64_t g1 = Min(ngroups, g0 + chunk);
        const bool last = g1 == ngroups;
        for (int64_t r = r0; r < r1; ++r) {
          const uint8_t* pr = packed + r * (cols / 2);
          const uint8_t* sr = scales + r * ngroups;
          for (int64_t t = tc; t < tend; t += 4) {
            const float* xt = x + t * cols;
            float* yt = y + t * rows + r;
            __m256* s = st + ((r - r0) * kTokChunk + (t - tc)) * 2;
            const int nt = static_cast<int>(Min(4, tend - t));
            if (group == 32) {
              Mxfp4Tokens<true>(nt, pr, sr, cols, group, scale, k, xt, g0, g1, s, last, yt, rows);
            } else {
              Mxfp4Tokens<false>(nt, pr, sr, cols, group, scale, k, xt, g0, g1, s, last, yt, rows);
            }
          }
        }
      }
    }
  }
}

}  // namespace k3::kern::detail
