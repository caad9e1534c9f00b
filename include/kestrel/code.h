/* kestrel/code.h - a job's code from a local directory.
 *
 * kestrel_code_push() snapshots a directory as a directory version of the repository: the files git
 * would keep there (its .gitignore files, your global git excludes, and a .kestrelignore at the top,
 * in the same syntax; .git itself never), pushed and deduplicated like any version, so after an
 * edit only the changed chunks travel. kestrel_job_spec_set_code() then runs a job in a fresh copy
 * of it. Reading the ignore rules needs git on the machine that pushes. */
#ifndef KESTREL_CODE_H
#define KESTREL_CODE_H

#include "common.h"
#include "buffer.h"
#include "client.h"
#include "repo.h"

KESTREL_BEGIN_DECL

/** Options of kestrel_code_push(). Initialise with KESTREL_CODE_OPTIONS_INIT. */
typedef struct kestrel_code_options {
    unsigned int version;           /**< KESTREL_CODE_OPTIONS_VERSION */
    int64_t max_bytes;              /**< refuse a snapshot bigger than this (naming its biggest files); 0: 1 GiB */
    const char *name;               /**< repository name; NULL: "USER/code/DIRNAME" (USER: whom the token names) */
    kestrel_progress_cb progress;   /**< NULL: no progress */
    void *progress_payload;
} kestrel_code_options;

#define KESTREL_CODE_OPTIONS_VERSION 1
#define KESTREL_CODE_OPTIONS_INIT { KESTREL_CODE_OPTIONS_VERSION }
#define KESTREL_CODE_MAX_BYTES_DEFAULT ((int64_t)1 << 30)

KESTREL_API int kestrel_code_options_init(kestrel_code_options *opts, unsigned int version);

/**
 * Push the code in dir as the next version of a code model and write its exact reference
 * ("alice/code/proj@4") to ref_out, for kestrel_job_spec_set_code(). When the model's newest
 * version holds exactly these files (paths, modes and bytes: its digest), nothing is pushed and
 * that version's reference is written (the progress callback gets one report, 0 bytes new), so a
 * job submitted again with unchanged code, or refused after its code went, makes no new version
 * (the files are read once more for that). KESTREL_ETOOLARGE past max_bytes, KESTREL_EINVALID for
 * no files or a symlink or special file among them (list it in .kestrelignore),
 * KESTREL_EUNSUPPORTED when git cannot be run.
 */
KESTREL_API int kestrel_code_push(kestrel_buf *ref_out, kestrel_client *client, const char *dir,
                                  const kestrel_code_options *opts);

KESTREL_END_DECL

#endif
