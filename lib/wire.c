/* lib/wire.c - protobuf codec and the generic proto3 JSON mapper over protobuf-c descriptors.
 *
 * One mapper serves every message: it walks the ProtobufCMessageDescriptor,
 * so adding a message to proto/kestrel.proto needs no code here. */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include <openssl/evp.h>
#include "wire.h"

/* ---- helpers over field storage ----------------------------------------------- */

static size_t elem_size(ProtobufCType t)
{
    switch (t) {
    case PROTOBUF_C_TYPE_INT32: case PROTOBUF_C_TYPE_SINT32: case PROTOBUF_C_TYPE_SFIXED32:
    case PROTOBUF_C_TYPE_UINT32: case PROTOBUF_C_TYPE_FIXED32: return 4;
    case PROTOBUF_C_TYPE_INT64: case PROTOBUF_C_TYPE_SINT64: case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_UINT64: case PROTOBUF_C_TYPE_FIXED64: return 8;
    case PROTOBUF_C_TYPE_FLOAT: return sizeof(float);
    case PROTOBUF_C_TYPE_DOUBLE: return sizeof(double);
    case PROTOBUF_C_TYPE_BOOL: return sizeof(protobuf_c_boolean);
    case PROTOBUF_C_TYPE_ENUM: return sizeof(int);
    case PROTOBUF_C_TYPE_STRING: return sizeof(char *);
    case PROTOBUF_C_TYPE_BYTES: return sizeof(ProtobufCBinaryData);
    case PROTOBUF_C_TYPE_MESSAGE: return sizeof(ProtobufCMessage *);
    }
    return 0;
}

#define AT(msg, off) ((void *)((char *)(msg) + (off)))
#define CAT(msg, off) ((const void *)((const char *)(msg) + (off)))

/* Is a singular field present (proto3 optional / oneof)? Plain proto3 fields always are. */
static int field_present(const ProtobufCMessage *m, const ProtobufCFieldDescriptor *f)
{
    if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF)
        return *(const uint32_t *)CAT(m, f->quantifier_offset) == f->id;
    if (f->label == PROTOBUF_C_LABEL_OPTIONAL || f->label == PROTOBUF_C_LABEL_REQUIRED) {
        if (f->type == PROTOBUF_C_TYPE_MESSAGE || f->type == PROTOBUF_C_TYPE_STRING)
            return *(void *const *)CAT(m, f->offset) != NULL;
        return f->label == PROTOBUF_C_LABEL_REQUIRED || *(const protobuf_c_boolean *)CAT(m, f->quantifier_offset);
    }
    if (f->type == PROTOBUF_C_TYPE_MESSAGE)
        return *(void *const *)CAT(m, f->offset) != NULL;
    return 1;
}

/* ---- to JSON ----------------------------------------------------------------- */

static cJSON *message_to_cjson(const ProtobufCMessage *m);

static cJSON *float_to_cjson(double d)
{
    if (isnan(d))
        return cJSON_CreateString("NaN");
    if (isinf(d))
        return cJSON_CreateString(d > 0 ? "Infinity" : "-Infinity");
    return cJSON_CreateNumber(d);
}

static cJSON *value_to_cjson(const ProtobufCFieldDescriptor *f, const void *p)
{
    char tmp[32];
    switch (f->type) {
    case PROTOBUF_C_TYPE_INT32: case PROTOBUF_C_TYPE_SINT32: case PROTOBUF_C_TYPE_SFIXED32:
        return cJSON_CreateNumber(*(const int32_t *)p);
    case PROTOBUF_C_TYPE_UINT32: case PROTOBUF_C_TYPE_FIXED32:
        return cJSON_CreateNumber(*(const uint32_t *)p);
    case PROTOBUF_C_TYPE_INT64: case PROTOBUF_C_TYPE_SINT64: case PROTOBUF_C_TYPE_SFIXED64:
        snprintf(tmp, sizeof(tmp), "%" PRId64, *(const int64_t *)p);
        return cJSON_CreateString(tmp);
    case PROTOBUF_C_TYPE_UINT64: case PROTOBUF_C_TYPE_FIXED64:
        snprintf(tmp, sizeof(tmp), "%" PRIu64, *(const uint64_t *)p);
        return cJSON_CreateString(tmp);
    case PROTOBUF_C_TYPE_FLOAT:
        return float_to_cjson(*(const float *)p);
    case PROTOBUF_C_TYPE_DOUBLE:
        return float_to_cjson(*(const double *)p);
    case PROTOBUF_C_TYPE_BOOL:
        return cJSON_CreateBool(*(const protobuf_c_boolean *)p);
    case PROTOBUF_C_TYPE_ENUM: {
        const ProtobufCEnumValue *ev = protobuf_c_enum_descriptor_get_value(f->descriptor, *(const int *)p);
        return ev ? cJSON_CreateString(ev->name) : cJSON_CreateNumber(*(const int *)p);
    }
    case PROTOBUF_C_TYPE_STRING:
        return cJSON_CreateString(*(const char *const *)p ? *(const char *const *)p : "");
    case PROTOBUF_C_TYPE_BYTES: {
        const ProtobufCBinaryData *b = p;
        size_t n = 4 * ((b->len + 2) / 3) + 1;
        char *enc = malloc(n);
        cJSON *s;
        if (enc == NULL)
            return NULL;
        EVP_EncodeBlock((unsigned char *)enc, b->data, (int)b->len);
        s = cJSON_CreateString(enc);
        free(enc);
        return s;
    }
    case PROTOBUF_C_TYPE_MESSAGE:
        return message_to_cjson(*(const ProtobufCMessage *const *)p);
    }
    return NULL;
}

static cJSON *message_to_cjson(const ProtobufCMessage *m)
{
    const ProtobufCMessageDescriptor *d = m->descriptor;
    cJSON *obj = cJSON_CreateObject();
    if (obj == NULL)
        return NULL;
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        cJSON *v;
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            size_t n = *(const size_t *)CAT(m, f->quantifier_offset);
            const char *arr = *(const char *const *)CAT(m, f->offset);
            v = cJSON_CreateArray();
            for (size_t k = 0; v && k < n; k++) {
                cJSON *e = value_to_cjson(f, arr + k * elem_size(f->type));
                if (e == NULL) { cJSON_Delete(v); v = NULL; break; }
                cJSON_AddItemToArray(v, e);
            }
        } else {
            if (!field_present(m, f))
                continue;
            v = value_to_cjson(f, CAT(m, f->offset));
        }
        if (v == NULL) {
            cJSON_Delete(obj);
            return NULL;
        }
        cJSON_AddItemToObject(obj, f->name, v);
    }
    return obj;
}

/* v printed (unformatted, or pretty) onto out, then deleted; NULL v: out of memory. */
static int put_cjson(kestrel_buf *out, cJSON *v, int pretty)
{
    char *s = v == NULL ? NULL : pretty ? cJSON_Print(v) : cJSON_PrintUnformatted(v);
    int rc;
    cJSON_Delete(v);
    if (s == NULL)
        return kestrel__error_oom();
    rc = kestrel__buf_puts(out, s);
    cJSON_free(s);
    return rc;
}

/* A message written into a file a block at a time (kestrel__wire_to_json_fd, kestrel__wire_pack_fd):
 * buf gathers what is written and goes to fd at `at` once it holds a block. */
#define SINK_BLOCK (256u * 1024)
typedef struct {
    ProtobufCBuffer base;   /* protobuf-c's appender, for its packer */
    kestrel_buf buf;
    int fd;
    int64_t at;
    int rc, err;            /* err: errno of a failed write */
} sink;

static int sink_flush(sink *s)
{
    if (s->rc == 0 && s->buf.size && kestrel__pwrite_all(s->fd, s->buf.ptr, s->buf.size, s->at) < 0) {
        s->err = errno;
        s->rc = kestrel__error_set(KESTREL_EIO, "cannot write a message into its file: %s", strerror(s->err));
    }
    s->at += (int64_t)s->buf.size;
    s->buf.size = 0;
    return s->rc;
}

static void sink_append(ProtobufCBuffer *b, size_t len, const uint8_t *data)
{
    sink *s = (sink *)b;
    if (s->rc == 0 && (s->rc = kestrel__buf_put(&s->buf, data, len)) == 0 && s->buf.size >= SINK_BLOCK)
        sink_flush(s);
}

static int message_to_text(kestrel_buf *out, const ProtobufCMessage *m, sink *s);

static int value_to_text(kestrel_buf *out, const ProtobufCFieldDescriptor *f, const void *p)
{
    return f->type == PROTOBUF_C_TYPE_MESSAGE ? message_to_text(out, *(const ProtobufCMessage *const *)p, NULL)
                                              : put_cjson(out, value_to_cjson(f, p), 0);
}

/* m as message_to_cjson's tree prints unformatted, byte for byte, without the tree: each value is
 * made, printed and freed in turn (a dataset's manifest, 20,000 files, took 28 MB as one tree; the
 * text alone is a fifth of that). Field names are protoc's identifiers: nothing in them to escape.
 * With s (out is then s->buf), what is made goes to s's file between the elements of m's lists. */
static int message_to_text(kestrel_buf *out, const ProtobufCMessage *m, sink *s)
{
    const ProtobufCMessageDescriptor *d = m->descriptor;
    int rc = kestrel__buf_puts(out, "{"), first = 1;
    for (unsigned i = 0; i < d->n_fields && rc == 0; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        int repeated = f->label == PROTOBUF_C_LABEL_REPEATED;
        if (!repeated && !field_present(m, f))
            continue;
        if ((rc = kestrel__buf_printf(out, "%s\"%s\":", first ? "" : ",", f->name)) < 0)
            break;
        first = 0;
        if (repeated) {
            size_t n = *(const size_t *)CAT(m, f->quantifier_offset);
            const char *arr = *(const char *const *)CAT(m, f->offset);
            rc = kestrel__buf_puts(out, "[");
            for (size_t k = 0; k < n && rc == 0; k++)
                if ((rc = k ? kestrel__buf_puts(out, ",") : 0) == 0 &&
                    (rc = value_to_text(out, f, arr + k * elem_size(f->type))) == 0 && s && out->size >= SINK_BLOCK)
                    rc = sink_flush(s);
            if (rc == 0)
                rc = kestrel__buf_puts(out, "]");
        } else {
            rc = value_to_text(out, f, CAT(m, f->offset));
        }
    }
    return rc < 0 ? rc : kestrel__buf_puts(out, "}");
}

int kestrel__wire_to_json(kestrel_buf *out, const ProtobufCMessage *msg, int pretty)
{
    size_t at = out->size;
    int rc;
    if (pretty)   /* one tree: cJSON's printer lays it out */
        return put_cjson(out, message_to_cjson(msg), 1);
    if ((rc = message_to_text(out, msg, NULL)) < 0 && out->ptr) {   /* nothing half-written */
        out->size = at;
        out->ptr[at] = '\0';
    }
    return rc;
}

int kestrel__wire_to_json_fd(int fd, const ProtobufCMessage *msg)
{
    sink s = { .buf = KESTREL_BUF_INIT, .fd = fd };
    int rc = message_to_text(&s.buf, msg, &s);
    if (rc == 0)
        rc = sink_flush(&s);
    kestrel_buf_dispose(&s.buf);
    if (s.err)
        errno = s.err;
    return rc;
}

int kestrel__wire_pack_fd(int fd, const ProtobufCMessage *msg)
{
    sink s = { .base = { .append = sink_append }, .buf = KESTREL_BUF_INIT, .fd = fd };
    protobuf_c_message_pack_to_buffer(msg, &s.base);
    sink_flush(&s);
    kestrel_buf_dispose(&s.buf);
    if (s.err)
        errno = s.err;
    return s.rc;
}

/* ---- from JSON --------------------------------------------------------------- */

static int json_to_message(ProtobufCMessage *m, const cJSON *obj, const char *path);

/* proto3 JSON accepts lowerCamelCase names as well as the proto names */
static const ProtobufCFieldDescriptor *find_field(const ProtobufCMessageDescriptor *d, const char *key)
{
    char snake[128];
    size_t j = 0;
    const ProtobufCFieldDescriptor *f = protobuf_c_message_descriptor_get_field_by_name(d, key);
    if (f)
        return f;
    for (size_t i = 0; key[i] && j + 2 < sizeof(snake); i++) {
        if (isupper((unsigned char)key[i])) {
            snake[j++] = '_';
            snake[j++] = (char)tolower((unsigned char)key[i]);
        } else {
            snake[j++] = key[i];
        }
    }
    snake[j] = '\0';
    return protobuf_c_message_descriptor_get_field_by_name(d, snake);
}

static int bad(const char *path, const char *what)
{
    return kestrel__error_set(KESTREL_EINVALID, "field '%s': %s", path, what);
}

/* Read a JSON number or numeric string as an integer in [lo, hi]. */
static int json_int(const cJSON *v, const char *path, long double lo, long double hi, long double *out)
{
    long double x;
    if (cJSON_IsNumber(v)) {
        x = (long double)v->valuedouble;
    } else if (cJSON_IsString(v) && v->valuestring[0]) {
        char *end;
        errno = 0;
        x = strtold(v->valuestring, &end);
        if (errno || *end)
            return bad(path, "not an integer");
    } else {
        return bad(path, "expected an integer");
    }
    if (x != floorl(x))
        return bad(path, "not an integer");
    if (x < lo || x > hi)
        return bad(path, "integer out of range");
    *out = x;
    return 0;
}

static int json_float(const cJSON *v, const char *path, double *out)
{
    if (cJSON_IsNumber(v)) { *out = v->valuedouble; return 0; }
    if (cJSON_IsString(v)) {
        char *end;
        if (!strcmp(v->valuestring, "NaN")) { *out = NAN; return 0; }
        if (!strcmp(v->valuestring, "Infinity")) { *out = INFINITY; return 0; }
        if (!strcmp(v->valuestring, "-Infinity")) { *out = -INFINITY; return 0; }
        *out = strtod(v->valuestring, &end);
        if (v->valuestring[0] && !*end)
            return 0;
    }
    return bad(path, "expected a number");
}

static int json_enum(const ProtobufCEnumDescriptor *ed, const cJSON *v, const char *path, int *out)
{
    if (cJSON_IsNumber(v)) {
        /* range first: converting a double outside int's range is undefined */
        if (!(v->valuedouble >= INT32_MIN && v->valuedouble <= INT32_MAX) ||
            v->valuedouble != (double)(int)v->valuedouble ||
            !protobuf_c_enum_descriptor_get_value(ed, (int)v->valuedouble))
            return bad(path, "unknown enum value");
        *out = (int)v->valuedouble;
        return 0;
    }
    if (!cJSON_IsString(v))
        return bad(path, "expected an enum name");
    for (unsigned i = 0; i < ed->n_values; i++) {
        if (!strcasecmp(ed->values[i].name, v->valuestring)) {
            *out = ed->values[i].value;
            return 0;
        }
    }
    return kestrel__error_set(KESTREL_EINVALID, "field '%s': unknown %s value '%.64s'", path,
                              ed->short_name, v->valuestring);
}

/* Decode one JSON value into storage p (zeroed or holding the default). */
static int json_to_value(const ProtobufCFieldDescriptor *f, const cJSON *v, void *p, const char *path)
{
    long double x;
    int rc;
    switch (f->type) {
    case PROTOBUF_C_TYPE_INT32: case PROTOBUF_C_TYPE_SINT32: case PROTOBUF_C_TYPE_SFIXED32:
        if ((rc = json_int(v, path, INT32_MIN, INT32_MAX, &x)) < 0) return rc;
        *(int32_t *)p = (int32_t)x; return 0;
    case PROTOBUF_C_TYPE_UINT32: case PROTOBUF_C_TYPE_FIXED32:
        if ((rc = json_int(v, path, 0, UINT32_MAX, &x)) < 0) return rc;
        *(uint32_t *)p = (uint32_t)x; return 0;
    case PROTOBUF_C_TYPE_INT64: case PROTOBUF_C_TYPE_SINT64: case PROTOBUF_C_TYPE_SFIXED64:
        if ((rc = json_int(v, path, (long double)INT64_MIN, (long double)INT64_MAX, &x)) < 0) return rc;
        *(int64_t *)p = (int64_t)x; return 0;
    case PROTOBUF_C_TYPE_UINT64: case PROTOBUF_C_TYPE_FIXED64:
        if ((rc = json_int(v, path, 0, (long double)UINT64_MAX, &x)) < 0) return rc;
        *(uint64_t *)p = (uint64_t)x; return 0;
    case PROTOBUF_C_TYPE_FLOAT: {
        double d;
        if ((rc = json_float(v, path, &d)) < 0) return rc;
        *(float *)p = (float)d; return 0;
    }
    case PROTOBUF_C_TYPE_DOUBLE:
        return json_float(v, path, (double *)p);
    case PROTOBUF_C_TYPE_BOOL:
        if (!cJSON_IsBool(v)) return bad(path, "expected true or false");
        *(protobuf_c_boolean *)p = cJSON_IsTrue(v); return 0;
    case PROTOBUF_C_TYPE_ENUM:
        return json_enum(f->descriptor, v, path, (int *)p);
    case PROTOBUF_C_TYPE_STRING: {
        char *s;
        if (!cJSON_IsString(v)) return bad(path, "expected a string");
        if (!kestrel__utf8_valid(v->valuestring, strlen(v->valuestring)))
            return bad(path, "invalid UTF-8");
        if ((s = kestrel__strdup(v->valuestring)) == NULL) return kestrel__error_oom();
        *(char **)p = s; return 0;
    }
    case PROTOBUF_C_TYPE_BYTES: {
        ProtobufCBinaryData *b = p;
        size_t n;
        int dec;
        if (!cJSON_IsString(v)) return bad(path, "expected a base64 string");
        n = strlen(v->valuestring);
        if (n % 4) return bad(path, "invalid base64");
        b->data = malloc(n / 4 * 3 + 1);
        if (b->data == NULL) return kestrel__error_oom();
        dec = n ? EVP_DecodeBlock(b->data, (const unsigned char *)v->valuestring, (int)n) : 0;
        if (dec < 0) { free(b->data); b->data = NULL; return bad(path, "invalid base64"); }
        if (n >= 1 && v->valuestring[n - 1] == '=') dec--;
        if (n >= 2 && v->valuestring[n - 2] == '=') dec--;
        b->len = (size_t)dec; return 0;
    }
    case PROTOBUF_C_TYPE_MESSAGE: {
        const ProtobufCMessageDescriptor *md = f->descriptor;
        ProtobufCMessage *sub;
        if (!cJSON_IsObject(v)) return bad(path, "expected an object");
        if ((sub = malloc(md->sizeof_message)) == NULL) return kestrel__error_oom();
        protobuf_c_message_init(md, sub);
        *(ProtobufCMessage **)p = sub;   /* owned by the parent from here on */
        return json_to_message(sub, v, path);
    }
    }
    return bad(path, "unsupported type");
}

static int json_to_field(ProtobufCMessage *m, const ProtobufCFieldDescriptor *f, const cJSON *v, const char *path)
{
    if (cJSON_IsNull(v))
        return 0;   /* null means default */
    if (f->label == PROTOBUF_C_LABEL_REPEATED) {
        size_t n = (size_t)cJSON_GetArraySize(v), es = elem_size(f->type), k = 0;
        char *arr;
        const cJSON *e;
        if (!cJSON_IsArray(v))
            return bad(path, "expected an array");
        if (n == 0)
            return 0;
        if ((arr = calloc(n, es)) == NULL)
            return kestrel__error_oom();
        /* publish the array before filling it so that a failure frees what was decoded */
        *(void **)AT(m, f->offset) = arr;
        cJSON_ArrayForEach(e, v) {
            int rc;
            if (cJSON_IsNull(e))
                return bad(path, "null inside an array");
            rc = json_to_value(f, e, arr + k * es, path);
            if (rc < 0) {
                /* a half-decoded submessage is attached but not yet counted */
                if (f->type == PROTOBUF_C_TYPE_MESSAGE && *(ProtobufCMessage **)(arr + k * es))
                    protobuf_c_message_free_unpacked(*(ProtobufCMessage **)(arr + k * es), NULL);
                return rc;
            }
            *(size_t *)AT(m, f->quantifier_offset) = ++k;
        }
        return 0;
    }
    if (f->type == PROTOBUF_C_TYPE_STRING)
        *(char **)AT(m, f->offset) = NULL;   /* replace the shared default; never freed */
    if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF)
        *(uint32_t *)AT(m, f->quantifier_offset) = f->id;
    else if (f->label == PROTOBUF_C_LABEL_OPTIONAL && f->type != PROTOBUF_C_TYPE_STRING &&
             f->type != PROTOBUF_C_TYPE_MESSAGE)
        *(protobuf_c_boolean *)AT(m, f->quantifier_offset) = 1;
    {
        int rc = json_to_value(f, v, AT(m, f->offset), path);
        if (rc < 0 && f->type == PROTOBUF_C_TYPE_STRING && *(char **)AT(m, f->offset) == NULL)
            *(const char **)AT(m, f->offset) = f->default_value ? f->default_value : protobuf_c_empty_string;
        return rc;
    }
}

static int json_to_message(ProtobufCMessage *m, const cJSON *obj, const char *path)
{
    const ProtobufCMessageDescriptor *d = m->descriptor;
    unsigned char seen[256];
    const cJSON *item;
    memset(seen, 0, sizeof(seen));
    cJSON_ArrayForEach(item, obj) {
        char sub[256];
        const ProtobufCFieldDescriptor *f = find_field(d, item->string);
        unsigned idx;
        int rc;
        if (f == NULL)
            return kestrel__error_set(KESTREL_EINVALID, "unknown field '%.64s' in %s", item->string, d->name);
        idx = (unsigned)(f - d->fields);
        if (idx < sizeof(seen)) {
            if (seen[idx])
                return kestrel__error_set(KESTREL_EINVALID, "duplicate field '%s' in %s", f->name, d->name);
            seen[idx] = 1;
        }
        snprintf(sub, sizeof(sub), "%s%s%s", path, *path ? "." : "", f->name);
        if ((rc = json_to_field(m, f, item, sub)) < 0)
            return rc;
    }
    return 0;
}

/* One rule for both codecs: a string holds no NUL (C strings would silently end there, so "a\0b"
 * would become "a"). cJSON decodes \u0000 into the string, so the raw text is checked. */
static int json_has_nul(const char *data, size_t len)
{
    for (size_t i = 0; i + 1 < len; i++) {
        if (data[i] == '\0')
            return 1;
        if (data[i] != '\\')
            continue;
        if (data[i + 1] == 'u' && i + 5 < len && !memcmp(data + i + 2, "0000", 4))
            return 1;
        i++;   /* skip the escaped character, so "\\u0000" is a backslash and text */
    }
    return len && data[len - 1] == '\0';
}

int kestrel__wire_from_json(ProtobufCMessage **out, const ProtobufCMessageDescriptor *desc,
                            const char *data, size_t len)
{
    cJSON *root;
    ProtobufCMessage *m;
    int rc;
    *out = NULL;
    if (json_has_nul(data, len))
        return kestrel__error_set(KESTREL_EINVALID, "JSON body for %s: a string holds a NUL character (\\u0000)",
                                  desc->name);
    root = cJSON_ParseWithLength(data, len);
    if (root == NULL)
        return kestrel__error_set(KESTREL_EINVALID, "malformed JSON body for %s", desc->name);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return kestrel__error_set(KESTREL_EINVALID, "JSON body for %s must be an object", desc->name);
    }
    if ((m = malloc(desc->sizeof_message)) == NULL) {
        cJSON_Delete(root);
        return kestrel__error_oom();
    }
    protobuf_c_message_init(desc, m);
    rc = json_to_message(m, root, "");
    cJSON_Delete(root);
    if (rc < 0) {
        protobuf_c_message_free_unpacked(m, NULL);
        return rc;
    }
    *out = m;
    return 0;
}

/* ---- protobuf ---------------------------------------------------------------- */

static int validate(const ProtobufCMessage *m, const char *path)
{
    const ProtobufCMessageDescriptor *d = m->descriptor;
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        size_t n = 1;
        const char *base = CAT(m, f->offset);
        if (f->type != PROTOBUF_C_TYPE_ENUM && f->type != PROTOBUF_C_TYPE_STRING && f->type != PROTOBUF_C_TYPE_MESSAGE)
            continue;
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            n = *(const size_t *)CAT(m, f->quantifier_offset);
            base = *(const char *const *)base;
        } else if (!field_present(m, f)) {
            continue;
        }
        for (size_t k = 0; k < n; k++) {
            const void *p = base + k * elem_size(f->type);
            if (f->type == PROTOBUF_C_TYPE_ENUM && !protobuf_c_enum_descriptor_get_value(f->descriptor, *(const int *)p))
                return kestrel__error_set(KESTREL_EINVALID, "field '%s%s%s': unknown enum value %d", path,
                                          *path ? "." : "", f->name, *(const int *)p);
            if (f->type == PROTOBUF_C_TYPE_STRING) {
                const char *s = *(const char *const *)p;
                if (s && !kestrel__utf8_valid(s, strlen(s)))
                    return kestrel__error_set(KESTREL_EINVALID, "field '%s': invalid UTF-8", f->name);
            }
            if (f->type == PROTOBUF_C_TYPE_MESSAGE && *(const ProtobufCMessage *const *)p) {
                int rc = validate(*(const ProtobufCMessage *const *)p, f->name);
                if (rc < 0)
                    return rc;
            }
        }
    }
    return 0;
}

int kestrel__wire_set_string(char **field, const char *v)
{
    char *copy = kestrel__strdup(v);
    if (copy == NULL)
        return kestrel__error_oom();
    if (*field != protobuf_c_empty_string)
        free(*field);
    *field = copy;
    return 0;
}

int kestrel__wire_pack(kestrel_buf *out, const ProtobufCMessage *msg)
{
    size_t n = protobuf_c_message_get_packed_size(msg);
    /* into an empty buffer: exactly its size (grown by doubling, a 3.3 MB manifest took 4 MiB) */
    int rc = out->size == 0 ? kestrel__buf_reserve(out, n + 1) : kestrel__buf_grow(out, n);
    if (rc < 0)
        return rc;
    protobuf_c_message_pack(msg, (uint8_t *)out->ptr + out->size);
    out->size += n;
    out->ptr[out->size] = '\0';
    return 0;
}

int kestrel__wire_pack_element(kestrel_buf *out, unsigned field, const ProtobufCMessage *msg)
{
    uint8_t head[20];
    size_t n = protobuf_c_message_get_packed_size(msg), k = 0;
    uint64_t v = ((uint64_t)field << 3) | 2;   /* length-delimited */
    int rc;
    for (int i = 0; i < 2; i++, v = n) {   /* the key, then the length: varints */
        for (; v >= 0x80; v >>= 7)
            head[k++] = (uint8_t)(v | 0x80);
        head[k++] = (uint8_t)v;
    }
    if ((rc = kestrel__buf_put(out, head, k)) < 0 || (rc = kestrel__buf_grow(out, n)) < 0)
        return rc;
    protobuf_c_message_pack(msg, (uint8_t *)out->ptr + out->size);
    out->size += n;
    out->ptr[out->size] = '\0';
    return 0;
}

int kestrel__wire_next_field(const uint8_t *p, size_t len, size_t *at, unsigned *field, unsigned *type,
                             const uint8_t **data, size_t *n)
{
    size_t i = *at, j;
    uint64_t key, size = 0;
    if (kestrel__wire_varint(p, len, &i, &key) < 0)   /* none, cut short, or longer than a varint may be */
        return len - *at < 10 ? 0 : kestrel__error_set(KESTREL_EINVALID, "malformed protobuf record");
    if ((key >> 3) == 0 || (key >> 3) > UINT32_MAX)
        return kestrel__error_set(KESTREL_EINVALID, "malformed protobuf record (key %llu)", (unsigned long long)key);
    j = i;
    switch (key & 7) {
    case 0:   /* a varint: its bytes */
        if (kestrel__wire_varint(p, len, &i, &size) < 0)
            return len - j < 10 ? 0 : kestrel__error_set(KESTREL_EINVALID, "malformed protobuf record");
        size = i - j;
        i = j;
        break;
    case 1: size = 8; break;
    case 5: size = 4; break;
    case 2:
        if (kestrel__wire_varint(p, len, &i, &size) < 0)
            return len - j < 10 ? 0 : kestrel__error_set(KESTREL_EINVALID, "malformed protobuf record");
        break;
    default:
        return kestrel__error_set(KESTREL_EINVALID, "malformed protobuf record (key %llu)", (unsigned long long)key);
    }
    if (size > len - i)
        return 0;
    *field = (unsigned)(key >> 3);
    *type = (unsigned)(key & 7);
    *data = p + i;
    *n = (size_t)size;
    *at = i + (size_t)size;
    return 1;
}

/* data, read by kestrel__wire_scan already, decoded and validated */
static int unpack_scanned(ProtobufCMessage **out, const ProtobufCMessageDescriptor *desc, const uint8_t *data,
                          size_t len)
{
    ProtobufCMessage *m;
    int rc;
    if ((m = protobuf_c_message_unpack(desc, NULL, len, data)) == NULL)
        return kestrel__error_set(KESTREL_EINVALID, "malformed protobuf body for %s", desc->name);
    if ((rc = validate(m, "")) < 0) {
        protobuf_c_message_free_unpacked(m, NULL);
        return rc;
    }
    *out = m;
    return 0;
}

int kestrel__wire_unpack(ProtobufCMessage **out, const ProtobufCMessageDescriptor *desc,
                         const uint8_t *data, size_t len)
{
    int rc;
    *out = NULL;
    return (rc = kestrel__wire_scan(desc, data, len, NULL)) < 0 ? rc : unpack_scanned(out, desc, data, len);
}

int kestrel__wire_decode(ProtobufCMessage **out, const ProtobufCMessageDescriptor *desc,
                         const char *content_type, const void *data, size_t len)
{
    return kestrel__wire_decode_charged(out, desc, content_type, data, len, NULL, NULL);
}

int kestrel__wire_decode_charged(ProtobufCMessage **out, const ProtobufCMessageDescriptor *desc,
                                 const char *content_type, const void *data, size_t len,
                                 int (*charge)(void *ctx, uint64_t cost), void *ctx)
{
    uint64_t cost = 0;
    int rc, pb = content_type && strstr(content_type, "protobuf");
    *out = NULL;
    if (charge == NULL)
        return pb ? kestrel__wire_unpack(out, desc, data, len) : kestrel__wire_from_json(out, desc, data, len);
    /* priced in the walk that checks it (protobuf), charged, then decoded without a second walk */
    if ((rc = kestrel__wire_decode_cost(desc, content_type, data, len, &cost)) < 0 || (rc = charge(ctx, cost)) < 0)
        return rc;
    return pb ? unpack_scanned(out, desc, data, len) : kestrel__wire_from_json(out, desc, data, len);
}

int kestrel__wire_encode(kestrel_buf *out, const ProtobufCMessage *msg, int as_json)
{
    return as_json ? kestrel__wire_to_json(out, msg, 0) : kestrel__wire_pack(out, msg);
}
