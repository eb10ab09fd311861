// device.c: the CUDA driver and the cuda backend, found through dlopen (device.h).
#include "runtime/backend/device.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
    else if ((rc = init(0)) != 0)
        snprintf(why, cap, "cuInit failed with CUresult %d (no GPU, or its driver is not loaded)", rc);
    else if ((rc = count(&n)) != 0 || n <= 0)
        snprintf(why, cap, "the CUDA driver reports no device (CUresult %d)", rc), n = 0;
    dlclose(lib);
    return n;
}

int device_cuda_open(BackendCudaCreateFn *create, char *why, size_t cap) {
    const char *given = getenv("MT_CUDA_BACKEND");
    char path[PATH_MAX + 32];
    *create = NULL;
    if (given && *given) {
        snprintf(path, sizeof path, "%s", given);
    } else {
        if (!device_cuda_count(why, cap)) return 0;
        ssize_t n = readlink("/proc/self/exe", path, PATH_MAX);
        if (n <= 0) {
            snprintf(why, cap, "cannot find the mtrun executable to load the cuda backend beside it");
            return 0;
        }
        path[n] = 0;
        char *slash = strrchr(path, '/');
        snprintf(slash ? slash + 1 : path, sizeof path - (size_t)(slash ? slash + 1 - path : 0), "libmt_cuda.so");
    }
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL); // kept for the process's life
    if (!lib) {
        snprintf(why, cap, "cannot load the CUDA backend %s: %s", path, dlerror());
        return 0;
    }
    BackendCudaDevicesFn devices = (BackendCudaDevicesFn)(uintptr_t)dlsym(lib, "backend_cuda_devices");
    BackendCudaCreateFn fn = (BackendCudaCreateFn)(uintptr_t)dlsym(lib, "backend_cuda_create");
    if (!devices || !fn) {
        snprintf(why, cap, "%s is not mt's CUDA backend (no backend_cuda_devices or backend_cuda_create)", path);
        return 0;
    }
    int n = devices(why, cap);
    if (n > 0) *create = fn;
    return n;
}
