// device.h: which device mtrun trains on. The CUDA driver and the cuda
// backend (libmt_cuda.so) are looked up at run time with dlopen, so mtrun
// starts on machines without them.
#ifndef MT_DEVICE_H
#define MT_DEVICE_H

#include <stddef.h>

#include "runtime/backend/backend.h"

typedef enum { DEVICE_AUTO, DEVICE_CPU, DEVICE_CUDA } DeviceKind;

// The number of CUDA devices the driver reports, or 0 with the reason in
// why: no driver library, cuInit failing (no GPU, or a driver too old), or
// no device.
int device_cuda_count(char *why, size_t cap);

// Loads the cuda backend: the library MT_CUDA_BACKEND names (the tests'
// build against the CUDA emulation), else libmt_cuda.so beside the mtrun
// executable, after device_cuda_count found a GPU. Returns the number of
// CUDA devices it sees with *create set and the first device described in
// why ("NVIDIA H200, sm_90, 150.1 GB"), or 0 with the reason in why.
int device_cuda_open(BackendCudaCreateFn *create, char *why, size_t cap);

#endif
