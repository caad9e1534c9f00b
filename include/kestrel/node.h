/* kestrel/node.h - the nodes a kestreld schedules on, their devices and allocations. */
#ifndef KESTREL_NODE_H
#define KESTREL_NODE_H

#include "common.h"
#include "client.h"

KESTREL_BEGIN_DECL

/** One device of a node. Library-filled; fields may be appended. */
typedef struct kestrel_node_device {
    unsigned int version;
    int index;
    const char *uuid;            /**< a real GPU's UUID, or the virtual device's */
    const char *type;            /**< what --gpu-type matches ("a100", "virtual") */
    const char *name;            /**< the GPU's full name */
    int64_t memory_total_mb;
    int64_t memory_free_mb;      /**< -1 unknown */
    int utilization;             /**< percent, -1 unknown */
    int cc_major, cc_minor;
    int64_t job_id;              /**< the job holding it, 0 when free */
} kestrel_node_device;

/** The server's nodes. Opaque. */
typedef struct kestrel_node_list kestrel_node_list;

/** Fetch the nodes (GET /api/v1/nodes). *out is owned: kestrel_node_list_free(). */
KESTREL_API int kestrel_node_list_get(kestrel_node_list **out, kestrel_client *client);
KESTREL_API size_t kestrel_node_list_count(const kestrel_node_list *list);
/** Node i's name and pool (borrowed), "" when out of range. */
KESTREL_API const char *kestrel_node_name(const kestrel_node_list *list, size_t i);
KESTREL_API const char *kestrel_node_pool(const kestrel_node_list *list, size_t i);
KESTREL_API size_t kestrel_node_device_count(const kestrel_node_list *list, size_t i);
/** Device k of node i (borrowed), or NULL. */
KESTREL_API const kestrel_node_device *kestrel_node_device_at(const kestrel_node_list *list, size_t i, size_t k);
KESTREL_API void kestrel_node_list_free(kestrel_node_list *list);

KESTREL_END_DECL

#endif
