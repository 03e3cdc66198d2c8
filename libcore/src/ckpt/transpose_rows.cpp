// The transpose behind mds-ckpt-to-hf's Conv1D weights (transpose_rows.h).
#include "ckpt/transpose_rows.h"

#include <algorithm>
#include <cstring>
#if defined(__SSE2__)
#include <emmintrin.h>  // _mm_unpack*: the 8 x 8 transpose of 2-byte elements
#endif

namespace mds::ckpt {
namespace {

// Tiles of kTile source rows x kTile columns: for each tile the kTile source rows' cache lines (and
// their pages' TLB entries) stay live while their columns are read, and every output row gets a
// run of kTile consecutive elements. Columns outer, rows inner: a chunk of output rows is written
// front to back, so its lines are completed while they are still in the cache.
constexpr std::int64_t kTile = 64;

template <class T>
void transpose_rows_typed(const std::byte* const* row, std::byte* out, std::int64_t rows, std::int64_t c0, std::int64_t c1) {
    T* dst = reinterpret_cast<T*>(out);
    for (std::int64_t j0 = c0; j0 < c1; j0 += kTile) {
        const std::int64_t j1 = std::min(c1, j0 + kTile);
        for (std::int64_t i0 = 0; i0 < rows; i0 += kTile) {
            const std::int64_t i1 = std::min(rows, i0 + kTile);
            for (std::int64_t j = j0; j < j1; ++j) {
                T* d = dst + (j - c0) * rows;
                for (std::int64_t i = i0; i < i1; ++i) std::memcpy(d + i, row[i] + j * static_cast<std::int64_t>(sizeof(T)), sizeof(T));
            }
        }
    }
}

#if defined(__SSE2__)
// Rows i..i+7, columns j..j+7 of 2-byte elements into dst (row stride ld elements): three rounds of
// interleaving (16, 32, 64 bits), the classic register transpose.
inline void transpose_8x8_u16(const std::byte* const* row, std::int64_t j, std::uint16_t* dst, std::int64_t ld) {
    __m128i a[8], b[8], c[8];
    for (int k = 0; k < 8; ++k) a[k] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row[k] + j * 2));
    for (int k = 0; k < 4; ++k) {
        b[2 * k] = _mm_unpacklo_epi16(a[2 * k], a[2 * k + 1]);
        b[2 * k + 1] = _mm_unpackhi_epi16(a[2 * k], a[2 * k + 1]);
    }
    for (int h = 0; h < 2; ++h)
        for (int k = 0; k < 2; ++k) {
            c[4 * h + 2 * k] = _mm_unpacklo_epi32(b[4 * h + k], b[4 * h + k + 2]);
            c[4 * h + 2 * k + 1] = _mm_unpackhi_epi32(b[4 * h + k], b[4 * h + k + 2]);
        }
    for (int k = 0; k < 4; ++k) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + (2 * k) * ld), _mm_unpacklo_epi64(c[k], c[k + 4]));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + (2 * k + 1) * ld), _mm_unpackhi_epi64(c[k], c[k + 4]));
    }
}

// bf16 / fp16, the dtypes of real checkpoints: 8 x 8 register tiles inside the cache tiles.
void transpose_rows_u16(const std::byte* const* row, std::byte* out, std::int64_t rows, std::int64_t c0, std::int64_t c1) {
    auto* dst = reinterpret_cast<std::uint16_t*>(out);
    for (std::int64_t j0 = c0; j0 < c1; j0 += kTile) {
        const std::int64_t j1 = std::min(c1, j0 + kTile);
        for (std::int64_t i0 = 0; i0 < rows; i0 += kTile) {
            const std::int64_t i1 = std::min(rows, i0 + kTile);
            std::int64_t i = i0;
            for (; i + 8 <= i1; i += 8) {
                std::int64_t j = j0;
                for (; j + 8 <= j1; j += 8) transpose_8x8_u16(row + i, j, dst + (j - c0) * rows + i, rows);
                for (; j < j1; ++j)
                    for (std::int64_t k = i; k < i + 8; ++k) std::memcpy(dst + (j - c0) * rows + k, row[k] + j * 2, 2);
            }
            for (; i < i1; ++i)
                for (std::int64_t j = j0; j < j1; ++j) std::memcpy(dst + (j - c0) * rows + i, row[i] + j * 2, 2);
        }
    }
}
#endif

}  // namespace

void transpose_rows(const std::byte* const* row, std::byte* out, std::int64_t rows, std::int64_t col_begin, std::int64_t col_end,
                    std::size_t esize) {
    switch (esize) {
#if defined(__SSE2__)
    case 2: transpose_rows_u16(row, out, rows, col_begin, col_end); break;
#else
    case 2: transpose_rows_typed<std::uint16_t>(row, out, rows, col_begin, col_end); break;
#endif
    case 4: transpose_rows_typed<std::uint32_t>(row, out, rows, col_begin, col_end); break;
    case 8: transpose_rows_typed<std::uint64_t>(row, out, rows, col_begin, col_end); break;
    default: transpose_rows_typed<std::uint8_t>(row, out, rows, col_begin, col_end); break;
    }
}

}  // namespace mds::ckpt
