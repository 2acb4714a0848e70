/* Little-endian integers in byte buffers: the one set of helpers for every
 * on-disk format (the journal's frames, the job's records, the results
 * file), so that no file keeps a copy of its own. */
#ifndef MESH_BASE_BYTES_H
#define MESH_BASE_BYTES_H

#include <stdint.h>

static inline void mesh_put32le(unsigned char *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}
static inline void mesh_put64le(unsigned char *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}
static inline uint32_t mesh_get32le(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t mesh_get64le(const unsigned char *p)
{
	return (uint64_t)mesh_get32le(p) | (uint64_t)mesh_get32le(p + 4) << 32;
}

#endif
