/* kestrel/gpu.h - GPU inventory through NVML (loaded at run time) and the device selector.
 *
 * libnvidia-ml.so.1 is dlopen'ed at first use (KESTREL_NVML_LIBRARY overrides the path); it is
 * never linked. No driver, no library or no GPU is a successful query with zero devices and a
 * diagnostic. The query never initialises CUDA, so a process may still choose its
 * CUDA_VISIBLE_DEVICES afterwards. All NVML calls are serialised: safe from any thread. */
#ifndef KESTREL_GPU_H
#define KESTREL_GPU_H

#include "common.h"
#include "buffer.h"

KESTREL_BEGIN_DECL

/** One device (a whole GPU or a MIG instance). Library-filled; fields may be appended. */
typedef struct kestrel_gpu {
    unsigned int version;
    int index;                /**< NVML index of the GPU (a MIG instance: its parent's) */
    const char *uuid;         /**< "GPU-..." or "MIG-..." */
    const char *name;
    const char *pci_bus_id;   /**< "0000:18:00.0" (lowercase, 4-digit domain) */
    int64_t memory_total;     /**< bytes, -1 unknown */
    int64_t memory_free;
    int64_t memory_used;
    int utilization_gpu;      /**< percent, -1 unknown (always unknown on MIG) */
    int utilization_memory;
    int cc_major;             /**< compute capability, -1 unknown */
    int cc_minor;
    int multiprocessors;      /**< -1 unknown: only with KESTREL_GPU_QUERY_CUDA (NVML does not report it) */
    int temperature;          /**< Celsius, -1 unknown */
    int power_mw;             /**< milliwatts, -1 unknown */
    int mig_mode;             /**< 1 MIG enabled, 0 off, -1 unknown */
    int is_mig;               /**< 1 for a MIG instance */
    int parent;               /**< list position of the parent GPU of a MIG instance, else -1 */
    int visible;              /**< 1 when CUDA_VISIBLE_DEVICES admits it (or is unset) */
} kestrel_gpu;

/** Topology levels between two GPUs (NVML's common ancestor). */
typedef enum kestrel_gpu_link_t {
    KESTREL_GPU_LINK_UNKNOWN = -1,
    KESTREL_GPU_LINK_SAME_BOARD = 0,
    KESTREL_GPU_LINK_PCIE_SWITCH = 10,
    KESTREL_GPU_LINK_PCIE_SWITCHES = 20,
    KESTREL_GPU_LINK_HOST_BRIDGE = 30,
    KESTREL_GPU_LINK_NUMA_NODE = 40,
    KESTREL_GPU_LINK_SYSTEM = 50
} kestrel_gpu_link_t;

/** A snapshot of the local GPUs. Opaque. */
typedef struct kestrel_gpu_list kestrel_gpu_list;

#define KESTREL_GPU_QUERY_ALL 0x1u   /**< list devices hidden by CUDA_VISIBLE_DEVICES too (visible = 0) */
/**
 * Also read the multiprocessor counts through CUDA, in a short-lived child process
 * (kestrel-gpu-probe, or $KESTREL_GPU_PROBE) so that this process never initialises CUDA.
 */
#define KESTREL_GPU_QUERY_CUDA 0x2u

/** Take a snapshot. *out is owned: kestrel_gpu_list_free(). Zero devices is success. */
KESTREL_API int kestrel_gpu_list_query(kestrel_gpu_list **out, unsigned int flags);
KESTREL_API size_t kestrel_gpu_list_count(const kestrel_gpu_list *list);
/** Device i (borrowed from list), or NULL. */
KESTREL_API const kestrel_gpu *kestrel_gpu_list_get(const kestrel_gpu_list *list, size_t i);
/** Why the list is empty or partial ("libnvidia-ml.so.1 not found", ...), "" when all is well. */
KESTREL_API const char *kestrel_gpu_list_diagnostic(const kestrel_gpu_list *list);
/** kestrel_gpu_link_t between devices a and b (GPUs, not MIG instances). */
KESTREL_API int kestrel_gpu_list_topology(const kestrel_gpu_list *list, size_t a, size_t b);
/** Number of active NVLinks joining devices a and b. */
KESTREL_API int kestrel_gpu_list_nvlinks(const kestrel_gpu_list *list, size_t a, size_t b);
KESTREL_API void kestrel_gpu_list_free(kestrel_gpu_list *list);

/** Criteria for kestrel_gpu_select(). Zero means "no constraint" (count 0 means 1). */
typedef struct kestrel_gpu_select_options {
    unsigned int version;          /**< KESTREL_GPU_SELECT_OPTIONS_VERSION */
    int count;
    int64_t min_total_memory;      /**< bytes */
    int64_t min_free_memory;       /**< bytes */
    int min_cc_major, min_cc_minor;
    int max_utilization;           /**< percent 1..100; 0: no limit */
    const char *name_pattern;      /**< case-insensitive glob on the name, e.g. "*H100*" */
    const char *const *exclude;    /**< NULL-terminated UUIDs, UUID prefixes or PCI bus ids */
    int prefer_nvlink;             /**< pick sets joined by NVLink first */
    int allow_mig;                 /**< a single MIG instance may be chosen (count 1 only) */
} kestrel_gpu_select_options;

#define KESTREL_GPU_SELECT_OPTIONS_VERSION 1
#define KESTREL_GPU_SELECT_OPTIONS_INIT { KESTREL_GPU_SELECT_OPTIONS_VERSION }

KESTREL_API int kestrel_gpu_select_options_init(kestrel_gpu_select_options *opts, unsigned int version);

/** The result of a selection. Opaque. */
typedef struct kestrel_gpu_selection kestrel_gpu_selection;

/**
 * Choose devices. Filters every visible device (each rejection keeps its reason), then ranks:
 * one GPU model first, the best link score (NVLink, then PCIe closeness), the least
 * fragmentation of what is left, then PCI order. Deterministic for a snapshot. *out (owned:
 * kestrel_gpu_selection_free()) is set on success and on KESTREL_ENOTFOUND (not enough devices),
 * so the reasons can be read either way.
 */
KESTREL_API int kestrel_gpu_select(kestrel_gpu_selection **out, const kestrel_gpu_list *list,
                                   const kestrel_gpu_select_options *opts);
KESTREL_API size_t kestrel_gpu_selection_count(const kestrel_gpu_selection *sel);
/** List position of chosen device i (in PCI order). */
KESTREL_API size_t kestrel_gpu_selection_at(const kestrel_gpu_selection *sel, size_t i);
/** Why list device i was not chosen (borrowed), "" when it was chosen. */
KESTREL_API const char *kestrel_gpu_selection_reason(const kestrel_gpu_selection *sel, size_t i);
/** Fill out with the CUDA_VISIBLE_DEVICES value for a child: the chosen full UUIDs, comma-joined. */
KESTREL_API int kestrel_gpu_selection_visible_devices(kestrel_buf *out, const kestrel_gpu_selection *sel);
/**
 * Set CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER=PCI_BUS_ID in this process. Refused with
 * KESTREL_EMISUSE once libcuda is loaded in the process (CUDA reads them only once).
 */
KESTREL_API int kestrel_gpu_selection_apply(const kestrel_gpu_selection *sel);
/**
 * Take advisory locks (dir/gpu-<uuid>.lock, flock) on the chosen devices, held until the
 * selection is freed; KESTREL_EEXISTS when another process holds one. dir NULL: /tmp/kestrel-gpu.
 */
KESTREL_API int kestrel_gpu_selection_lock(kestrel_gpu_selection *sel, const char *dir);
KESTREL_API void kestrel_gpu_selection_free(kestrel_gpu_selection *sel);

KESTREL_END_DECL

#endif
