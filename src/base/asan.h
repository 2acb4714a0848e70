/* Whether the code is built with AddressSanitizer: MESH_UNDER_ASAN is
 * defined then (gcc says so with __SANITIZE_ADDRESS__, clang through
 * __has_feature).  Code whose stacks or memory limits ASan changes asks
 * here. */
#ifndef MESH_BASE_ASAN_H
#define MESH_BASE_ASAN_H

#if defined(__SANITIZE_ADDRESS__)
#define MESH_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MESH_UNDER_ASAN 1
#endif
#endif

#endif
