// The two bodies of the bf16 frame decoder (frame_codec.h): the scalar twin and the AVX2 body,
// which the tests compare byte for byte. Each decodes `n_groups` whole groups of 32 values from
// `groups` into `dst` (64 bytes per group): low bytes as stored, high bytes from `table` by the
// 3-bit index, index 7 taking the next byte of `esc`. Returns the number of index-7 values seen;
// more than `n_esc` means a corrupt frame (the bodies then stop patching, and the AVX2 body stops).
// `esc` must have 32 readable bytes after its n_esc (the AVX2 body loads 16 at a time).
#pragma once
#include <cstddef>
#include <cstdint>

namespace k3::codec::detail {

uint64_t DecodeGroupsScalar(const uint8_t* groups, size_t n_groups, const uint8_t table[8], const uint8_t* esc,
                            uint64_t n_esc, uint8_t* dst);
uint64_t DecodeGroupsAvx2(const uint8_t* groups, size_t n_groups, const uint8_t table[8], const uint8_t* esc,
                          uint64_t n_esc, uint8_t* dst);

// The escapes' high bytes in order, from their nibbles (escape j in nibble j % 2 of byte j / 2,
// low nibble first): esc_table[k], or for nibble 15 the next of the `n_raw` raw bytes. Returns
// the raw bytes used, or more than n_raw for a corrupt frame (out then holds garbage).
uint64_t ExpandEscapesScalar(const uint8_t* nibbles, uint64_t n_esc, const uint8_t esc_table[16], const uint8_t* raws,
                             uint64_t n_raw, uint8_t* out);
uint64_t ExpandEscapesAvx2(const uint8_t* nibbles, uint64_t n_esc, const uint8_t esc_table[16], const uint8_t* raws,
                           uint64_t n_raw, uint8_t* out);

bool CpuHasAvx2();

}  // namespace k3::codec::detail
