/* lib/device/node.c - the server's nodes and devices (GET /api/v1/nodes). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "client.h"
#include "http.h"

#define MAGIC_NODES 0x6b4e6f64u

struct kestrel_node_list {
    uint32_t magic;
    Kestrel__V1__NodeList *pb;
    kestrel_node_device **devs;   /* per node */
};

void kestrel_node_list_free(kestrel_node_list *l)
{
    if (l == NULL || l->magic != MAGIC_NODES)
        return;
    l->magic = KESTREL__MAGIC_DEAD;
    for (size_t i = 0; l->devs && i < l->pb->n_nodes; i++)
        free(l->devs[i]);
    free(l->devs);
    protobuf_c_message_free_unpacked(&l->pb->base, NULL);
    free(l);
}

int kestrel_node_list_get(kestrel_node_list **out, kestrel_client *c)
{
    kestrel__request req = { "GET", "/api/v1/nodes", NULL, &kestrel__v1__node_list__descriptor, 1, 0 };
    ProtobufCMessage *m;
    kestrel_node_list *l;
    int rc;
    if (out == NULL)
        return kestrel__error_set(KESTREL_EMISUSE, "out is NULL");
    *out = NULL;
    KESTREL__CHECK(c, KESTREL__MAGIC_CLIENT, "client");
    if ((rc = kestrel__http_call(&m, c, &req)) < 0)
        return rc;
    if ((l = calloc(1, sizeof(*l))) == NULL) {
        protobuf_c_message_free_unpacked(m, NULL);
        return kestrel__error_oom();
    }
    l->pb = (Kestrel__V1__NodeList *)m;
    l->magic = MAGIC_NODES;
    if ((l->devs = calloc(l->pb->n_nodes + 1, sizeof(*l->devs))) == NULL) {
        kestrel_node_list_free(l);
        return kestrel__error_oom();
    }
    for (size_t i = 0; i < l->pb->n_nodes; i++) {
        const Kestrel__V1__Node *n = l->pb->nodes[i];
        if ((l->devs[i] = calloc(n->n_devices + 1, sizeof(kestrel_node_device))) == NULL) {
            kestrel_node_list_free(l);
            return kestrel__error_oom();
        }
        for (size_t k = 0; k < n->n_devices; k++) {
            const Kestrel__V1__Device *d = n->devices[k];
            kestrel_node_device *o = &l->devs[i][k];
            o->version = 1;
            o->index = d->index;
            o->uuid = d->uuid;
            o->type = d->type;
            o->name = d->name;
            o->memory_total_mb = d->memory_total_mb;
            o->memory_free_mb = d->memory_free_mb;
            o->utilization = d->utilization;
            if (sscanf(d->compute_capability, "%d.%d", &o->cc_major, &o->cc_minor) != 2)
                o->cc_major = o->cc_minor = -1;
            o->job_id = d->job_id;
        }
    }
    *out = l;
    return 0;
}

#define NODES_OK(l, i) ((l) && (l)->magic == MAGIC_NODES && (i) < (l)->pb->n_nodes)

size_t kestrel_node_list_count(const kestrel_node_list *l)
{
    return (l && l->magic == MAGIC_NODES) ? l->pb->n_nodes : 0;
}

const char *kestrel_node_name(const kestrel_node_list *l, size_t i) { return NODES_OK(l, i) ? l->pb->nodes[i]->name : ""; }
const char *kestrel_node_pool(const kestrel_node_list *l, size_t i) { return NODES_OK(l, i) ? l->pb->nodes[i]->pool : ""; }

size_t kestrel_node_device_count(const kestrel_node_list *l, size_t i)
{
    return NODES_OK(l, i) ? l->pb->nodes[i]->n_devices : 0;
}

const kestrel_node_device *kestrel_node_device_at(const kestrel_node_list *l, size_t i, size_t k)
{
    return (NODES_OK(l, i) && k < l->pb->nodes[i]->n_devices) ? &l->devs[i][k] : NULL;
}
