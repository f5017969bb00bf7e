/* Durable snapshots of one machine's shard: every tensor the machine holds
 * (description, partition book, rows, optimizer state) and the last push
 * sequence applied per client, in one file replaced atomically.
 *
 * File format (little-endian), version 2 (version 1, still read: no
 * chunk_rows and no copy LSNs, i.e. one copy of everything at once):
 *   header (72 bytes)
 *      0 u64 magic "RKVSNAP\0"     8 u32 version         12 u32 machine
 *     16 u64 lineage              24 u64 generation     32 u64 wall_ns (copy time, Unix)
 *     40 u64 cluster fingerprint  48 u32 n_tensors      52 u32 n_clients
 *     56 u64 body_bytes           64 u32 body CRC-32C   68 u32 CRC-32C of bytes 0..67
 *   body
 *     n_clients x u64 last applied push sequence
 *     n_tensors x { u32 id, u32 flags (bit 0: with_state; bit 1: a user-given local
 *                   index follows the book), u64 local_rows, u64 row_bytes, u64 book_len,
 *                   wire tensor (104: name[64], dtype, policy, row_len, init, rows,
 *                   init_seed, with_state, book_len), u64 chunk_rows (>= 1),
 *                   book (book_len x u32, padded to 8),
 *                   local index (book_len x u64, if flags bit 1),
 *                   rows (local_rows x row_bytes), state (the same again if with_state),
 *                   copy LSNs (n_chunks = ceil(local_rows / chunk_rows) x u64) }
 * The copy is fuzzy (a checkpoint of a large shard never stops pushes for
 * long, nor holds a shard-sized buffer): chunk k of a tensor (its local
 * rows [k x chunk_rows, (k+1) x chunk_rows), data and state) was copied at
 * once, under the copy lock, when the machine's log ended at copy LSN k
 * (wal.h): it holds every logged push before that LSN and none at or
 * after it. The client sequences were copied at the copy's start, with the
 * switch to log `generation` (before every chunk). Replay after this
 * snapshot applies a record's row only if the record's LSN is at or past
 * its chunk's copy LSN: row by row, every push is then applied exactly
 * once, whatever it is (sum and sgd are not idempotent), since a push's
 * rows are applied one by one, each from its own data and state. Without
 * a log (copy LSNs 0), a snapshot is no consistent cut: only tests write
 * one.
 * (Bit 1 came later within version 1: files without a local index are as
 * before, and a build that predates it refuses one with it.)
 * The lineage names a chain of snapshots (the shared memory of the same
 * chain may be newer than its file); the generation orders them.
 */
#ifndef RKV_SNAPSHOT_H
#define RKV_SNAPSHOT_H

#include <stddef.h>
#include <stdint.h>

#include "store/store_int.h"

#define RKV_SNAP_MAGIC 0x0050414e53564b52ull /* "RKVSNAP\0" */
#define RKV_SNAP_VERSION 2u
#define RKV_SNAP_HDR_BYTES 72u
#define RKV_SNAP_TENSOR_BYTES 136u    /* version 1 */
#define RKV_SNAP_TENSOR_BYTES_V2 144u /* with chunk_rows */
/* Bytes of rows (data and state) a checkpoint copies under the copy lock
 * at a time (one row when a row is larger): ~0.1 ms of memcpy. */
#define RKV_SNAP_COPY_BYTES (1u << 20)

/* CRC-32C (Castagnoli); crc is the value of the bytes before (0 to start). */
uint32_t rkv_crc32c(uint32_t crc, const void *buf, size_t len);
/* For a header of an unknown format version whose first crc_off bytes are
 * sealed by a CRC-32C at crc_off (this build's layout): "" when it holds,
 * else a hint that the version field is more likely damaged (a flipped
 * byte read "format version 16711682"). */
const char *rkv_hdr_damage_hint(const uint8_t *buf, size_t crc_off);
/* The CRC-32C of A then B, from crc1 (A's) and crc2 (B's, of len2 bytes). */
uint32_t rkv_crc32c_combine(uint32_t crc1, uint32_t crc2, uint64_t len2);

/* One tensor of a snapshot. Pointers point into shared memory (writing)
 * or into the file's buffer (reading). */
struct rkv_snap_tensor {
    uint32_t id;
    uint32_t with_state;
    uint64_t local_rows;
    uint64_t row_bytes;
    uint64_t book_len;
    struct rkv_wire_tensor desc;
    const uint32_t *book;
    uint32_t has_local;   /* a user-given local index follows the book */
    const uint8_t *local; /* book_len x u64 (not necessarily 8-aligned in a file) */
    const uint8_t *data;
    const uint8_t *state;
    /* Version 2: rows per copy chunk (0 writing: one chunk), and each
     * chunk's copy LSN (NULL writing: all 0). Version 1: 0 and NULL. */
    uint64_t chunk_rows;
    const uint8_t *copy_lsn; /* n_chunks x u64, not necessarily 8-aligned */
};

/* Chunks of t's rows (rkv_snap_tensor.chunk_rows). */
uint64_t rkv_snap_chunks(const struct rkv_snap_tensor *t);

struct rkv_snap {
    uint32_t version; /* 0 writing: RKV_SNAP_VERSION */
    uint32_t machine;
    uint64_t lineage, generation, wall_ns, fingerprint;
    uint32_t n_clients;
    const uint64_t *last_seq; /* n_clients */
    uint32_t n_tensors;
    struct rkv_snap_tensor *tensors; /* malloc'd when read */
    uint8_t *file;                   /* read: the whole file, owned */
    size_t file_bytes;
};

/* Encoding: size, then the bytes (no CRCs), then seal (the CRCs), so that
 * the copy out of shared memory is a memcpy and the CRC runs unlocked. */
int rkv_snap_size(const struct rkv_snap *s, uint64_t *bytes_p);
void rkv_snap_encode(const struct rkv_snap *s, uint8_t *out);
void rkv_snap_seal(uint8_t *buf, size_t len);
/* Validates buf (magic, version, header CRC, length, body CRC, every size)
 * and fills s with pointers into it. machine: the one expected, or
 * UINT32_MAX for any. Errors name `path` and what is wrong (-RKV_EIO). */
int rkv_snap_decode(const char *path, const uint8_t *buf, size_t len, uint32_t machine,
                    struct rkv_snap *s, char *err, size_t err_len);
/* Reads and decodes a file; -RKV_ENOTENSOR when it does not exist. */
int rkv_snap_read(const char *path, uint32_t machine, struct rkv_snap *s, char *err,
                  size_t err_len);
void rkv_snap_free(struct rkv_snap *s);
void rkv_snap_file_name(char *buf, size_t len, uint32_t machine);

/* What the write-ahead log does around a snapshot (a checkpoint), called
 * with snap_lock held: before the copy (may fail, then nothing is written),
 * under the copy lock at the copy's start (no push is being applied; the
 * client sequences are copied then, the rows in chunks after), after that
 * (always, once before_copy succeeded), before the finished file is
 * swapped in, and once the snapshot of generation gen is durable. */
struct rkv_snap_hooks {
    void *user;
    /* The generation of the log being appended (0: none). A snapshot's
     * number follows it and the last durable snapshot's, never
     * snap_started alone: a checkpoint that died after taking its number
     * and before making its log left snap_started ahead of every log. */
    uint64_t (*log_gen)(void *user);
    int (*before_copy)(void *user, uint64_t gen, char *err, size_t err_len);
    void (*during_copy)(void *user, uint64_t gen);
    int (*after_copy)(void *user, uint64_t gen, char *err, size_t err_len);
    /* Once every chunk is copied and written, before the snapshot takes
     * its name: the chunks hold pushes appended up to their copy LSNs, so
     * the log must be durable that far first (may fail: the snapshot is
     * then not swapped in). */
    int (*before_swap)(void *user, uint64_t gen, char *err, size_t err_len);
    void (*after_durable)(void *user, uint64_t gen);
};

/* Writes a machine's snapshots; used by one task of one server. */
struct rkv_snap_writer {
    struct rkv_snap_hooks hooks; /* all NULL: plain snapshots */
    struct rkv_port *port;
    struct rkv_mach *mc;
    char dir[256];
    char name[64], tmp[80];
    char prefix[32];
    uint32_t machine;
    int prewrite; /* durable_log_prewrite set: the temp file is made ready ahead */
    uint64_t fingerprint;
    struct rkv_shard maps[RKV_MAX_TENSORS + 1]; /* segments mapped so far, by id */
    /* Kept between snapshots, so that a commit allocates nothing. */
    struct rkv_snap_tensor ts[RKV_MAX_TENSORS];
    uint64_t *seqs; /* the machine's n_clients */
    uint8_t *buf;   /* one chunk's copy (RKV_SNAP_COPY_BYTES, or a row) */
    size_t cap;
    uint8_t *lsns; /* a tensor's copy LSNs */
    size_t lsn_cap;
    /* For logs and measurements. */
    uint64_t n_written, n_shared, n_fsyncs, bytes_written;
    uint64_t bytes_last; /* the last snapshot's size */
};

void rkv_snap_writer_init(struct rkv_snap_writer *w, struct rkv_port *port, struct rkv_mach *mc,
                          const struct rkv_config *cfg, uint32_t server_id);
/* Makes sure a snapshot that started after `seen_started` (the machine's
 * snap_started, read after the caller's pushes were applied) is durable:
 * either another one already is (shared: group commit across servers), or
 * this call writes one. */
int rkv_snap_commit(struct rkv_snap_writer *w, uint64_t seen_started, char *err, size_t err_len);
void rkv_snap_writer_free(struct rkv_snap_writer *w);
/* Maps the segment of every tensor the machine holds now, as a snapshot
 * would (a failure is logged, and tried again at the next snapshot). A
 * server restarted beside live siblings calls it at its start: mapped
 * first at its shutdown checkpoint, after the machine's first server had
 * stopped and removed the segments' names, it failed ("cannot map ...
 * unknown tensor"; an outside tester, 10 of 111 runs). */
void rkv_snap_writer_map(struct rkv_snap_writer *w);

/* Restart: recreates the machine segment and every tensor segment of s in
 * shared memory (replacing what is there). The machine's lineage stays 0
 * (its other servers wait): the caller replays the log, then publishes it
 * with rkv_snap_publish_lineage. */
int rkv_snap_restore(const struct rkv_snap *s, struct rkv_port *port, const char *prefix,
                     uint32_t n_clients, uint32_t owner, struct rkv_mach *mc, char *err,
                     size_t err_len);
/* Restart beside surviving shared memory whose state may hold a push
 * applied in part: puts the snapshot's rows and sequences back in place
 * (segments stay mapped by co-located clients). Only when no other server
 * of the machine is running. */
void rkv_snap_publish_lineage(struct rkv_mach *mc, uint64_t lineage);
int rkv_snap_rollback(const struct rkv_snap *s, struct rkv_port *port, const char *prefix,
                      struct rkv_mach *mc, char *err, size_t err_len);

#endif
