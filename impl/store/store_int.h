/* Internal to impl/store: the tensor registry and the shared-memory shard,
 * used by both the server and the co-located client fast path. */
#ifndef RKV_STORE_INT_H
#define RKV_STORE_INT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"
#include "port/port.h"
#include "proto/proto.h"
#include "rkv.h"
#include "store/handlers.h"
#include "store/node.h" /* the composition's entry points (rkv_node_open) */
#include "store/pbook.h"

#define RKV_SHARD_MAGIC 0x53564b52444853ull /* "SHDRKVS"; the top byte: rkv_shard_magic */
/* What a shard of this build's header layout holds as its magic. */
uint64_t rkv_shard_magic(void);
#define RKV_SHARD_CLOSED 1u
#define RKV_SHARD_MOVED 2u
/* Row locks are striped: enough stripes that unrelated rows rarely share one,
 * few enough that the header stays one small page run. */
#define RKV_SHARD_LOCKS 4096u
_Static_assert(RKV_MAX_TENSORS == RKV_PROTO_MAX_TENSORS, "a LIST_REPLY holds every tensor");
#define RKV_CLIENT_NODE_BASE 0x10000u
_Static_assert(RKV_CLIENT_NODE_BASE == RKV_MAX_SERVERS,
               "server node ids are below the client base");
/* rkv_config.zero_copy_bytes by default (measured: see README, Benchmarks). */
#define RKV_ZERO_COPY_DEFAULT_BYTES (64u << 10)
/* Why idle_timeout_ms has a floor (RKV_MIN_IDLE_TIMEOUT_MS), said where
 * the config and where the setting is refused. */
#define RKV_IDLE_WHY                                                                               \
    "a client sends a keepalive after a third of it in silence, and connections are looked at "    \
    "only every 100 ms, so a shorter timeout leaves a loaded host no slack"

/* Lives at the start of every shard segment, shared by all processes of a
 * machine. Lock words are process-shared because they are plain atomics. */
struct rkv_shard_hdr {
    uint64_t magic;
    uint64_t local_rows;
    uint64_t row_bytes;
    uint64_t with_state;
    /* RKV_SHARD_CLOSED, set by a server of the machine that was asked to
     * exit: co-located clients then refuse to read or write the shard
     * (-RKV_ESHUTDOWN) rather than act on a store that is going away.
     * RKV_SHARD_MOVED, set before the segment's name is unlinked for a
     * new one (a restarted server restored the machine anew, or a durable
     * server stopped): a co-located client that still maps this one must
     * map the new one, not go on reading rows nobody writes. */
    atomic_uint closed;
    uint32_t pad;
    atomic_uint locks[RKV_SHARD_LOCKS];
    /* The pid namespace of the segment's maker (port proc_ns; 0: unknown),
     * and for each lock word the process holding it (port proc_self, set
     * after the word is taken, cleared before it is let go; 0: none
     * recorded). A waiter of the maker's namespace takes a word over from
     * a holder that died holding it: a co-located client killed inside a
     * push (an OOM kill) held its row's lock for good, and the server and
     * every other process of the machine spun on it for ever. */
    uint64_t pidns;
    _Atomic uint64_t holders[RKV_SHARD_LOCKS];
    /* The byte offset of the apply journal's row (below). */
    uint64_t journal_off;
};

/* Segment layout: header | data | state (with_state) | the apply journal's
 * row and its state row (in durable mode the row a push is about to
 * change, as it was: wal.c, the apply journal, so that a server that died
 * inside a push leaves what its successor needs to finish it exactly;
 * touched only in durable mode) | book (EXPLICIT: one machine id per
 * global row, so that a node that never saw the tensor's INIT, a snapshot
 * writer or a restarted server, can rebuild it) | a user-given local index
 * (u64 per global row, 8-aligned; only when given). */
struct rkv_shard {
    struct rkv_port *port;
    struct rkv_shard_hdr *hdr;
    size_t map_bytes;
    uint8_t *data;   /* local_rows x row_bytes */
    uint8_t *state;  /* same shape, or NULL */
    uint32_t *book;  /* book_len entries, or NULL */
    uint64_t *local; /* book_len entries: a user-given local index (rkv_shard_map_local), or NULL */
    uint8_t *journal; /* one row, then its state row (with_state): the apply journal's */
    uint32_t owner;   /* tag written into row locks it holds (0: an untagged ~0u) */
    /* Of the segment maker's pid namespace: records its holders, and takes
     * a dead one's lock over (struct rkv_shard_hdr holders). */
    int track;
    /* The owner's (NULL: none): asked by a waiter on a row lock that a
     * server tag of the machine (not its own) holds, now and then; frees
     * that server's words (> 0) when its process died and nothing it was
     * applying is left half done, else 0. */
    int (*holder_dead)(void *arg, struct rkv_shard *sh, unsigned tag);
    void *holder_arg;
    uint64_t local_rows;
    size_t row_bytes;
    uint64_t book_len;
};

/* One tensor as seen by one node. */
struct rkv_tensor {
    struct rkv_tensor_meta meta;
    size_t row_bytes;
    enum rkv_init init;
    uint64_t init_seed;
    struct rkv_pbook pb;
    int ready;              /* server 0: every server has it */
    struct rkv_shard shard; /* mapped when this node's machine holds rows */
    int mapped;
    /* A server's registration of the shard's rows for the NIC to send from
     * (zero-copy pulls on a NIC that copies at post), made on first use;
     * NULL otherwise (and always in a client). */
    struct rkv_mr *shard_mr;
    /* A server's tensor whose segment its make task is still building
     * (a large one: srv_make_main): set by the progress task before the
     * tensor enters the table, cleared (release) by the make task once
     * shard, mapped and make_rc are written. Nothing but the make task
     * touches shard or mapped while it is set (rkv_tensor_serving). */
    _Atomic int making;
    int make_rc;    /* that make failed (-RKV_E*): the tensor is not served */
    void *make_job; /* the server's job making it, under the server's mu */
};

/* A server's tensor whose rows it serves: mapped, and not being made. */
static inline int rkv_tensor_serving(struct rkv_tensor *t)
{
    return t && !atomic_load_explicit(&t->making, memory_order_acquire) && t->mapped;
}

/* A node's tensors by id (1..RKV_MAX_TENSORS), in chunks of
 * RKV_TENSOR_CHUNK entries made with their first tensor: a node of a
 * cluster with a few tensors keeps a few hundred bytes, not a 1,025-entry
 * array (8 KiB per client and per server, which the twin holds thousands
 * of). Chunks never move, so an entry stays where a reader found it. */
#define RKV_TENSOR_CHUNK 32u
struct rkv_tensor_table {
    struct rkv_tensor **chunk[RKV_MAX_TENSORS / RKV_TENSOR_CHUNK + 1];
};
/* The tensor of this id, or NULL (none yet, or an id out of range). */
static inline struct rkv_tensor *rkv_tensor_at(const struct rkv_tensor_table *tt, uint32_t id)
{
    struct rkv_tensor **c = id <= RKV_MAX_TENSORS ? tt->chunk[id / RKV_TENSOR_CHUNK] : NULL;
    return c ? c[id % RKV_TENSOR_CHUNK] : NULL;
}
/* Sets id's entry (id in 1..RKV_MAX_TENSORS); -RKV_ENOMEM when its chunk
 * could not be made (the table is then unchanged). */
int rkv_tensor_put(struct rkv_tensor_table *tt, uint32_t id, struct rkv_tensor *t);
/* Frees the chunks (not the tensors). */
void rkv_tensor_table_free(struct rkv_tensor_table *tt);

void rkv_shard_name(char *buf, size_t len, const char *prefix, uint32_t machine, uint32_t tensor);
/* create=1: makes and zero-fills the segment (the machine's first server). */
int rkv_shard_map(struct rkv_port *port, const char *name, uint64_t local_rows, size_t row_bytes,
                  int with_state, uint64_t book_len, int create, struct rkv_shard *sh, char *err,
                  size_t err_len);
/* The same with room for a user-given local index after the book
 * (has_local; sh->local then points at it). */
int rkv_shard_map_local(struct rkv_port *port, const char *name, uint64_t local_rows,
                        size_t row_bytes, int with_state, uint64_t book_len, int has_local,
                        int create, struct rkv_shard *sh, char *err, size_t err_len);
/* The book_len a tensor's segment carries (rows for EXPLICIT, else 0). */
uint64_t rkv_shard_book_len(const struct rkv_tensor_meta *m);
void rkv_shard_unmap(struct rkv_shard *sh);
/* Unlinks the segment of this name, first marking it RKV_SHARD_MOVED (a
 * closed one stays closed) for whoever still maps it. No segment: nothing. */
void rkv_shard_retire(struct rkv_port *port, const char *name);
void rkv_shard_lock(struct rkv_shard *sh, uint64_t local_row);
/* The same, giving up with -RKV_ETIMEDOUT once port now_ns passes
 * deadline_ns (0: never) while a live holder keeps the word. */
int rkv_shard_lock_until(struct rkv_shard *sh, uint64_t local_row, uint64_t deadline_ns);
/* Who holds local_row's lock word: its tag (*tag, 0: free) and, when it
 * records itself (a co-located client), its process (port proc_self). */
uint64_t rkv_shard_holder(const struct rkv_shard *sh, uint64_t local_row, unsigned *tag);
/* 0 once each row lock of gids (global ids of t, local to sh, on machine
 * `machine`) has been seen free, or taken and let go, within half of
 * timeout_ms (none: 0); else -RKV_ETIMEDOUT, with err naming the row, its
 * live holder and that nothing of this `what` ("push", "pull") was done.
 * A server looks before it applies, logs or sends anything: its own waits
 * are unbounded (a row half applied cannot be given back), and a
 * co-located worker stopped holding a lock (SIGSTOP, a debugger) stalled
 * the server for as long as it stayed stopped. A dead holder's lock is
 * taken over. */
int rkv_shard_rows_free(struct rkv_shard *sh, const struct rkv_tensor *t, const uint64_t *gids,
                        size_t n, uint32_t timeout_ms, uint32_t machine, const char *what,
                        char *err, size_t err_len);
/* Who holds local_row's lock, as far as its word tells: "worker 3 (process
 * 1234)", "the machine's server of local id 0", "another process". */
void rkv_shard_holder_name(const struct rkv_shard *sh, uint64_t local_row, char *buf, size_t len);
/* The same, taking the word from server tag `over` as well (over != 0):
 * the finisher of a push a dead server was applying (wal.c). */
void rkv_shard_lock_over(struct rkv_shard *sh, uint64_t local_row, unsigned over);
void rkv_shard_unlock(struct rkv_shard *sh, uint64_t local_row);
/* Frees the row locks held under sh->owner's tag (a dead predecessor's). */
uint32_t rkv_shard_reclaim(struct rkv_shard *sh);
/* Fills every local row with the tensor's initial values (seeded uniform in
 * [-1, 1), the same value for a global row whatever the partitioning). */
void rkv_shard_init_values(struct rkv_shard *sh, const struct rkv_tensor *t, uint32_t machine);

/* Checks and applies / reads rows of a request whose ids all live on
 * `machine`. Validation covers every id before any row is touched. */
int rkv_tensor_check_ids(const struct rkv_tensor *t, uint32_t machine, const uint64_t *ids,
                         size_t n, char *err, size_t err_len);
int rkv_shard_push(struct rkv_shard *sh, const struct rkv_tensor *t,
                   const struct rkv_handler_table *ht, int op, double param, const uint64_t *ids,
                   size_t n, const uint8_t *rows);
/* One row of a push whose op rkv_handler_check accepted (under its lock). */
void rkv_shard_push_row(struct rkv_shard *sh, const struct rkv_tensor *t,
                        const struct rkv_handler_table *ht, int op, double param, uint64_t gid,
                        const uint8_t *in);
/* The same, -RKV_ETIMEDOUT (the row untouched) when its lock is not had
 * by deadline_ns (rkv_shard_lock_until). */
int rkv_shard_push_row_until(struct rkv_shard *sh, const struct rkv_tensor *t,
                             const struct rkv_handler_table *ht, int op, double param, uint64_t gid,
                             const uint8_t *in, uint64_t deadline_ns);
void rkv_shard_pull_row(struct rkv_shard *sh, const struct rkv_tensor *t, uint64_t gid,
                        uint8_t *out);

/* ---- the machine segment (machine.c) ----
 * One more shared segment per machine, beside the tensors' shards: what
 * every server of the machine must agree on whichever of them writes a
 * snapshot or applies a push, and what a restarted one needs to rebuild
 * its view: the machine's tensor table, the last push sequence applied per
 * client, and the snapshot locks and generations. */
#define RKV_MACH_MAGIC 0x48434d564b52ull /* "RKVMCH"; bits 48..63: the layout (machine.c) */
#define RKV_MACH_MAGIC_MASK 0xffffffffffffull
/* Raised when a field of struct rkv_mach_hdr changes meaning but not size
 * (2: tensor_top, which was padding). */
#define RKV_MACH_LAYOUT 2u
#define RKV_MACH_SERVERS 256u /* servers per machine (rkv_cfg_check) */

struct rkv_mach_tensor {
    uint32_t present; /* set last, once the tensor's segment is filled */
    uint32_t with_state;
    uint64_t local_rows;
    uint64_t row_bytes;
    struct rkv_wire_tensor desc;
    uint32_t has_local; /* the segment holds a user-given local index */
};

/* Exactly-once pushes (durable mode): a push's (client, sequence) is applied at most once
 * per machine. The sequence is the push's req_id: bits 40..63 a random tag
 * per client incarnation, bits 0..39 a counter. */
#define RKV_SEQ_TAG_SHIFT 40
struct rkv_mach_client {
    atomic_uint lock; /* owner tag; held across check, apply and update */
    uint32_t pad;
    uint64_t last_seq;
};

struct rkv_mach_hdr {
    uint64_t magic;   /* published last */
    uint64_t lineage; /* id of the chain of snapshots this state belongs to (0: not durable) */
    uint32_t n_clients;
    /* Lock words hold the holder's owner tag (its local server id + 1), so
     * that a server restarting beside live ones frees what its previous
     * incarnation held when it died (rkv_mach_reclaim). */
    /* Serializes snapshots of the machine, from the copy to the rename, so
     * that the last file renamed is the newest copy. Held across an fsync. */
    atomic_uint snap_lock;
    atomic_uint table_lock; /* tensors[] */
    /* The apply lock, readers-writer: readers[i] is 1 while local server i
     * applies a push, copy_writer the tag of a snapshot copying, so that
     * every push is wholly in a snapshot or wholly out of it. */
    atomic_uint copy_writer;
    uint32_t pad;
    atomic_uint readers[RKV_MACH_SERVERS];
    /* The process (port proc_self) of slot i (tag i + 1), set at attach and
     * when it sets readers[i]: a copy waits for a live reader only
     * (rkv_mach_copy_begin), and a lock word of tag i + 1 without a
     * recorded holder is that process's (rkv_live_lock). */
    _Atomic uint64_t reader_proc[RKV_MACH_SERVERS];
    _Atomic uint64_t snap_started; /* generation of the last snapshot whose copy began */
    _Atomic uint64_t snap_durable; /* generation of the last snapshot renamed and synced */
    /* The write-ahead log (wal.h). Locks held across I/O record their
     * holder's process id (port proc_self), so that a waiter can take over
     * the lock of a process that died holding it (rkv_live_lock). */
    _Atomic uint64_t snap_holder;
    atomic_uint wal_lock;      /* a push's check, append and apply */
    atomic_uint wal_sync_lock; /* an fdatasync of the log, or a checkpoint's switch */
    _Atomic uint64_t wal_holder, wal_sync_holder;
    _Atomic uint64_t wal_end;     /* LSN just past the last record appended */
    _Atomic uint64_t wal_durable; /* LSN up to which the log is on disk */
    /* LSN below which the current log may hold records of its current use:
     * its header says so durably before any append goes past it (wal.h). */
    _Atomic uint64_t wal_hwm;
    atomic_uint wal_hwm_lock; /* a rewrite of the log's header for wal_hwm */
    _Atomic uint64_t wal_hwm_holder;
    /* An fdatasync of the log failed: the kernel may have dropped the
     * pages, so no later sync can vouch for them; every commit fails until
     * the machine restarts from its files. */
    atomic_uint wal_failed;
    /* The tag of the server applying the push in the journal (jr_lsn):
     * its row lock on the row it died in is kept for the push's finisher
     * (wal.c), and freed once that push is finished. */
    atomic_uint jr_tag;
    /* The apply journal (durable mode, wal.c): the push being applied under
     * wal_lock, so that whoever takes the lock after its holder died
     * finishes that push exactly. jr_lsn: its record's LSN (0: none);
     * jr_pos: the index of the row being applied << 1, | 1 once that row's
     * old content is in its shard's journal row. The rows before it are
     * applied whole, the rows after it not at all. */
    _Atomic uint64_t jr_lsn, jr_pos;
    /* The process (port proc_self) of local server i while it serves the
     * machine: set when it makes or attaches the segment, cleared by its
     * clean stop (rkv_mach_leave). The last server to leave removes the
     * machine's memory; the first server's stop removed it under siblings
     * that still served it (an outside tester: a SIGTERM of it, and its
     * restart was refused). While one runs, another create of this name is
     * refused: a second cluster started with the same shm prefix (the same
     * port, by default) removed the running one's segment before it found
     * the port taken. */
    _Atomic uint64_t serving[RKV_MACH_SERVERS];
    atomic_uint removing; /* 1 once a leaving server began removing it */
    /* The highest tensor id whose entry was ever written (published,
     * restored), never lowered: the walks of tensors[] stop there. Each
     * entry is 136 bytes, the table 34 pages, and a payload-less twin run
     * of one tensor faulted all 34 in at every machine's removal (4 % of
     * a 1,024-node run's time). */
    atomic_uint tensor_top;
    struct rkv_mach_tensor tensors[RKV_MAX_TENSORS + 1]; /* by id */
    struct rkv_mach_client clients[];                    /* n_clients */
};

/* One past the last id a walk of h->tensors[] need read. */
static inline uint32_t rkv_mach_tensor_end(const struct rkv_mach_hdr *h)
{
    uint32_t top =
        atomic_load_explicit(&((struct rkv_mach_hdr *)h)->tensor_top, memory_order_acquire);
    return (top < RKV_MAX_TENSORS ? top : RKV_MAX_TENSORS) + 1;
}

/* Raises h's tensor_top to id, before id's entry is written. */
static inline void rkv_mach_tensor_raise(struct rkv_mach_hdr *h, uint32_t id)
{
    uint32_t top = atomic_load(&h->tensor_top);
    while (top < id && !atomic_compare_exchange_weak(&h->tensor_top, &top, id))
        ;
}

struct rkv_mach {
    struct rkv_port *port;
    struct rkv_mach_hdr *hdr; /* NULL until created or attached */
    size_t map_bytes;
    uint32_t owner;   /* this server's tag in lock words: local id + 1 */
    uint64_t serving; /* what this server wrote in hdr->serving (0: nothing) */
};

void rkv_mach_name(char *buf, size_t len, const char *prefix, uint32_t machine);
/* Creates the segment afresh. An older one of that name is removed first
 * if its maker and every server that serves it have ended (a crashed
 * earlier run); one still served is left alone and the create fails with
 * -RKV_EEXIST. */
int rkv_mach_create(struct rkv_port *port, const char *prefix, uint32_t machine, uint32_t n_clients,
                    uint64_t lineage, uint32_t owner, struct rkv_mach *mc, char *err,
                    size_t err_len);
/* The maker (port proc_self) of machine's segment under prefix while that
 * process runs, else a server still serving it; 0 when there is no such
 * segment of this build or all of them have ended. A launcher whose own
 * servers are all gone reads a live one as another cluster's, whose
 * segments are not its to remove. */
uint64_t rkv_mach_live_maker(struct rkv_port *port, const char *prefix, uint32_t machine);
/* -RKV_ENOTENSOR when it does not exist (yet), or a server (owner > 0)
 * finds it being removed by the machine's last server to stop. */
int rkv_mach_attach(struct rkv_port *port, const char *prefix, uint32_t machine, uint32_t n_clients,
                    uint32_t owner, struct rkv_mach *mc, char *err, size_t err_len);
/* 1 when every tensor the attached segment mc publishes still has its
 * shard segment; else 0, with the first missing one's name in missing. */
int rkv_mach_shards_present(const struct rkv_mach *mc, const char *prefix, uint32_t machine,
                            char *missing, size_t missing_len);
/* A restarted server beside live ones: frees every lock word tagged with
 * its owner tag (its dead predecessor's). Returns how many client entries
 * it held: pushes that may have been applied in part. */
uint32_t rkv_mach_reclaim(struct rkv_mach *mc);
void rkv_mach_close(struct rkv_mach *mc);
/* Outside durable mode, a server other than the machine's first one
 * restarting beside running siblings (it attached to the machine's
 * segment before, and another server still serves it): -RKV_EEXIST naming
 * that one; 0 otherwise (a first start, or no live sibling). */
int rkv_mach_check_rejoin(struct rkv_port *port, const char *prefix, uint32_t machine,
                          uint32_t n_clients, uint32_t local, char *err, size_t err_len);
/* Whether local server `local` stopped cleanly (it attached once, its
 * serving slot is cleared: rkv_mach_leave) while another server still
 * serves the machine: it left nothing half applied, and the memory it
 * served is the siblings'. */
int rkv_mach_server_left(const struct rkv_mach *mc, uint32_t local);
/* A server's clean stop: it no longer serves the machine. Returns 1 when
 * no other server of the machine still does (their processes checked):
 * the caller then removes the machine's memory (rkv_mach_remove). Two
 * servers leaving at once may both read 1; never both 0. */
int rkv_mach_leave(struct rkv_mach *mc);
/* Removes the machine's memory: every shard its table names (and ids up
 * to n_tensors, the caller's, published or not), marked closed first when
 * close (co-located clients then fail -RKV_ESHUTDOWN rather than write rows
 * nobody serves) and replaced otherwise (a restarted server restores
 * them), then the machine segment. Once per segment: a second caller does
 * nothing, and neither does one that finds a server attached since its
 * rkv_mach_leave (a restart: that one's attach, or this, backs off). */
void rkv_mach_remove(struct rkv_mach *mc, const char *prefix, uint32_t machine, uint32_t n_tensors,
                     int close);
void rkv_mach_unlink(struct rkv_port *port, const char *prefix, uint32_t machine);
/* Calls fn with the name of every shared-memory segment of a machine whose
 * tensors have ids 1..n_tensors: the machine segment, then each shard. What
 * a machine loss takes, for the launcher and the twin to remove. */
void rkv_mach_each_segment(const char *prefix, uint32_t machine, uint32_t n_tensors,
                           void (*fn)(void *user, const char *name), void *user);
/* Spin on a lock word in shared memory, yielding (and, after a while,
 * sleeping: a snapshot holds its lock across an fsync) between tries. */
void rkv_spin_lock(struct rkv_port *port, atomic_uint *w, uint32_t owner);
void rkv_spin_unlock(atomic_uint *w);
/* rkv_spin_lock for locks held across I/O: records the holder's process id
 * in *holder and, while waiting, takes the lock over from a holder whose
 * process died (it then logs it); slots: the machine's reader_proc, the
 * process of each tag (NULL: none). Returns the dead holder's tag after
 * such a take-over (what the lock protected may be half done), else 0. */
uint32_t rkv_live_lock(struct rkv_port *port, atomic_uint *w, _Atomic uint64_t *holder,
                       const _Atomic uint64_t *slots, uint32_t owner);
void rkv_live_unlock(atomic_uint *w, _Atomic uint64_t *holder);
/* For assertions: the lock word carries owner's tag (this server holds it;
 * the tag names a server, not one of its tasks). */
int rkv_live_held(atomic_uint *w, uint32_t owner);
void rkv_mach_apply_begin(struct rkv_mach *mc);
void rkv_mach_apply_end(struct rkv_mach *mc);
void rkv_mach_copy_begin(struct rkv_mach *mc);
void rkv_mach_copy_end(struct rkv_mach *mc);
/* Locks client's entry and says whether seq was applied already (1) or
 * not (0). rkv_mach_seq_end records seq if applied and unlocks. */
int rkv_mach_seq_begin(struct rkv_mach *mc, uint32_t client, uint64_t seq);
void rkv_mach_seq_end(struct rkv_mach *mc, uint32_t client, uint64_t seq, int applied);
/* Makes tensor t (whose segment sh is filled) part of the machine's table. */
void rkv_mach_publish(struct rkv_mach *mc, const struct rkv_tensor *t);

/* Conversions between the public description and the wire. */
void rkv_tensor_to_wire(const struct rkv_tensor_meta *m, const struct rkv_tensor_desc *d,
                        struct rkv_wire_tensor *w);
int rkv_tensor_from_wire(const struct rkv_wire_tensor *w, const uint32_t *book, uint32_t machines,
                         uint32_t id, struct rkv_tensor *t, char *err, size_t err_len);
/* The same with a user-given local index (NULL: derived), checked as
 * rkv_pbook_init_local does. */
int rkv_tensor_from_wire_local(const struct rkv_wire_tensor *w, const uint32_t *book,
                               const uint64_t *local, uint32_t machines, uint32_t id,
                               struct rkv_tensor *t, char *err, size_t err_len);
/* The public description of a wire one the decoder checked (rkv_client_list). */
void rkv_tensor_meta_from_wire(const struct rkv_wire_tensor *w, uint32_t id,
                               struct rkv_tensor_meta *m);
void rkv_tensor_free(struct rkv_tensor *t);
/* -RKV_EINVAL, naming the field, for a description the servers' decoder
 * (proto.c) would refuse; book entries are rkv_tensor_from_wire's to check
 * (against the machine count). */
int rkv_tensor_desc_check(const struct rkv_tensor_desc *d, char *err, size_t err_len);

/* The configuration both roles derive from struct rkv_config. */
uint32_t rkv_cfg_n_servers(const struct rkv_config *cfg);
uint32_t rkv_cfg_server_id(const struct rkv_config *cfg, uint32_t machine, uint32_t local);
/* slot_mem_bytes with its default resolved (rkv.h) on a host of this much
 * memory (0: unknown). */
uint64_t rkv_cfg_slot_mem(const struct rkv_config *cfg, uint64_t host_mem_bytes);
void rkv_cfg_engine(const struct rkv_config *cfg, struct rkv_port *port, uint32_t node_id,
                    struct rkv_engine_cfg *ec);
int rkv_cfg_check(const struct rkv_config *cfg, char *err, size_t err_len);
/* Its machine-table part, O(machines): what rkv_cluster_create checks once
 * for every node made from a config that shares the table it builds. */
int rkv_cfg_check_machines(const struct rkv_config *cfg, char *err, size_t err_len);
/* Identifies a cluster (machines, ports, servers, workers, shm prefix): a
 * client that reached a server of another cluster is told so at HELLO. */
uint64_t rkv_cfg_fingerprint(const struct rkv_config *cfg);
/* What differs between two fingerprints, in words ("the workers differ:
 * <me> counts 2, <them> 3"; parts joined by "; "). */
void rkv_fingerprint_diff(uint64_t mine, uint64_t theirs, const char *me, const char *them,
                          char *buf, size_t len);
/* Gives nic the config's secret (its text or its file, when set) and
 * connection limits; -RKV_ECONFIG if the secret file cannot be read. */
int rkv_cfg_nic(const struct rkv_config *cfg, struct rkv_nic *nic, char *err, size_t err_len);
#endif
