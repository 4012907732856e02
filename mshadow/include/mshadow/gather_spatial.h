/* Spatial gathers (spatial_pool.h, spatial_unpool.h, channel_pool.h, channel_unpool.h,
 * unpack_patch2col.h, pack_col2patch.h): kernels with the gather contract of
 * mshadow/gather.h (args[0] = ms_gather, args[1] = out, dims = {n, y, x0}).
 */
#ifndef MSHADOW_GATHER_SPATIAL_H_
#define MSHADOW_GATHER_SPATIAL_H_
#include "mshadow/gather.h"

static const ms_kernel_entry ms_gather_spatial_table[] = {
  {NULL, NULL}
};

#endif  /* MSHADOW_GATHER_SPATIAL_H_ */
