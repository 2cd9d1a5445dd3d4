// The dense (f32, bf16) product bodies, shared by matmul_avx2.cpp (AVX2+FMA) and
// matmul_avx512.cpp (the same code compiled with AVX-512 VL, whose 32 vector registers let one
// token's product run 12 rows at a time). Included only by them, after <immintrin.h>; internal
// linkage for the reason in simd_helpers.h.
//
// Determinism: every (token, row) output uses the same accumulators and the same instruction
// sequence whatever block of rows/tokens it is computed in, and whichever of the two files runs
// it; the templates below only change how many independent outputs are interleaved, never the
// arithmetic of one of them.
#pragma once
#include <immintrin.h>

#include <cstdint>

#include "kernels_detail.h"
#include "simd_helpers.h"

namespace k3::kern::detail {
namespace {

// Weight formats of the dense body. Load16 turns 16 weights of one row into the two 8-lane
// vectors that a 16-column step multiplies with x[c, c+8) and x[c+8, c+16) of the format's x
// layout; TailX copies the x of the short last block into a zero-padded 16-float array.
struct F32W {
  using Elem = float;
  static void Load16(const float* w, __m256& a, __m256& b) {
    a = _mm256_loadu_ps(w);
    b = _mm256_loadu_ps(w + 8);
  }
  static void TailX(const float* x, int64_t n, float* out) {  // plain x: n valid columns
    for (int64_t k = 0; k < 16; ++k) out[k] = k < n ? x[k] : 0.0f;
  }
};

// 16 bf16 weights in one 256-bit load -> f32 (exact). 32-bit lane k holds w[2k] in its low
// half and w[2k+1] in its high half, so one shift gives the even elements and one AND the odd
// ones: two cheap ops per 16 weights instead of two vpmovzxwd + two shifts. x is split to
// match (SplitX), with the last block already zero-padded.
struct Bf16W {
  using Elem = uint16_t;
  static void Load16(const uint16_t* w, __m256& even, __m256& odd) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w));
    even = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
    odd = _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(-65536)));  // 0xFFFF0000
  }
  static void TailX(const float* x, int64_t, float* out) {
    for (int64_t k = 0; k < 16; ++k) out[k] = x[k];
  }
};

// x in the lane order of Bf16W: per 16-column block, x[0,2,..,14] then x[1,3,..,15]; the
// tail block is zero-padded. Rows of `out` are Bf16XStride(cols) apart.
void SplitX(const float* x, int64_t T, int64_t cols, float* out) {
  const int64_t stride = Bf16XStride(cols);
  for (int64_t t = 0; t < T; ++t) {
    const float* xt = x + t * cols;
    float* o = out + t * stride;
    for (int64_t b = 0; b < stride; b += 16) {
      for (int64_t k = 0; k < 8; ++k) {
        o[b + k] = b + 2 * k < cols ? xt[b + 2 * k] : 0.0f;
        o[b + 8 + k] = b + 2 * k + 1 < cols ? xt[b + 2 * k + 1] : 0.0f;
      }
    }
  }
}

// NR rows x NT tokens of a dense product in weight format W. Each output owns two 8-lane
// accumulators fed by 16-column steps (the two vectors of W::Load16). This runs the steps over
// [c0, c1), starting from the accumulators saved in `st` ([NR][NT][2]; nullptr = start from
// zero). With `last`, it then runs the tail (zero-padded copies, so the tail uses the same
// lanes) and reduces into y; otherwise it saves the accumulators back, which is exact, so
// splitting the columns into chunks does not change the result. w points at row r, token j's x
// at x + j*xstride, y at Y[t*rows + r].
template <class W, int NR, int NT>
void DotBlock(const typename W::Elem* w, const float* x, int64_t cols, int64_t xstride, int64_t c0,
              int64_t c1, __m256* st, bool last, float* y, int64_t rows) {
  __m256 a0[NR][NT], a1[NR][NT];
  for (int i = 0; i < NR; ++i) {
    for (int j = 0; j < NT; ++j) {
      a0[i][j] = st ? st[(i * NT + j) * 2] : _mm256_setzero_ps();
      a1[i][j] = st ? st[(i * NT + j) * 2 + 1] : _mm256_setzero_ps();
    }
  }
  for (int64_t c = c0; c < c1; c += 16) {
    for (int i = 0; i < NR; ++i) {
      __m256 wa, wb;
      W::Load16(w + i * cols + c, wa, wb);
      for (int j = 0; j < NT; ++j) {
        a0[i][j] = _mm256_fmadd_ps(wa, _mm256_loadu_ps(x + j * xstride + c), a0[i][j]);
        a1[i][j] = _mm256_fmadd_ps(wb, _mm256_loadu_ps(x + j * xstride + c + 8), a1[i][j]);
      }
    }
  }
  if (!last) {
    for (int i = 0; i < NR; ++i) {
      for (int j = 0; j < NT; ++j) {
        st[(i * NT + j) * 2] = a0[i][j];
        st[(i * NT + j) * 2 + 1] = a1[i][j];
      }
    }
    return;
  }
  if (c1 < cols) {
    const int64_t n = cols - c1;
    alignas(32) float xt[NT][16];
    for (int j = 0; j < NT; ++j) W::TailX(x + j * xstride + c1, n, xt[j]);
    for (int i = 0; i < NR; ++i) {
      alignas(32) typename W::Elem wt[16] = {};
      for (int64_t k = 0; k < n; ++k) wt[k] = w[i * cols + c1 + k];
      __m256 wa, wb;
      W::Load16(wt, wa, wb);
      for (int j = 0; j < NT; ++j) {
        a0[i][j] = _mm256_fmadd_ps(wa, _mm256_load_ps(xt[j]), a0[i][j]);
        a1[i][j] = _mm256_fmadd_ps(wb, _mm256_load_ps(xt[j] + 8), a1[i][j]);
      }
    }
  }
  for (int i = 0; i < NR; ++i) {
    for (int j = 0; j < NT; ++j) y[j * rows + i] = HSum(_mm256_add_ps(a0[i][j], a1[i][j]));
  }
}

// Rows [r0, r1) of one token's dense product in format W: kWide rows at a time share each x
// load and keep kWide weight streams in flight (the large matrices are memory-bound and more
// concurrent streams read faster: 8 rather than 4 on AVX2, 12 with AVX-512's 32 registers;
// docs/benchmarks.md), then 8, 4 and single rows for the rest. Every row gets the same
// arithmetic whatever kWide is.
template <class W, int kWide>
void DotRowsT1(const typename W::Elem* w, int64_t r0, int64_t r1, int64_t cols, const float* x, float* y) {
  const int64_t cols16 = cols - cols % 16;
  // One token: DotBlock's token stride and y row count (the two zeros) are never used.
  int64_t r = r0;
  for (; r + kWide <= r1; r += kWide) DotBlock<W, kWide, 1>(w + r * cols, x, cols, 0, 0, cols16, nullptr, true, y + r, 0);
  for (; r + 8 <= r1; r += 8) DotBlock<W, 8, 1>(w + r * cols, x, cols, 0, 0, cols16, nullptr, true, y + r, 0);
  for (; r + 4 <= r1; r += 4) DotBlock<W, 4, 1>(w + r * cols, x, cols, 0, 0, cols16, nullptr, true, y + r, 0);
  for (; r < r1; ++r) DotBlock<W, 1, 1>(w + r * cols, x, cols, 0, 0, cols16, nullptr, true, y + r, 0);
}

// Rows [r0, r1) of a dense product in format W (token t's x at x + t*xstride).
// One token: DotRowsT1 with eight rows.
// Several tokens: x for a chunk of kTokChunk tokens and kColChunk columns (16 KB) stays in L1
// while every row of the block passes over it; the row block's weights stay in L2 across token
// chunks. Partial accumulators live in `st` between column chunks.
constexpr int64_t kColChunk = 512;
constexpr int64_t kTokChunk = 8;

template <class W>
void DotRows(const typename W::Elem* w, int64_t r0, int64_t r1, int64_t cols, const float* x,
             int64_t xstride, int64_t T, float* y, int64_t rows) {
  const int64_t cols16 = cols - cols % 16;
  if (T == 1) {
    DotRowsT1<W, 8>(w, r0, r1, cols, x, y);
    return;
  }
  __m256 st[kRowBlock * kTokChunk * 2];
  for (int64_t tc = 0; tc < T; tc += kTokChunk) {
    const int64_t tend = Min(T, tc + kTokChunk);
    for (auto& v : st) v = _mm256_setzero_ps();
    for (int64_t c0 = 0;; c0 += kColChunk) {
      const int64_t c1 = Min(cols16, c0 + kColChunk);
      const bool last = c1 >= cols16;
      for (int64_t r = r0; r < r1; ++r) {
        const typename W::Elem* wr = w + r * cols;
        for (int64_t t = tc; t < tend; t += 4) {
          const float* xt = x + t * xstride;
          float* yt = y + t * rows + r;
          __m256* s = st + ((r - r0) * kTokChunk + (t - tc)) * 2;
          switch (Min(4, tend - t)) {
            case 4: DotBlock<W, 1, 4>(wr, xt, cols, xstride, c0, c1, s, last, yt, rows); break;
            case 3: DotBlock<W, 1, 3>(wr, xt, cols, xstride, c0, c1, s, last, yt, rows); break;
            case 2: DotBlock<W, 1, 2>(wr, xt, cols, xstride, c0, c1, s, last, yt, rows); break;
            default: DotBlock<W, 1, 1>(wr, xt, cols, xstride, c0, c1, s, last, yt, rows); break;
          }
        }
      }
      if (last) break;
    }
  }
}

}  // namespace
}  // namespace k3::kern::detail
