/* Every worker's report (its PHASE, FIRSTERR and PIN lines, what `rkv run`'s
 * launcher reads from the workers' stdout) carried to worker 0 over the store
 * itself, for launches that share no file system and no pipe with the
 * workers (mpirun, srun: `rkv node --scenario F`).
 *
 * The carrier is a reserved tensor, RKV_REPORT_TENSOR, in which worker w owns
 * a block of rows: it pushes (assign) a header and its text there once its
 * workload ended, and worker 0 pulls the blocks until every worker's is
 * complete or the wait runs out. Why a tensor and not a message kind of its
 * own: the servers stay a plain store (no report code, no new message for
 * them to validate), the push and pull paths already bound and check every
 * size and id, and the same works on every backend and over the shm fast
 * path. The one new parser is worker 0's decoder, which treats a block as
 * hostile input: a bounded size, a checksum (a pull may see a block half
 * written), the sender's worker id in every line, each phase at most once,
 * and only the line kinds the report knows. */
#ifndef RKV_REPORT_GATHER_H
#define RKV_REPORT_GATHER_H

#include <stddef.h>
#include <stdint.h>

#include "harness/scenario.h"

#define RKV_REPORT_TENSOR "rkv.report"
#define RKV_REPORT_HDR_BYTES 64u
#define RKV_REPORT_ROW_BYTES 1024u /* rows of 128 i64 elements */

/* Block flags. */
#define RKV_REPORT_TOO_LARGE 1u /* the phase lines alone did not fit: no text */

/* Bytes of each worker's block for sc (a multiple of RKV_REPORT_ROW_BYTES):
 * room for every phase's line and first error, and for pinned winners of
 * the assigned tensors' rows up to 1 MiB. Every rank computes the same. */
uint64_t rkv_report_block_bytes(const struct rkv_scenario *sc);

/* Encodes worker's block into buf (block_bytes, from rkv_report_block_bytes):
 * the PHASE and FIRSTERR lines of text first, then PIN lines while they fit
 * (the others are counted in the header as dropped). Returns the bytes used
 * (header + text), which a push must cover. text need not end in a NUL. */
size_t rkv_report_block_encode(uint8_t *buf, uint64_t block_bytes, uint32_t worker, int status,
                               const char *text, size_t len);

/* A decoded block. */
struct rkv_report_block {
    char *text; /* NUL-terminated, malloc'd; "" when flags has TOO_LARGE */
    int status; /* the worker's workload result: 0 or -RKV_E* */
    uint32_t pins_dropped;
    uint32_t wanted_bytes; /* TOO_LARGE: the text it had */
    uint32_t flags;
};

/* Total bytes (header + text) the header at buf announces, or 0 when buf
 * holds no plausible header of worker's yet (not written, or torn). */
size_t rkv_report_block_used(const uint8_t *buf, uint64_t block_bytes, uint32_t worker);

/* Checks len bytes of worker's block against sc: 0 and *out filled; 1 when
 * it does not verify (not written yet, or a pull that met the push half
 * way: pull again), with why; -RKV_EPROTO for a block that verifies but
 * breaks a rule (it will not get better), with why; -RKV_ENOMEM. */
int rkv_report_block_decode(const uint8_t *buf, size_t len, const struct rkv_scenario *sc,
                            uint32_t worker, struct rkv_report_block *out, char *why,
                            size_t why_len);

struct rkv_client;

/* Worker `worker`'s half: creates the tensor if nobody did yet and pushes
 * the block. Returns 0 or the store's error (message in err). */
int rkv_report_send(struct rkv_client *cli, const struct rkv_scenario *sc, uint32_t worker,
                    int status, const char *text, size_t len, char *err, size_t err_len);

/* What worker 0 gathered: per worker, the block (text NULL: none arrived
 * in time) and, for one that never made it, why. */
struct rkv_report_gathered {
    uint32_t n_workers;
    struct rkv_report_block *blk; /* n_workers */
    char (*why)[160];             /* n_workers: "" or why the block was refused */
    uint32_t missing;             /* workers with no valid block */
};

/* Worker 0's half: pulls the blocks until every worker's is complete or
 * wait_ns passed (on the client's port clock). Returns 0, or a store error
 * that stopped it (message in err): g holds what arrived either way, and
 * must be freed with rkv_report_gathered_free. */
int rkv_report_gather(struct rkv_client *cli, const struct rkv_scenario *sc, uint64_t wait_ns,
                      struct rkv_report_gathered *g, char *err, size_t err_len);
void rkv_report_gathered_free(struct rkv_report_gathered *g);

#endif
