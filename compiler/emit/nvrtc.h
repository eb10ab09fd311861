// nvrtc.h: compiles one CUDA C translation unit with NVRTC, inside mtc, for
// one GPU architecture. (Not to be confused with the toolkit's <nvrtc.h>,
// which nvrtc.c includes with angle brackets; this folder is never on the
// include path.)
//
// One compile for `-arch=sm_XX` yields both the cubin for that chip and its
// PTX (`.target sm_XX`), which the driver JIT-compiles on newer chips.
// Every NVRTC diagnostic is an error, warnings included; each is reported
// with the generated line it names and where that line came from.
#ifndef MT_NVRTC_H
#define MT_NVRTC_H

#include <stddef.h>
#include <stdint.h>

typedef struct CudaBinary {
    char arch[16];  // "sm_90"
    uint8_t *cubin; // (cubin_len) ELF for arch, malloc'd
    size_t cubin_len;
    char *ptx; // (ptx_len) NUL-terminated PTX text, malloc'd; ptx_len excludes the NUL
    size_t ptx_len;
    double seconds; // wall time NVRTC took (or reading the compile cache)
} CudaBinary;

// Whether arch is one NVRTC can take, spelled sm_XX with XX >= 80 (the
// attention kernels use cp.async-free Ampere features only, but no older
// chip is a target mt schedules for).
int nvrtc_arch_ok(const char *arch);

// Compiles src (NUL-terminated) named `name` (for example "mt.cu") for
// arch. origin: (norigin) for each 1-based line i of src, origin[i-1]
// describes where it came from ("kernel k3, op rmsnorm at m.mt:4:9"), or
// NULL for boilerplate; origin may be NULL. Returns 0 with *out filled
// (free with nvrtc_binary_free), or -1 with every diagnostic in err (cut
// to errcap), each as
//
//     NAME:LINE: error: MESSAGE
//         LINE | the generated source line
//       in ORIGIN
//
// and *out zeroed. Any warning fails the compile.
//
// Compiles are cached (common/cache.h): a source NVRTC compiled before, for
// the same arch with the same NVRTC version, is read back from
// $MT_CACHE_DIR (default $XDG_CACHE_HOME/mt or ~/.cache/mt;
// MT_CACHE_DIR=off: no cache) instead. A compile that is not a cache hit
// prints a line to stderr when it starts (what it compiles: name, arch,
// lines) and one with its time when it succeeds.
int nvrtc_compile(const char *src, const char *name, const char *arch, const char *const *origin, int norigin,
                  CudaBinary *out, char *err, size_t errcap);

// nvrtc_compile with ptxas's resource report (--ptxas-options=-v): on
// success *info (malloc'd, free it) holds its lines, per entry function
// "ptxas info    : Used N registers, ..." and "N bytes stack frame, N bytes
// spill stores, N bytes spill loads"; they are not diagnostics.
int nvrtc_compile_report(const char *src, const char *name, const char *arch, CudaBinary *out, char **info, char *err,
                         size_t errcap);

void nvrtc_binary_free(CudaBinary *b);

// "13.0": the NVRTC library's version, for messages and the plan.
const char *nvrtc_version_str(void);

#endif
