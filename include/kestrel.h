/*
 * kestrel.h - the public API of libkestrel.
 *
 * libkestrel submits and follows training jobs on a kestreld service, queries this
 * host's GPUs and picks devices. Conventions (README.md, docs/threading.md):
 *   - every fallible function returns 0 or a negative KESTREL_E* code and sets a
 *     thread-local record read with kestrel_error_last();
 *   - "owned" results come back through **out and are freed with the matching
 *     _free; "borrowed" results live as long as their parent handle; "filled"
 *     results are written into a caller's kestrel_buf (release: kestrel_buf_dispose);
 *   - options structs start with a version field; initialise them with the
 *     matching _INIT macro; zero fields mean "default"; NULL options mean defaults;
 *   - a handle may be used by one thread at a time; different handles concurrently.
 * Call kestrel_init() once before anything else, kestrel_shutdown() at the end.
 */
#ifndef KESTREL_H
#define KESTREL_H

#include "kestrel/common.h"
#include "kestrel/version.h"
#include "kestrel/errors.h"
#include "kestrel/buffer.h"
#include "kestrel/client.h"
#include "kestrel/job.h"
#include "kestrel/queue.h"
#include "kestrel/gpu.h"
#include "kestrel/node.h"
#include "kestrel/repo.h"
#include "kestrel/token.h"
#include "kestrel/code.h"
#include "kestrel/alerts.h"

#endif
