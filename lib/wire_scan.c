/* lib/wire_scan.c - a body read before it is decoded: what the contract refuses that protobuf-c would
 * accept, and how much memory decoding it takes, in one walk.
 *
 * A body's bytes are not what decoding it holds: protobuf-c gives each element of a repeated
 * message field its own struct and each string its own block, so two bytes on the wire (an empty
 * ChunkRef) take about 100 while they decode. kestreld once decoded a 64 MiB commit of empty chunk
 * references into 2.9 GB. kestrel__wire_decode_cost walks the body as the decoder will (the
 * protobuf fields, each by its descriptor; JSON by its tokens) and adds up what each piece allocates,
 * with the allocator's overhead, so a server can take that from its budget first and refuse what it
 * cannot hold. It is an upper bound of the most the decoding holds at once (tests/unit/test_wire_cost.c
 * counts protobuf-c's allocations): a real manifest costs 2.4 to 3.1 times its bytes. */
#include <string.h>
#include <cjson/cJSON.h>
#include "wire.h"

int kestrel__wire_varint(const uint8_t *p, size_t len, size_t *at, uint64_t *v)
{
    *v = 0;
    for (int shift = 0; shift < 64 && *at < len; shift += 7) {
        uint8_t b = p[(*at)++];
        *v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            return 0;
    }
    return -1;
}

/* A malloc'd block of n bytes as glibc holds it: its header, rounded to 16, at least 32. */
static uint64_t block(uint64_t n)
{
    uint64_t b = (n + 8 + 15) & ~(uint64_t)15;
    return b < 32 ? 32 : b;
}

/* The packed scalars of n bytes: a fixed-width one takes in memory what it takes on the wire; a
 * varint one at least a byte on the wire, at most 8 in memory. */
static uint64_t packed(const ProtobufCFieldDescriptor *f, size_t n)
{
    switch (f->type) {
    case PROTOBUF_C_TYPE_FIXED32: case PROTOBUF_C_TYPE_SFIXED32: case PROTOBUF_C_TYPE_FLOAT:
    case PROTOBUF_C_TYPE_FIXED64: case PROTOBUF_C_TYPE_SFIXED64: case PROTOBUF_C_TYPE_DOUBLE:
        return (uint64_t)n;
    default:
        return 8 * (uint64_t)n;
    }
}

/* While protobuf-c decodes a message it keeps a record (32 bytes on 64 bits) of each field it read
 * there: the first 16 on its stack, the rest in slabs of 32, 64, 128... records, beside the message's
 * own memory until it is done (a hostile review: a list of empty elements held 1.7 times what its
 * blocks alone came to). */
#define SCANNED_ON_STACK 16
#define SCANNED_BYTES 32

/* The records protobuf-c keeps of k fields read in one message, beyond those on its stack. */
static uint64_t scanned(uint64_t k)
{
    uint64_t cost = 0;
    for (uint64_t left = k > SCANNED_ON_STACK ? k - SCANNED_ON_STACK : 0, slab = 2 * SCANNED_ON_STACK; left > 0;
         left -= left < slab ? left : slab, slab *= 2)
        cost += block(slab * SCANNED_BYTES);
    return cost;
}

/* What protobuf-c accepts but the contract refuses, read off the wire: fields this schema does not
 * know (the JSON codec refuses them too), NUL inside strings, groups; nested messages alike. cost
 * (may be NULL) gets what decoding allocates: the message, an array for each repeated field (grown
 * to its count at once) and a slot in it for each element, each string's block, nested messages,
 * and the records of the fields scanned. */
static int scan(const ProtobufCMessageDescriptor *d, const uint8_t *p, size_t len, int depth, uint64_t *cost)
{
    size_t at = 0;
    uint64_t fields = 0, mine = block(d->sizeof_message);
    if (depth > 32)
        return kestrel__error_set(KESTREL_EINVALID, "protobuf body for %s nests too deep", d->name);
    for (unsigned i = 0; i < d->n_fields; i++)
        mine += d->fields[i].label == PROTOBUF_C_LABEL_REPEATED ? block(0) : 0;
    while (at < len) {
        uint64_t key, n = 0;
        const ProtobufCFieldDescriptor *f;
        if (kestrel__wire_varint(p, len, &at, &key) < 0)
            return kestrel__error_set(KESTREL_EINVALID, "malformed protobuf body for %s", d->name);
        if ((key >> 3) == 0 || (key >> 3) > UINT32_MAX ||
            (f = protobuf_c_message_descriptor_get_field(d, (unsigned)(key >> 3))) == NULL)
            return kestrel__error_set(KESTREL_EINVALID, "%s has no field number %llu", d->name,
                                      (unsigned long long)(key >> 3));
        fields++;
        switch (key & 7) {
        case 0: if (kestrel__wire_varint(p, len, &at, &n) < 0) goto malformed; break;
        case 1: if (len - at < 8) goto malformed; at += 8; break;
        case 5: if (len - at < 4) goto malformed; at += 4; break;
        case 2:
            if (kestrel__wire_varint(p, len, &at, &n) < 0 || n > len - at)
                goto malformed;
            if (f->type == PROTOBUF_C_TYPE_STRING && memchr(p + at, 0, (size_t)n))
                return kestrel__error_set(KESTREL_EINVALID, "field '%s': a NUL character in a string", f->name);
            if (f->type == PROTOBUF_C_TYPE_STRING || f->type == PROTOBUF_C_TYPE_BYTES)
                mine += block(n + 1);
            else if (f->type == PROTOBUF_C_TYPE_MESSAGE) {
                int rc = scan(f->descriptor, p + at, (size_t)n, depth + 1, cost);
                if (rc < 0)
                    return rc;
            }
            at += (size_t)n;
            break;
        default:
            goto malformed;
        }
        if (f->label == PROTOBUF_C_LABEL_REPEATED)   /* packed scalars: each in the array; else its slot */
            mine += (key & 7) == 2 && f->type != PROTOBUF_C_TYPE_STRING && f->type != PROTOBUF_C_TYPE_BYTES &&
                            f->type != PROTOBUF_C_TYPE_MESSAGE
                        ? packed(f, (size_t)n)
                        : 8;
    }
    if (cost)
        *cost += mine + scanned(fields);
    return 0;
malformed:
    return kestrel__error_set(KESTREL_EINVALID, "malformed protobuf body for %s", d->name);
}

int kestrel__wire_scan(const ProtobufCMessageDescriptor *desc, const uint8_t *data, size_t len, uint64_t *cost)
{
    return scan(desc, data, len, 0, cost);
}

/* The largest message a JSON value of type d may become: d or one nested in it. */
static size_t largest(const ProtobufCMessageDescriptor *d, int depth)
{
    size_t most = d->sizeof_message;
    for (unsigned i = 0; depth < 32 && i < d->n_fields; i++)
        if (d->fields[i].type == PROTOBUF_C_TYPE_MESSAGE) {
            size_t m = largest(d->fields[i].descriptor, depth + 1);
            most = m > most ? m : most;
        }
    return most;
}

/* JSON: cJSON's tree, then the message, both held at once. Each value is a cJSON node and an array
 * slot at most (the first, each after ':' in an object, each element of an array); each object at
 * most the largest message; each string two blocks (cJSON's copy, the message's), whose bytes are
 * the body's. Strings are skipped by their quotes; containers are told apart on a stack of bits as
 * deep as cJSON parses (1000), deeper ones counted as arrays (more, never less). */
static uint64_t json_cost(const ProtobufCMessageDescriptor *d, const char *p, size_t len)
{
    uint64_t values = 1, objects = 0, strings = 0, in_array[1024 / 64] = { 0 };
    size_t depth = 0;
    int in_string = 0;
    for (size_t i = 0; i < len; i++) {
        char c = p[i];
        int arr = depth == 0 || depth > 1024 || (in_array[(depth - 1) / 64] >> ((depth - 1) % 64) & 1);
        if (in_string) {
            i += c == '\\';
            in_string = c != '"';
            continue;
        }
        switch (c) {
        case '"': in_string = 1; strings++; break;
        case ':': values += !arr; break;
        case ',': values += arr; break;
        case '{': case '[':
            objects += c == '{';
            if (++depth <= 1024) {
                uint64_t *w = &in_array[(depth - 1) / 64], bit = (uint64_t)1 << ((depth - 1) % 64);
                *w = c == '[' ? *w | bit : *w & ~bit;
            }
            values += c == '[';   /* its first element, if any */
            break;
        case '}': case ']': depth -= depth > 0; break;
        default: break;
        }
    }
    return values * (block(sizeof(cJSON)) + 8) + objects * block(largest(d, 0)) + strings * 2 * block(0) +
           2 * (uint64_t)len;
}

int kestrel__wire_decode_cost(const ProtobufCMessageDescriptor *desc, const char *content_type, const void *data,
                              size_t len, uint64_t *cost)
{
    *cost = 0;
    if (content_type && strstr(content_type, "protobuf"))
        return scan(desc, data, len, 0, cost);
    *cost = json_cost(desc, data, len);
    return 0;
}
