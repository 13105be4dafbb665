/* crc32c.h - CRC-32C (Castagnoli, the iSCSI / RFC 3720 checksum), used by
 * the NVMe tier to catch data that comes back from the SSD different from
 * what was written.
 *
 * All functions take the CRC of the bytes so far (0 for none) and return
 * the CRC of those bytes followed by data[0..len), so a buffer can be
 * checksummed in pieces: crc(crc(0, a), b) == crc(0, a||b). The pre- and
 * post-inversion of the standard is done inside; crc32c(0, "123456789", 9)
 * is 0xE3069283. No state: the tables are constant.
 */
#ifndef MT_CRC32C_H
#define MT_CRC32C_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The fastest implementation this CPU has (SSE4.2 when available). */
uint32_t mt_crc32c(uint32_t crc, const void *data, size_t len);

/* Portable slicing-by-8 table implementation. */
uint32_t mt_crc32c_sw(uint32_t crc, const void *data, size_t len);

/* True when this build and this CPU can run mt_crc32c_hw (x86-64 with
 * SSE4.2). mt_crc32c_hw falls back to mt_crc32c_sw when it is false, so it
 * is always safe to call. */
bool mt_crc32c_hw_available(void);
uint32_t mt_crc32c_hw(uint32_t crc, const void *data, size_t len);

#endif
