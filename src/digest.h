/* digest.h -- the two hashes the Hugging Face Hub names files by: SHA-256 (the ETag of an LFS
 * file: the big safetensors shards) and SHA-1 (the git blob id, the ETag of a small file).
 * Streaming: init, update any number of times, final. FIPS 180-4, checked by known vectors. */
#ifndef PLUME_DIGEST_H
#define PLUME_DIGEST_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint32_t h[8];
    uint64_t n;       /* bytes hashed so far */
    uint8_t buf[64];  /* a partial block: n % 64 bytes */
} sha256_ctx;

typedef struct {
    uint32_t h[5];
    uint64_t n;
    uint8_t buf[64];
} sha1_ctx;

void sha256_init(sha256_ctx *c);
void sha256_update(sha256_ctx *c, const void *data, size_t len);
/* Write the 32-byte digest as 64 lowercase hex digits and a NUL into hex[65]. */
void sha256_final_hex(sha256_ctx *c, char hex[65]);

void sha1_init(sha1_ctx *c);
void sha1_update(sha1_ctx *c, const void *data, size_t len);
/* Write the 20-byte digest as 40 lowercase hex digits and a NUL into hex[41]. */
void sha1_final_hex(sha1_ctx *c, char hex[41]);

#endif
