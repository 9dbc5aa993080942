#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace ddprun::examples::outputs {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of
// TFRecord framing. Crc32c("123456789") == 0xE3069283. Extend() continues a
// CRC over more bytes: Extend(Crc32c(a), b) == Crc32c(a + b).
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t size);
inline uint32_t Crc32c(std::string_view bytes) {
  return Crc32cExtend(0, bytes.data(), bytes.size());
}

// TFRecord's masked CRC: rotated right by 15 bits plus a constant, so that
// the CRC of data that itself holds CRCs is not trivially related to them.
inline uint32_t MaskCrc(uint32_t crc) {
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}
inline uint32_t MaskedCrc32c(std::string_view bytes) {
  return MaskCrc(Crc32c(bytes));
}

}  // namespace ddprun::examples::outputs
