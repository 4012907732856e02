/* Aligned pitched allocation (mshadow's AlignedMallocPitch, packet-inl.h).
 *
 * Design: every row of a pitched allocation starts on an MS_ALIGN_BYTES boundary, so
 * the packet kernels may use aligned loads on any row. Never returns memory that is
 * not aligned; returns NULL on failure (the caller raises MemoryError).
 */
#ifndef MSHADOW_ALLOC_H_
#define MSHADOW_ALLOC_H_

#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#if defined(_WIN32)
#include <malloc.h>
#endif

#define MS_ALIGN_BYTES 64

static inline void *ms_aligned_malloc(size_t nbytes) {
  void *p = NULL;
  if (nbytes == 0) nbytes = MS_ALIGN_BYTES;  /* a valid, freeable pointer for empty tensors */
#if defined(_WIN32)
  p = _aligned_malloc(nbytes, MS_ALIGN_BYTES);
#else
  if (posix_memalign(&p, MS_ALIGN_BYTES, nbytes) != 0) p = NULL;
#endif
  return p;
}

static inline void ms_aligned_free(void *p) {
#if defined(_WIN32)
  _aligned_free(p);
#else
  free(p);
#endif
}

/* Row pitch in bytes: the row rounded up to the alignment. */
static inline size_t ms_upper_align(size_t row_bytes) {
  return (row_bytes + MS_ALIGN_BYTES - 1) / MS_ALIGN_BYTES * MS_ALIGN_BYTES;
}

#endif  /* MSHADOW_ALLOC_H_ */
