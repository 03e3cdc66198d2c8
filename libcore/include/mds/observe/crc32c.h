// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of TFRecord framing, and the
// "masked" form TensorFlow stores in TensorBoard event files (tensorboard_writer.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace mds::observe {

// CRC-32C of `n` bytes, continuing from `crc` (0 for a fresh checksum). Uses the SSE4.2 crc32
// instruction when the CPU has it, otherwise crc32c_portable.
std::uint32_t crc32c(const void* data, std::size_t n, std::uint32_t crc = 0);
inline std::uint32_t crc32c(std::string_view s) { return crc32c(s.data(), s.size()); }

// Table-driven (slicing-by-8) version; always available, the reference for the hardware path.
std::uint32_t crc32c_portable(const void* data, std::size_t n, std::uint32_t crc = 0);

// TFRecord's mask: rotate right by 15 bits and add a constant, so that a CRC of data that itself
// contains CRCs does not degenerate.
constexpr std::uint32_t crc32c_mask(std::uint32_t crc) {
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}
constexpr std::uint32_t crc32c_unmask(std::uint32_t masked) {
    const std::uint32_t rot = masked - 0xa282ead8u;
    return (rot >> 17) | (rot << 15);
}

// True when crc32c() uses the SSE4.2 instruction on this machine.
bool crc32c_hardware_available();

}  // namespace mds::observe
