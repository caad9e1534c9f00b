/* tests/fuzz/wire_fuzzer.c - every byte string into the request decoders (JSON and protobuf) and
 * what they cost (kestrel__wire_decode_cost: a price for whatever protobuf decodes), and what
 * decodes back out through the encoders: no crash, no leak, round trips stable; and into
 * the reader of fields (kestrel__wire_next_field, as a pull's and a push's temp files are read). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "wire.h"

/* flat (unformatted) is what cJSON prints, unformatted, of pretty's tree. */
static int same_as_tree(const char *flat, const char *pretty)
{
    cJSON *tree = cJSON_Parse(pretty);
    char *s = tree ? cJSON_PrintUnformatted(tree) : NULL;
    int same = s && !strcmp(flat, s);
    cJSON_free(s);
    cJSON_Delete(tree);
    return same;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len);

/* every message kestreld decodes from a request, and the replies libkestrel decodes */
static const ProtobufCMessageDescriptor *const types[] = {
    &kestrel__v1__job_spec__descriptor, &kestrel__v1__job__descriptor, &kestrel__v1__metric_batch__descriptor,
    &kestrel__v1__log_chunk__descriptor, &kestrel__v1__token_request__descriptor, &kestrel__v1__node_list__descriptor,
    &kestrel__v1__job_update__descriptor, &kestrel__v1__manifest__descriptor, &kestrel__v1__alias_update__descriptor,
    &kestrel__v1__chunk_query__descriptor, &kestrel__v1__user__descriptor, &kestrel__v1__model_settings__descriptor,
    &kestrel__v1__backup_request__descriptor, &kestrel__v1__token_list__descriptor, &kestrel__v1__queue__descriptor,
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
        ProtobufCMessage *m = NULL, *again = NULL;
        kestrel_buf json = KESTREL_BUF_INIT, json2 = KESTREL_BUF_INIT, pb = KESTREL_BUF_INIT;
        uint64_t cost;
        /* what a decode costs is read off every body the decoder takes (kestreld charges it first) */
        int priced = kestrel__wire_decode_cost(types[t], KESTREL__CT_PROTOBUF, data, len, &cost) == 0;
        if (kestrel__wire_decode_cost(types[t], KESTREL__CT_JSON, data, len, &cost) != 0)
            abort();
        if (kestrel__wire_unpack(&m, types[t], data, len) == 0 && !priced)
            abort();
        if (m)
            protobuf_c_message_free_unpacked(m, NULL);
        m = NULL;
        if (kestrel__wire_from_json(&m, types[t], (const char *)data, len) == 0 ||
            kestrel__wire_unpack(&m, types[t], data, len) == 0) {
            /* whatever decodes must encode, and decode again to the same JSON */
            if (kestrel__wire_to_json(&json, m, 0) != 0 || kestrel__wire_pack(&pb, m) != 0)
                abort();
            if (kestrel__wire_from_json(&again, types[t], json.ptr, json.size) != 0)
                abort();
            if (kestrel__wire_to_json(&json2, again, 0) != 0 || strcmp(json.ptr, json2.ptr) != 0)
                abort();
            kestrel_buf_dispose(&json2);   /* and the JSON written a value at a time is the tree's */
            if (kestrel__wire_to_json(&json2, m, 1) != 0 || !same_as_tree(json.ptr, json2.ptr))
                abort();
        }
        if (m)
            protobuf_c_message_free_unpacked(m, NULL);
        if (again)
            protobuf_c_message_free_unpacked(again, NULL);
        kestrel_buf_dispose(&json);
        kestrel_buf_dispose(&json2);
        kestrel_buf_dispose(&pb);
    }
    {   /* read as list records (a push's chunk list): each one inside the input, after the last */
        size_t at = 0, n, was;
        const uint8_t *rec;
        unsigned field, type;
        int rc;
        while (was = at, (rc = kestrel__wire_next_field(data, len, &at, &field, &type, &rec, &n)) == 1)
            if (at <= was || at > len || rec <= data + was || rec + n != data + at || field == 0 || type == 3 ||
                type == 4 || type > 5)
                abort();
        if (rc != 0 && rc != KESTREL_EINVALID)
            abort();
        kestrel_error_clear();
    }
    return 0;
}
