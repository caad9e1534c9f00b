/* lib/wire.h - protobuf and the one generic protobuf <-> JSON mapper (proto3 JSON mapping). */
#ifndef KESTREL_WIRE_H
#define KESTREL_WIRE_H

#include <protobuf-c/protobuf-c.h>
#include "internal.h"
#include "kestrel.pb-c.h"

#define KESTREL__CT_PROTOBUF "application/x-protobuf"
#define KESTREL__CT_JSON "application/json"

/* Serialise msg as JSON (proto field names; int64 as strings; enums by name; all scalars emitted). */
int kestrel__wire_to_json(kestrel_buf *out, const ProtobufCMessage *msg, int pretty);
/* msg as kestrel__wire_to_json writes it unformatted, or as kestrel__wire_pack does (_pack_fd), into
 * fd from offset 0, a block of 256 KiB at a time: a long manifest is never held as text (a 50,000-file
 * dataset's JSON is 13 MB). KESTREL_EIO, errno set, where fd cannot be written (what was written
 * stays). */
int kestrel__wire_to_json_fd(int fd, const ProtobufCMessage *msg);
int kestrel__wire_pack_fd(int fd, const ProtobufCMessage *msg);
/* Parse JSON into a new message of type desc (free with protobuf_c_message_free_unpacked).
 * Unknown fields, wrong types, unknown enum names, bad UTF-8: KESTREL_EINVALID with a message. */
int kestrel__wire_from_json(ProtobufCMessage **out, const ProtobufCMessageDescriptor *desc,
                            const char *data, size_t len);
/* Replace a string field of a message (malloc'd, or protobuf-c's shared empty string) with a copy of v. */
int kestrel__wire_set_string(char **field, const char *v);
/* Serialise msg as protobuf. */
int kestrel__wire_pack(kestrel_buf *out, const ProtobufCMessage *msg);
/* Append msg as one element of the repeated message field number `field` of a message whose encoding
 * out holds: its key, its length, its bytes (protobuf-c's). A message's encoding followed by such
 * records decodes as that message with these elements appended, in order (protobuf's merge rule), so
 * a long list can be written, kept and sent an element at a time. */
int kestrel__wire_pack_element(kestrel_buf *out, unsigned field, const ProtobufCMessage *msg);
/* The varint at *at of p[0, len) into *v, *at moved past it: 0, or -1 where it is cut short or longer
 * than 10 bytes. */
int kestrel__wire_varint(const uint8_t *p, size_t len, size_t *at, uint64_t *v);
/* The field at *at of p[0, len), of any wire type: its number, its wire type (0 varint, 1 64-bit,
 * 2 length-delimited, 5 32-bit), its value's bytes (of a varint its encoding, of a length-delimited
 * field what follows the length), and *at moved past it (1). 0 where p ends before the field does
 * (at the end, or cut short: read more and ask again), KESTREL_EINVALID where it is no field (a
 * group, field 0, a varint longer than 10 bytes). */
int kestrel__wire_next_field(const uint8_t *p, size_t len, size_t *at, unsigned *field, unsigned *type,
                             const uint8_t **data, size_t *n);
/* Parse protobuf into a new message and validate it (known enum values, UTF-8 strings). */
int kestrel__wire_unpack(ProtobufCMessage **out, const ProtobufCMessageDescriptor *desc,
                         const uint8_t *data, size_t len);
/* protobuf data read before it is decoded (lib/wire_scan.c): 0, or KESTREL_EINVALID for what the
 * contract refuses (unknown fields, NUL in strings, groups, nesting past 32, malformed records);
 * cost (may be NULL) gets the most decoding it allocates at once. */
int kestrel__wire_scan(const ProtobufCMessageDescriptor *desc, const uint8_t *data, size_t len, uint64_t *cost);
/* What decoding data (as kestrel__wire_decode would) may allocate at most, in *cost (lib/wire_scan.c):
 * 0, or KESTREL_EINVALID for protobuf the decoder would refuse. */
int kestrel__wire_decode_cost(const ProtobufCMessageDescriptor *desc, const char *content_type, const void *data,
                              size_t len, uint64_t *cost);
/* Decode by content type: a type containing "protobuf" is protobuf, anything else JSON. */
int kestrel__wire_decode(ProtobufCMessage **out, const ProtobufCMessageDescriptor *desc,
                         const char *content_type, const void *data, size_t len);
/* The same, its price (kestrel__wire_decode_cost) passed to charge first, in the walk that checks a
 * protobuf body: a charge < 0 is returned as it is, nothing decoded; a body refused before it is
 * priced is never charged. charge NULL: kestrel__wire_decode. */
int kestrel__wire_decode_charged(ProtobufCMessage **out, const ProtobufCMessageDescriptor *desc,
                                 const char *content_type, const void *data, size_t len,
                                 int (*charge)(void *ctx, uint64_t cost), void *ctx);
/* Encode as protobuf (as_json == 0) or JSON. */
int kestrel__wire_encode(kestrel_buf *out, const ProtobufCMessage *msg, int as_json);

#endif
