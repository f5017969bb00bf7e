/* The write-ahead log of one machine (durable mode): an acknowledged push
 * is one record appended to the machine's log and made durable by group
 * commit (one fdatasync for every push waiting, from any server of the
 * machine); the machine's snapshot (snapshot.h) becomes a checkpoint,
 * written when a tensor is created, when the log passes a size and at a
 * clean shutdown. Recovery = the last good snapshot + its logs' records
 * replayed in order.
 *
 * Files, in the durable directory:
 *   rkv-m<M>.snap        the checkpoint of generation S (snapshot.h)
 *   rkv-m<M>.snap.tmp<I> the snapshot before it (or zeros written ahead),
 *                        whose blocks server I's next snapshot overwrites
 *                        before it swaps the two (snapshot.c)
 *   rkv-m<M>.<G>.wal     the pushes applied after the copy of snapshot G,
 *                        until the copy of snapshot G+1 (or later) began
 *   rkv-m<M>.free<K>.wal spare log files (K < RKV_WAL_SPARES): logs a
 *                        checkpoint let go, or files written with zeros
 *                        ahead (durable_log_prewrite), reused for new logs
 *   rkv-m<M>.new.wal     a fresh log being written before its rename
 * A checkpoint of generation G creates log G (header written and synced
 * under a spare's name, then renamed, and the directory synced) before its
 * copy, switches appends to it under the copy lock (no push is being
 * applied then; the client sequences are copied there), syncs the previous
 * log, copies and writes the shard chunk by chunk, each chunk with the
 * LSN the log ended at when it was copied (snapshot.h), syncs log G up to
 * its end before the snapshot takes its name (the log before the page: a
 * chunk holds pushes of log G that must not outlive their records), and,
 * once the snapshot is durable, lets the logs before G go: renamed to
 * spares while
 * there is room, else removed (every log of the machine below G that the
 * directory holds). A crash at any point leaves snapshot S and
 * logs S, S+1, ... that together hold every acknowledged push: recovery
 * replays them in order of generation, a record's row skipped where the
 * snapshot's chunk was copied after it (rkv_wal_set_copies). So a log
 * missing there is refused before anything is applied, naming it: log S
 * when the snapshot was copied from it (any copy LSN names it; it was
 * made durable before the copy), and any log of the lineage holding
 * records after the first missing one (the replay would stop before it).
 * Only a snapshot copied without a log (a build before the log, or of no
 * rows) gets an empty log S, with a warning.
 *
 * Why spares (as PostgreSQL recycles WAL segments and RocksDB's
 * recycle_log_file_num does): a group commit's fdatasync of an appending
 * file also journals the file's new size and extents, and on this kind of
 * disk that halves the bandwidth or worse (dd oflag=dsync 2 MiB: 0.04-0.30
 * GB/s appending vs 0.43-1.1 GB/s overwriting, load 11). In a reused file
 * the records overwrite blocks already written, and fdatasync writes data
 * only. Then the bytes past the log's end are not zeros but records of the
 * file's earlier use: every record therefore names its own place (its LSN
 * and its lineage), and the replay stops at the first bytes that are not a
 * record of this log at this place.
 *
 * Log file format (little-endian), version 2 (version 1 had 64-byte
 * records without LSN, durable hint and lineage; a version 1 log holding
 * no records, as a clean stop leaves it, is rewritten as version 2, one
 * holding records is refused: finish it with the build that wrote it):
 *   header (64 bytes)
 *      0 u64 magic "RKVWAL\0\0"   8 u32 version        12 u32 machine
 *     16 u64 lineage              24 u64 generation G  32 u64 cluster fingerprint
 *     40 u64 wall_ns (creation, Unix)
 *     48 u64 high-water mark: no record of this log lies past this byte
 *        offset (0: not known, as in logs of earlier builds: the whole file
 *        is read)                                 56 4 bytes zero
 *     60 u32 CRC-32C of bytes 0..59
 *   records, back to back from byte 64, each 8-byte aligned:
 *      0 u32 magic "RKWR"         4 u16 type (1: push) 6 u16 zero
 *      8 u32 tensor id           12 u32 client (UINT32_MAX: a push not tracked)
 *     16 u64 sequence (the push's (client, sequence), as the snapshot's)
 *     24 u64 count (rows)        32 u64 row_bytes     40 f64 param
 *     48 u32 op                  52 u32 CRC-32C of the body
 *     56 u64 LSN of this record (G << 40 | its byte offset)
 *     64 u64 durable: the machine's durable LSN when it was appended (every
 *        byte of the log below it had been fdatasync'ed)
 *     72 u32 the lineage's low 32 bits         76 u32 CRC-32C of bytes 0..75
 *     80 body: count x u64 global ids, count x row_bytes rows, zero padding
 *        to a multiple of 8
 * Reading, the refusal rules of the snapshot hold for the header: a wrong
 * magic, version, machine, lineage, generation or fingerprint is refused,
 * naming the file and what. The records end at the first place that holds
 * no complete record of this log (zeros, a record of the file's earlier
 * use, an append a crash interrupted); nothing is cut: the next append
 * overwrites it. A record of this log at this place whose header checks
 * but whose content cannot be (unknown type, impossible sizes, a tensor the
 * snapshot does not hold, ids out of range) is refused with the file, the
 * byte offset and what. So is the end itself when a later record of this
 * log says the log was durable past it (its "durable" field): a synced
 * record no longer reads, i.e. corruption, not a crash; and so is an end
 * torn, or with records of this log past it, before a later log holding
 * records (refused before anything is voided, so at every restart). A
 * damaged record among the last group commit's, with none after it in
 * the log, cannot be told from a torn tail: it ends the records there.
 * A log cut exactly at a record boundary (truncated by hand or by a file
 * system that lost its tail, or zeros from a record's start on) reads as
 * a clean end. It is refused where something says the log went further:
 * for the snapshot's own log, its largest copy LSN (records up to there
 * were synced before the snapshot took its name; a file shorter than that
 * is refused before anything is applied); for a log before another, the
 * durable field of a record of the next log appended while a checkpoint
 * switched logs (before its sync of the old log moved the durable LSN into
 * the new one). Past those, nothing in the format tells the cut from a
 * clean end, and the records cut off, acknowledged or not, are lost
 * without a word: a log's header is written before its records and holds
 * no end, a log's end is written only in later records' durable fields
 * (the last group commit's in none), and a client's sequences on one
 * machine have gaps (its pushes to other machines). What a cut can take
 * so: the last log's records past the snapshot's copy, and an earlier
 * log's records past its last group commit before the next log began.
 * Recovery reads a log through a window (and the largest record), never
 * the file whole: the file may be much longer than its records. It scans
 * the tail past the
 * end for such records (and voids the log's records there, wal_void_past)
 * up to the header's high-water mark only, not to the file's end: a log
 * written ahead up to 1 TiB (durable_log_prewrite) was read whole at every
 * restart. The mark is raised by rewriting the header in place (a
 * 64-byte write within the first sector, which the disk writes whole, as
 * PostgreSQL relies on for pg_control) and an fdatasync: ahead, by a group
 * commit that finds the log within half a step of it (to its end plus
 * RKV_WAL_HWM_STEP; its fdatasync is the commit's), and, should the
 * appends outrun the commits, by the append that would pass it, before it
 * writes (under wal_lock). So every record of this log at its place,
 * synced or not, lies below the mark on disk, and the scan reads at most
 * RKV_WAL_HWM_STEP past the records' end (a log of an earlier build,
 * without a mark, is read to its end once, and gets one at its next
 * append).
 *
 * Positions are LSNs: generation << 40 | byte offset in that log (a log is
 * below 1 TiB; a checkpoint begins a new one).
 *
 * Appends: one lock word in the machine segment (wal_lock) serializes a
 * push's duplicate check, append and apply across the machine's servers
 * (separate processes). Why not an atomic offset reservation: the order of
 * the records must be the order in which pushes to a row were applied (an
 * assign or sgd replayed in another order gives other rows), and a log with
 * a hole (an offset reserved by a server that has not written it yet, or
 * died) would make the records after the hole unreachable at recovery even
 * though they were synced and acknowledged. The append itself is a write
 * into the page cache (microseconds for 4 KiB); the fdatasync, the slow
 * part, happens outside the lock, once for every push waiting.
 *
 * The apply journal (jr_lsn, jr_pos in the machine segment, and a row per
 * shard): from just before a record is written until its push is applied
 * and its sequence marked, jr_lsn names the record and jr_pos the row and
 * segment being applied, that segment's old content saved in the shard's
 * journal row. Whoever takes wal_lock next with jr_lsn set (a push, after
 * taking the lock over from its dead holder, or the dead server's restart)
 * voids a record that was never published, or puts the saved segment back
 * and applies the rest from the record, then marks the sequence
 * (wal.c wal_finish_torn). A checkpoint's copy is refused meanwhile.
 */
#ifndef RKV_WAL_H
#define RKV_WAL_H

#include <stddef.h>
#include <stdint.h>

#include "store/snapshot.h"
#include "store/store_int.h"

#define RKV_WAL_MAGIC 0x00004c4157564b52ull /* "RKVWAL\0\0" */
#define RKV_WAL_VERSION 2u
#define RKV_WAL_HDR_BYTES 64u
#define RKV_WAL_REC_MAGIC 0x52574b52u /* "RKWR" */
#define RKV_WAL_REC_BYTES 80u
/* Spare log files kept for reuse (each as large as the largest log). */
#define RKV_WAL_SPARES 2u
#define RKV_WAL_REC_PUSH 1u
#define RKV_WAL_OFF_BITS 40
#define RKV_WAL_LSN(gen, off) (((uint64_t)(gen) << RKV_WAL_OFF_BITS) | (uint64_t)(off))
#define RKV_WAL_GEN(lsn) ((lsn) >> RKV_WAL_OFF_BITS)
#define RKV_WAL_OFF(lsn) ((lsn) & ((1ull << RKV_WAL_OFF_BITS) - 1))
/* A log past this size, and past RKV_WAL_CHECKPOINT_SHARDS times the
 * machine's shard size, gets a checkpoint (and a new log) after the next
 * group commit. A checkpoint writes the whole shard, and costs about as
 * much per byte as a push (the copy, the CRC, the write: ~0.6 s of the
 * two cores here per GiB, against ~0.7 s per GiB pushed at 1 MiB rows):
 * one per shard's worth of log halved the push rate of a 1 GiB shard
 * (0.76 against 1.37 GB/s for a 1 MiB one); one per four shards' worth
 * costs about a fifth. The price is at recovery, which replays up to
 * about max(256 MiB, 4 x the shard) of log (plus what was pushed while
 * the last checkpoint was written), and on disk, where each log file
 * grows that large (three of them with the spares). */
#define RKV_WAL_CHECKPOINT_BYTES (256ull << 20)
#define RKV_WAL_CHECKPOINT_SHARDS 4u
/* How far the high-water mark of a log's header is raised past the append
 * that needs it: a raise costs an fdatasync under wal_lock, a step more
 * costs recovery a read of up to this much more. */
#define RKV_WAL_HWM_STEP (256ull << 20)
/* Logs after one snapshot recovery looks for: a checkpoint that keeps
 * failing leaves one log per attempt. */
#define RKV_WAL_MAX_CHAIN 4096u

void rkv_wal_file_name(char *buf, size_t len, uint32_t machine, uint64_t gen);

/* One open log file of a task (each task keeps its own, so that the
 * appending task and the syncing task never share a descriptor). */
struct rkv_wal_file {
    int fd; /* -1: none */
    uint64_t gen;
};

/* The task that writes checkpoints, so that a snapshot of a large shard
 * never holds up the acknowledgements of a group commit. */
struct rkv_wal_ckpt {
    struct rkv_snap_writer *sw; /* used by this task only, once started */
    struct rkv_mutex *mu;
    struct rkv_cond *cv;
    struct rkv_task *task;
    /* Under mu: requests (a snapshot that began after `seen`), numbered. */
    uint64_t seen, asked, done;
    int stop, rc;
    char err[256];
};

/* How snapshot G copied a tensor's rows (snapshot.h): chunk k (local rows
 * [k x chunk_rows, ...)) holds exactly the records before lsn[k]. */
struct rkv_wal_copy {
    uint64_t chunk_rows, n_chunks;
    uint64_t *lsn;
    uint64_t lsn_max; /* records from here on apply whole */
};

/* A server's handle on its machine's log. */
struct rkv_wal {
    struct rkv_wal_ckpt ck;
    struct rkv_port *port;
    struct rkv_mach *mc;
    const struct rkv_tensor_table *tensors;
    /* The replay's snapshot's copies, by tensor id (RKV_MAX_TENSORS + 1);
     * NULL: none (every record applies whole). */
    struct rkv_wal_copy *copies;
    char dir[256];
    uint32_t machine;
    uint64_t fingerprint;
    uint64_t checkpoint_bytes;
    uint64_t prewrite_bytes; /* durable_log_prewrite: zeros a fresh log gets */
    uint64_t hwm_step;       /* RKV_WAL_HWM_STEP (tests make it smaller) */
    /* The config's: a push waits half of it for a row lock's live holder
     * before it is refused, unlogged (rkv_shard_rows_free). */
    uint32_t timeout_ms;
    uint64_t created_hwm;     /* the high-water mark (LSN) of the log made last */
    struct rkv_wal_file app;  /* the push path's */
    struct rkv_wal_file sync; /* the durable task's */
    /* A checkpoint in progress (durable task, snap_lock held). */
    uint64_t ckpt_old_end, ckpt_new_hwm;
    int ckpt_sync_locked;
    /* For logs and measurements. */
    uint64_t n_records, bytes_appended, n_syncs, n_shared_syncs, n_checkpoints;
    uint64_t n_reused, n_fresh; /* logs made from a spare, and new files */
    uint64_t n_hwm_raises;      /* header rewrites for the high-water mark */
};

/* tensors: the server's table by id (read on the push path only). */
void rkv_wal_init(struct rkv_wal *w, struct rkv_port *port, struct rkv_mach *mc,
                  const struct rkv_tensor_table *tensors, const struct rkv_config *cfg);
void rkv_wal_free(struct rkv_wal *w);
/* Makes snapshots of sw checkpoints of this log (sets its hooks). */
void rkv_wal_hook(struct rkv_wal *w, struct rkv_snap_writer *sw);
/* Starts the checkpoint task, which owns sw from then on; rkv_wal_stop
 * joins it (sw is the caller's again). */
int rkv_wal_start(struct rkv_wal *w, struct rkv_snap_writer *sw, char *err, size_t err_len);
void rkv_wal_stop(struct rkv_wal *w);

/* One push, as applied and logged. */
struct rkv_wal_push {
    uint32_t tensor_id;
    uint32_t client; /* UINT32_MAX: not tracked (no dedup) */
    uint64_t seq;
    int op;
    double param;
    uint64_t count;
    const uint64_t *ids;
    const uint8_t *rows;
};

/* Durable mode's apply: under the machine's apply lock and wal_lock,
 * skips a (client, sequence) already applied (*dup_p = 1), else checks the
 * op, appends the record, then applies it. ids were checked by the caller.
 * The record is durable after a later rkv_wal_sync. */
int rkv_wal_push(struct rkv_wal *w, struct rkv_tensor *t, const struct rkv_handler_table *ht,
                 const struct rkv_wal_push *p, int *dup_p, char *err, size_t err_len);
/* Group commit: makes every record appended before the call durable, by
 * one fdatasync, or none when another server's sync already covers them. */
int rkv_wal_sync(struct rkv_wal *w, char *err, size_t err_len);
/* The durable task's round, once its batch was applied: a checkpoint
 * (snapshot) that began after `seen` (the machine's snap_started read
 * then), waited for, when asked (a tensor was created), else a group
 * commit of the log and, when the log passed checkpoint_bytes, a
 * checkpoint asked of the checkpoint task and not waited for. */
int rkv_wal_commit(struct rkv_wal *w, int checkpoint, uint64_t seen, char *err, size_t err_len);
/* Bytes in the current log (what a checkpoint would let go). */
uint64_t rkv_wal_pending_bytes(const struct rkv_wal *w);
/* A machine without a snapshot (a first start): -RKV_ECONFIG naming a log
 * of this machine in the directory of generation 2 or more, or holding
 * records (its snapshot was lost or removed: a new run would start over in
 * silence and overwrite them). Log 1 of its header alone, or zeros after
 * it, is a first checkpoint that died before its snapshot, and is no
 * reason. */
int rkv_wal_refuse_orphans(struct rkv_wal *w, char *err, size_t err_len);
/* A restarted server beside the machine's surviving memory: voids whatever
 * a dead server wrote past the last complete record, and finishes the push
 * it died applying (the apply journal, wal.c) when ht can. */
int rkv_wal_trim(struct rkv_wal *w, const struct rkv_handler_table *ht, char *err, size_t err_len);

/* Frees the row locks server tag `tag` of the machine holds in the tensors
 * this server maps (the tag's process is dead), except while the push in
 * the apply journal is another server's under that tag: its row is left
 * to the push's finisher. */
uint32_t rkv_wal_free_rows(struct rkv_wal *w, uint32_t tag);

/* A row lock waited on is held by sibling server `tag`, whose process
 * (proc, read from the machine's reader_proc) is dead: takes the log's lock
 * (unless this server holds it, inside a push), finishes the push the dead
 * one was applying when ht can, and frees its row locks, unless the slot
 * has a new process meanwhile (which frees its predecessor's own).
 * Returns the words freed (the dead holder's log lock aside), or -RKV_E*. */
int rkv_wal_reap(struct rkv_wal *w, const struct rkv_handler_table *ht, uint32_t tag, uint64_t proc,
                 char *err, size_t err_len);

/* What a recovery did. */
struct rkv_wal_replay {
    /* torn: logs whose end is an append a crash interrupted (a record of
     * this log at its place, incomplete). */
    uint64_t logs, records, rows, bytes, dups, torn;
    /* Rows of replayed records the snapshot's copy already held. */
    uint64_t rows_in_copy;
    /* Bytes past the logs' ends looked through for records of theirs. */
    uint64_t scanned;
    /* Where the logs replayed end (paused: those before the paused one). */
    uint64_t end_lsn;
    /* Not 0: the replay paused before the record at this LSN, whose custom
     * op pause_op had no handler (RKV_WAL_PAUSE_CUSTOM). */
    uint64_t paused_lsn;
    uint32_t pause_op;
};

/* rkv_wal_recover's flags. PAUSE_CUSTOM: a record whose custom op has no
 * handler in ht pauses the replay there (rather than refusing the log): a
 * server replays at create, before the application registered its
 * handlers, and finishes the replay at rkv_server_run. */
#define RKV_WAL_PAUSE_CUSTOM 1

/* Takes snapshot s's copy LSNs, for the replay after it (rkv_wal_recover):
 * a record's row applies only if the record is at or past its chunk's
 * copy LSN. Refuses LSNs that name another log than s's generation. */
int rkv_wal_set_copies(struct rkv_wal *w, const struct rkv_snap *s, char *err, size_t err_len);

/* Replays the logs of snapshot generation gen (gen, gen+1, ...) into the
 * machine's tensors (by id, already in shared memory), cutting a torn tail,
 * refusing a corrupted record or a missing log (see above); then points
 * the machine's log state at the end (creating log gen when the snapshot
 * never had one). No other server of the
 * machine may run meanwhile. When it pauses (r->paused_lsn set, returns 0),
 * it has applied the records before that one only and set nothing else up;
 * called again with the same r, it resumes there. */
int rkv_wal_recover(struct rkv_wal *w, uint64_t lineage, uint64_t gen,
                    const struct rkv_tensor_table *tensors, const struct rkv_handler_table *ht,
                    int flags, struct rkv_wal_replay *r, char *err, size_t err_len);

/* Encoding and validation, for recovery and tests. */
size_t rkv_wal_record_bytes(uint64_t count, uint64_t row_bytes);
void rkv_wal_encode_header(uint8_t *out, uint32_t machine, uint64_t lineage, uint64_t gen,
                           uint64_t fingerprint, uint64_t hwm);
/* The record of p at lsn, appended when the log was durable up to
 * durable, in a log of that lineage. */
void rkv_wal_encode_record(uint8_t *out, const struct rkv_wal_push *p, uint64_t row_bytes,
                           uint64_t lsn, uint64_t durable, uint64_t lineage);

#endif
