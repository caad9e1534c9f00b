/* lib/device/gpu_priv.h - the GPU snapshot's private layout and the CUDA_VISIBLE_DEVICES resolver. */
#ifndef KESTREL_GPU_PRIV_H
#define KESTREL_GPU_PRIV_H

#include "internal.h"

typedef struct {
    kestrel_gpu pub;
    char uuid[96];
    char name[96];
    char bus[32];
    unsigned int pci_domain, pci_bus, pci_device;
} kestrel__gpu_entry;

struct kestrel_gpu_list {
    uint32_t magic;
    kestrel__gpu_entry *dev;
    size_t n;
    int *topo;      /* n x n kestrel_gpu_link_t */
    int *links;     /* n x n NVLink counts */
    char diag[256];
};

/* Mark dev[i].pub.visible from a CUDA_VISIBLE_DEVICES value (NULL: unset). Devices are in PCI
 * order. Appends a note to diag when the value stops early or is ambiguous. */
void kestrel__gpu_apply_visible(kestrel__gpu_entry *dev, size_t n, const char *value, char *diag, size_t dlen);

/* Fill multiprocessor counts from the kestrel-gpu-probe child. */
void kestrel__gpu_cuda_probe(kestrel__gpu_entry *dev, size_t n, char *diag, size_t dlen);

#endif
