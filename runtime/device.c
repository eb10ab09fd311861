// device.c: the CUDA driver, probed through dlopen (device.h).
#include "device.h"

#include <dlfcn.h>
#include <stdio.h>

int device_cuda_count(char *why, size_t cap) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(why, cap, "no CUDA driver (%s)", dlerror());
        return 0;
    }
    // CUresult cuInit(unsigned), cuDeviceGetCount(int *): 0 is CUDA_SUCCESS
    int (*init)(unsigned) = (int (*)(unsigned))dlsym(lib, "cuInit");
    int (*count)(int *) = (int (*)(int *))dlsym(lib, "cuDeviceGetCount");
    int n = 0, rc;
    if (!init || !count) snprintf(why, cap, "libcuda.so.1 lacks cuInit or cuDeviceGetCount");
    else if ((rc = init(0)) != 0) snprintf(why, cap, "cuInit failed with CUresult %d (no GPU, or its driver is not loaded)", rc);
    else if ((rc = count(&n)) != 0 || n <= 0) snprintf(why, cap, "the CUDA driver reports no device (CUresult %d)", rc), n = 0;
    dlclose(lib);
    return n;
}
