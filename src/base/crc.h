/* CRC-32C (Castagnoli), hardware-accelerated where the CPU has SSE4.2. */
#ifndef MESH_BASE_CRC_H
#define MESH_BASE_CRC_H

#include <stddef.h>
#include <stdint.h>

/* crc: 0 to start, or a previous result to continue over more bytes. */
uint32_t mesh_crc32c(uint32_t crc, const void *buf, size_t n);
/* 64-bit FNV-1a, for content hashes that are not integrity checks. */
uint64_t mesh_fnv1a64(uint64_t h, const void *buf, size_t n);
#define MESH_FNV1A64_INIT 0xcbf29ce484222325ull

#endif
