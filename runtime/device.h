// device.h: which device mtrun trains on. The CUDA driver is looked up at
// run time (dlopen of libcuda.so.1), so mtrun starts on machines without one.
#ifndef MT_DEVICE_H
#define MT_DEVICE_H

#include <stddef.h>

typedef enum { DEVICE_AUTO, DEVICE_CPU, DEVICE_CUDA } DeviceKind;

// The number of CUDA devices the driver reports, or 0 with the reason in
// why: no driver library, cuInit failing (no GPU, or a driver too old), or
// no device.
int device_cuda_count(char *why, size_t cap);

#endif
