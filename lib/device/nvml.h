/* lib/device/nvml.h - the few NVML types libkestrel needs, declared here (no nvml.h at build time),
 * with the layouts of NVIDIA's header. Shared by lib/gpu_nvml.c and the test stub. */
#ifndef KESTREL_NVML_H
#define KESTREL_NVML_H

typedef struct nvmlDevice_st *nvmlDevice_t;
typedef int nvmlReturn_t;

#define NVML_SUCCESS 0
#define NVML_ERROR_UNINITIALIZED 1
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_NO_PERMISSION 4
#define NVML_ERROR_NOT_FOUND 6
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_ERROR_DRIVER_NOT_LOADED 9
#define NVML_ERROR_FUNCTION_NOT_FOUND 13
#define NVML_ERROR_GPU_IS_LOST 15
#define NVML_ERROR_LIB_RM_VERSION_MISMATCH 18
#define NVML_ERROR_ARGUMENT_VERSION_MISMATCH 25

#define NVML_NVLINK_MAX_LINKS 36
#define NVML_STRING_BUFFER 96

typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;

typedef struct {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;

#define NVML_MEMORY_V2_VERSION ((unsigned int)(sizeof(nvmlMemory_v2_t) | (2u << 24)))

typedef struct {
    unsigned int gpu, memory;
} nvmlUtilization_t;

#endif
