/* rkv: a distributed tensor key-value store for ML training.
 *
 * Public API. Every function that can fail returns 0 (or a non-negative
 * count) on success and a negative -RKV_E* code on failure; the object it was
 * called on keeps a human-readable message, see rkv_client_errmsg() /
 * rkv_server_errmsg(). Output arguments end in _p and are set only on success.
 *
 * Pointers: the object a function works on (cli, srv, set) must be one its
 * create made (the _destroy functions also take NULL). Every other pointer
 * is required unless its function says it may be NULL: err (no message
 * then, whatever err_len), ids and rows of a call with n = 0, metas with cap 0,
 * local_server_p, a handler fn (NULL unregisters). A NULL required pointer
 * is refused with -RKV_EINVAL and a message naming it (in err, or in the
 * object's errmsg), and nothing is done; rkv_config_defaults(NULL) does
 * nothing.
 *
 * Thread safety: one rkv_client may be used by one application thread at a
 * time; an rkv_server is driven by the thread that calls rkv_server_run().
 * A client call that returns int, made while another call of the same
 * client is under way (from a second thread, or from a handler the client
 * runs), is refused with -RKV_EINVAL saying so, and does nothing; the
 * other call is unaffected, its rkv_client_errmsg too: the refusal's
 * message is kept for the refused thread alone, which reads it (until its
 * next call of the client) where the other threads read their calls'.
 * rkv_client_destroy must not overlap any call; one that finds a call
 * still under way on another thread interrupts it (rkv_client_interrupt),
 * waits up to timeout_ms + 1 s for it to return (-RKV_EINTR, typically),
 * then frees the client; if it does not return, the client is left
 * allocated (an error logged) rather than freed under it. The client must
 * not be used after either.
 *
 * fork(): a client or server belongs to the process that created it. A
 * fork()ed child has its memory but not its threads, and shares its
 * sockets and shared memory with the parent: every rkv_client_* and
 * rkv_server_* call that returns int, made in such a child, is refused at
 * once with -RKV_EINVAL ("... was created by process P; this is a forked
 * child: create a new client in the child"), nothing sent (the void ones,
 * rkv_client_stats_reset and rkv_server_stop, do nothing). There
 * rkv_client_destroy and rkv_server_destroy free the object's own memory
 * and unmap its shared memory, and leave the rest to the parent: nothing
 * is sent, no socket is shut down, no thread joined, no segment unlinked
 * (the child keeps its copies of the descriptors, close-on-exec, until it
 * execs or exits). Create new ones in the child instead.
 */
#ifndef RKV_H
#define RKV_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The version of this header; rkv_version() says which library runs. CMake
 * reads these three lines for the project's version (one place to bump). */
#define RKV_VERSION_MAJOR 0
#define RKV_VERSION_MINOR 1
#define RKV_VERSION_PATCH 0

/* What the shared library exports: the declarations below and nothing else
 * (the library is built with -fvisibility=hidden). */
#ifndef RKV_API
#if defined(__GNUC__) || defined(__clang__)
#define RKV_API __attribute__((visibility("default")))
#else
#define RKV_API
#endif
#endif

/* "MAJOR.MINOR.PATCH" of the library loaded at run time (static string). */
RKV_API const char *rkv_version(void);

/* Error codes (returned negated). Keep in sync with rkv_strerror(). */
enum rkv_err {
    RKV_OK = 0,
    RKV_EINVAL = 1,      /* invalid argument */
    RKV_ENOMEM = 2,      /* out of memory */
    RKV_ETIMEDOUT = 3,   /* request timed out */
    RKV_EPEERDEAD = 4,   /* peer disconnected or died */
    RKV_EPROTO = 5,      /* malformed or unexpected wire message */
    RKV_ENOTENSOR = 6,   /* unknown tensor name or id */
    RKV_ERANGE = 7,      /* row id out of range */
    RKV_EDTYPE = 8,      /* dtype or row length mismatch */
    RKV_EEXIST = 9,      /* tensor already exists with another shape */
    RKV_EIO = 10,        /* OS-level I/O failure (socket, shm) */
    RKV_EACCESS = 11,    /* remote access outside a registered region */
    RKV_ENOHANDLER = 12, /* push op / handler not registered */
    RKV_ECONFIG = 13,    /* bad configuration or cluster file */
    RKV_ESHUTDOWN = 14,  /* the store is shutting down */
    RKV_ELIMIT = 15,     /* a configured limit (pool, credits, size) was hit */
    RKV_EINUSE = 16,     /* the call failed and the NIC may still use the caller's rows */
    RKV_EINTR = 17,      /* the call was interrupted (rkv_client_interrupt) */
    RKV_ERR_MAX_
};

/* Returns a static, never-NULL description of an error code (either sign). */
RKV_API const char *rkv_strerror(int err);

enum rkv_dtype { RKV_F32 = 1, RKV_F64 = 2, RKV_I32 = 3, RKV_I64 = 4 };
RKV_API size_t rkv_dtype_size(enum rkv_dtype dt); /* 0 for an unknown dtype */
RKV_API const char *rkv_dtype_name(enum rkv_dtype dt);

/* How global row ids map to machines (the partition book). */
enum rkv_policy {
    RKV_PART_RANGE = 1,   /* contiguous, near-equal ranges per machine */
    RKV_PART_HASH = 2,    /* row % machines (g2l = row / machines) */
    RKV_PART_EXPLICIT = 3 /* a book: one machine id per row */
};

enum rkv_init { RKV_INIT_ZEROS = 0, RKV_INIT_UNIFORM = 1 };

/* Push operations. Values >= RKV_OP_CUSTOM name handlers registered with
 * rkv_server_register_handler() on every server and with
 * rkv_client_register_handler() on every client that pushes them: a client
 * refuses to push a custom op it has not registered (-RKV_ENOHANDLER,
 * nothing applied), since it cannot see the servers' handlers (outside
 * durable mode it applies the op to its own machine's rows itself).
 * SGD's and ADAGRAD's param (the learning rate) must be finite, not
 * negative and, on an RKV_F32 tensor, at most FLT_MAX (the f32 ops step
 * with a float rate) (-RKV_EINVAL, nothing applied). */
enum rkv_push_op {
    RKV_OP_ASSIGN = 0,
    RKV_OP_SUM = 1,     /* row += grad; integer dtypes wrap around on overflow (two's complement) */
    RKV_OP_SGD = 2,     /* row -= param * grad */
    RKV_OP_ADAGRAD = 3, /* state += grad^2; row -= param * grad / (sqrt(state) + 1e-10) */
    RKV_OP_CUSTOM = 16,
    RKV_OP_MAX = 64
};

/* A custom push handler: apply n_elems elements of `in` to `row` (and `state`,
 * which is NULL unless the tensor was created with optimizer state). It runs
 * under the row's lock, on a server or in a co-located client. That lock is
 * one of 4096 per tensor shard that the machine's rows share by hash, so a
 * handler must be short and must not call rkv: a call from it that reaches
 * a row of the same lock (one row in 4096, on this machine) waits for
 * itself for good, and a slow handler holds up every process of the
 * machine that touches such a row, its servers' engines included. Outside
 * durable mode a large push's `in` is read where its sender wrote it (a
 * rendezvous slot the sender may still write into): read each element
 * once, and copy what you check before using it (an offset or an index
 * carried in a row), or a peer can change it in between. */
typedef void (*rkv_handler_fn)(enum rkv_dtype dt, void *row, void *state, const void *in,
                               size_t n_elems, double param, void *user);

#define RKV_NAME_MAX 63

struct rkv_tensor_desc {
    char name[RKV_NAME_MAX + 1];
    enum rkv_dtype dtype;
    uint64_t rows;    /* global row count */
    uint32_t row_len; /* elements per row (the row shape, flattened) */
    enum rkv_policy policy;
    const uint32_t *book; /* RKV_PART_EXPLICIT only: rows entries */
    enum rkv_init init;
    /* RKV_INIT_UNIFORM: element j of row r is u = mix(init_seed ^ mix(r * 0x9e3779b97f4a7c15 + j))
     * mapped to [-1, 1) as (u >> 11) * 2^-52 - 1, mix being splitmix64's finalizer; f32 rounds it,
     * integer dtypes hold floor(1000 u). The oracle recomputes it from this text. */
    uint64_t init_seed;
    int with_state; /* allocate optimizer state (needed by adagrad) */
    /* RKV_PART_EXPLICIT only, optional (DGL's set_global2local): rows entries,
     * row r lives at local index local_index[r] on machine book[r]; the
     * machine's shard stores its rows in that order. On each machine m the
     * indices of m's rows must be a permutation of 0..n_m-1 (n_m: the rows
     * the book gives m), checked by the client before anything is sent and
     * by every server: -RKV_EINVAL naming the first bad row otherwise, or
     * for a local index with another policy. NULL: row r's index is the
     * number of rows before r on its machine. The shard segment and
     * durable snapshots keep the map, so a restarted server has it. Last,
     * so that code built against the struct without it stays source
     * compatible. */
    const uint64_t *local_index;
};

struct rkv_tensor_meta {
    char name[RKV_NAME_MAX + 1];
    uint32_t id;
    enum rkv_dtype dtype;
    uint64_t rows;
    uint32_t row_len;
    enum rkv_policy policy;
    int with_state;
};

/* Pull handlers (DGL's _udf_pull_handler): what a pull returns for each row
 * is computed from the stored row instead of copied. 0 is the plain pull
 * (rkv_client_pull); RKV_PULL_WITH_STATE is built in: row_len elements of
 * the row followed by row_len elements of its optimizer state (tensors
 * created with_state only). Ids RKV_PULL_CUSTOM..RKV_OP_MAX-1 name handlers
 * registered on every server and on each client that pulls with them (the
 * client runs them on its machine's rows, as for custom push ops). */
enum rkv_pull_op { RKV_PULL_ROWS = 0, RKV_PULL_WITH_STATE = 1, RKV_PULL_CUSTOM = 16 };

/* A custom pull handler: writes one reply row `out` (out_len elements of dt)
 * from the stored `row` (row_len elements) and its `state` (NULL unless the
 * tensor has optimizer state), with the caller's param. It runs under the
 * row's lock, on a server or in a co-located client, and must not block
 * nor call rkv (the lock is shared, as rkv_handler_fn says). */
typedef void (*rkv_pull_fn)(enum rkv_dtype dt, const void *row, const void *state, size_t row_len,
                            void *out, size_t out_len, double param, void *user);

/* Cluster description and tunables. Fill with rkv_config_defaults(), then
 * set what you need (the CLI does this from flags, env vars and files).
 * Every field is documented here and none has a hidden meaning: a config
 * made otherwise (zeroed, a designated initialiser) that leaves 0 or empty
 * a field whose 0 is no valid setting (backend, shm_prefix, timeout_ms,
 * rx_depth, ctrl_buf_bytes, push_slots, max_slot_bytes) is refused by
 * rkv_server_create and rkv_client_create with -RKV_ECONFIG saying which;
 * the other fields mean what their 0 says (seed 0, log_level 0: errors
 * only, connect_retry_ms 0: connect once, zero_copy_bytes 0: never, ...). */
/* The cap on machines is the wire format's, not an array's (every table
 * with an entry per machine or server is sized from the cluster at run
 * time): a message header names its sender in a u32, servers by their id
 * below 0x10000 and clients as 0x10000 + their id, so a cluster has at most
 * 65,536 servers, and each machine runs at least one. Machine ids are u32
 * on the wire (HELLO, partition books). */
#define RKV_MAX_SERVERS 65536u
#define RKV_MAX_MACHINES RKV_MAX_SERVERS
#define RKV_HOST_MAX 63
/* Bounds of settings that size what a node allocates up front (struct
 * rkv_config): a value past them is a typo or a unit mistake, refused
 * naming the setting rather than met later as "out of memory" or a
 * connection that cannot be set up. RKV_MAX_RX_DEPTH is also what a tcp
 * connection can post. */
#define RKV_MAX_WORKERS 65536u
#define RKV_MAX_RX_DEPTH 65536u
#define RKV_MAX_PUSH_SLOTS 65536u
#define RKV_MAX_CTRL_BUF_BYTES (64u << 20)
#define RKV_MAX_RX_BYTES (1ull << 30)
/* rkv_config.max_slot_bytes at most: the largest message the wire format
 * and every transport carry (1 GiB, the default). Above it a server
 * accepted the setting and every larger message broke its connection
 * ("connection lost"), where the error that led there had said to raise it. */
#define RKV_MAX_SLOT_BYTES (1ull << 30)
/* rkv_config.slot_mem_bytes's default at most (4 GiB; a quarter of a
 * smaller host's memory). */
#define RKV_SLOT_MEM_DEFAULT_BYTES (4ull << 30)
/* Tensors a cluster holds (rkv_client_init_data past it: -RKV_ELIMIT). */
#define RKV_MAX_TENSORS 1024u
/* The shortest idle_timeout_ms but 0 (off). A client keeps its connections
 * alive with a keepalive after a third of it in silence, and connections
 * are looked at only every 100 ms: a shorter timeout leaves a loaded host
 * no slack. */
#define RKV_MIN_IDLE_TIMEOUT_MS 1000u

struct rkv_machine {
    char host[RKV_HOST_MAX + 1]; /* NUL-terminated: create refuses one that is not (-RKV_ECONFIG) */
    uint16_t base_port;
    uint32_t servers; /* servers on this machine, 1..256 (ports base_port..+servers-1) */
};

struct rkv_cluster; /* internal (rkv_config.shared) */

struct rkv_config {
    uint32_t n_machines;
    struct rkv_machine *machines; /* n_machines entries, owned by the caller */
    uint32_t n_workers;           /* total clients that will connect */
    uint32_t machine_id;          /* this process's machine */
    char backend[16];             /* "tcp" */
    /* Namespace of the machine's shm segments: "rkv" from
     * rkv_config_defaults (the rkv binary, rkv_settings and the Python
     * binding make it "rkv-<machine 0's base port>"). Two clusters on one
     * host need different ones: a second server of a name in use is
     * refused (-RKV_EEXIST, naming the process that holds it). */
    char shm_prefix[32];
    uint32_t timeout_ms; /* per request; also connect */
    /* keep retrying connect this long (a server not up yet); a client that
     * lost server 0 (without retry_ms) tries a server it has not talked to
     * once, and stops a retry under way. */
    uint32_t connect_retry_ms;
    /* Bounded (-RKV_ECONFIG past a bound): rx_depth 4..RKV_MAX_RX_DEPTH,
     * ctrl_buf_bytes 256..RKV_MAX_CTRL_BUF_BYTES and their product (the
     * receive buffers of one connection) at most RKV_MAX_RX_BYTES,
     * push_slots 2..RKV_MAX_PUSH_SLOTS, n_workers 1..RKV_MAX_WORKERS. */
    /* rx_depth and ctrl_buf_bytes: the same on every node (a client whose
     * differ from a server's is refused at join, -RKV_ECONFIG naming both);
     * push_slots is the server's: a client asks a server for at most half
     * of the server's or its own, whichever is less. */
    uint32_t rx_depth;       /* posted receive buffers per connection */
    uint32_t ctrl_buf_bytes; /* size of each control (SEND) buffer */
    uint32_t push_slots;     /* rendezvous slots a server grants per client */
    uint64_t max_slot_bytes; /* largest single message via rendezvous (ctrl_buf_bytes ..
                              * RKV_MAX_SLOT_BYTES) */
    /* The most memory a node holds in rendezvous slots its peers asked for,
     * all peers together (each slot is sized to its message, rounded up to
     * a power of two, kept by its peer for later messages of the same
     * tensor and op, and registered with the NIC: pinned on verbs). An ask
     * that does not fit waits, first come first served, while the node
     * asks the holders of the least recently used slots to give them back;
     * a holder that keeps one past a quarter of timeout_ms is dropped. A
     * message whose slot alone is larger fails with -RKV_ELIMIT. Without a
     * bound, push_slots x max_slot_bytes per connection (64 GiB with the
     * defaults) was what any one peer could make a server allocate. 0 (the
     * default): a quarter of the host's memory (or of its memory cgroup's
     * limit, where lower), at most
     * RKV_SLOT_MEM_DEFAULT_BYTES (in the twin that), and at least
     * max_slot_bytes; else at least max_slot_bytes (-RKV_ECONFIG below). */
    uint64_t slot_mem_bytes;
    uint64_t seed;
    int log_level; /* 0 error, 1 warn, 2 info, 3 debug */
    /* Durable mode when not empty: servers acknowledge a push only once it
     * is synced in their machine's write-ahead log in this directory
     * (rkv-m<machine>.<generation>.wal; group commit: pushes acknowledged
     * together share one fdatasync; the machine's snapshot rkv-m<machine>.snap
     * is a checkpoint), co-located clients push through a server, and a
     * server created where its machine's snapshot exists restarts from it
     * plus the replay of its logs. Every node of a cluster must agree on
     * durable or not (HELLO checks it). */
    char durable_dir[256];
    /* Durable mode: a new log file (when no spare of an earlier log is
     * there to reuse) is written with this many bytes of zeros and synced
     * before its first push, and one spare is kept ready, so that group
     * commits overwrite blocks on disk instead of growing the file (an
     * fdatasync then writes no size or extent metadata). The directory
     * then holds about three such files per machine (the log, up to two
     * spares). 0 (the default): logs grow as pushes come, and are reused
     * once a checkpoint let them go. */
    uint64_t durable_log_prewrite;
    /* A client whose request meets a dead server (-RKV_EPEERDEAD) retries it
     * with backoff for this long, reconnecting to the server's address as
     * server 0 knows it then (a restarted server re-registers), or to
     * another server of its machine; in durable mode a retried push is
     * applied once. Outside durable mode nothing records what a machine
     * applied, so a push other than an assign whose server went after it
     * was sent (it may have applied it) is not retried: -RKV_EPEERDEAD,
     * saying it may have been applied (one not yet sent is). 0 (the
     * default): fail at once,
     * and a server this client lost (its process killed, or it dropped this
     * client: silent past its idle_timeout_ms while stopped, say) stays
     * lost to it: every later call to it fails at once with -RKV_EPEERDEAD,
     * shutdown_servers included, even if the server runs on. A client that
     * must ride over such a loss sets retry_ms. */
    uint32_t retry_ms;
    /* Zero copy: a pull's or push's part for one remote server of at least
     * this many row bytes moves between the NIC and the caller's buffer
     * directly (registered for the call, or by rkv_client_register); smaller
     * ones go through the engine's buffers, which is faster for them. 0:
     * never. */
    uint64_t zero_copy_bytes;
    /* Busy polling (1): a client call waiting for replies polls the NIC
     * itself, and each node's progress task keeps polling for 20 ms after
     * a completion before it sleeps, so that a reply costs no thread
     * wake-up. The lowest latency, for a core per spinning thread; on a
     * host with fewer cores than spinners it is slower. 0 (the default):
     * threads sleep until woken. */
    int busy_poll;
    /* The cluster's shared secret, any text: a node proves it at connect
     * (challenge-response; it never crosses the wire) and talks only to
     * peers that proved it. Empty (the default): the text of the file
     * secret_file names, else of the file RKV_SECRET_FILE names, else
     * RKV_TOKEN's text, else none, and then anyone who reaches a server's
     * port can join (servers say so at start). The same on every node. */
    char secret[256];
    /* A file holding the secret (its text, one trailing newline, LF or CRLF,
     * dropped; up
     * to 4096 bytes), read when a node opens; an unreadable one is an
     * error. Empty (the default): none. */
    char secret_file[256];
    /* A connection to a server that has not proved the secret within
     * hello_timeout_ms (default 5000; 0: never, which lets silent
     * connections hold descriptors) is dropped; so is one that sends no
     * message for idle_timeout_ms (tcp; default 0: never; else at least
     * RKV_MIN_IDLE_TIMEOUT_MS). A server says its setting when a node
     * connects, and the node sends a keepalive on that connection after a
     * third of it in silence, whatever its own setting: a client waiting in
     * a barrier, or idle between calls, stays; a stopped or hung process
     * goes. */
    uint32_t hello_timeout_ms;
    uint32_t idle_timeout_ms;
    /* The verbs NIC (the tcp and sim ones ignore it). Zero (the default):
     * the NIC's own choices, from RKV_VERBS_DEV, RKV_VERBS_TOS, ... as
     * before. dev: NAME or NAME:PORT ("": the port that owns RKV_HOST's
     * address). Each number applies only with its bit in `set`
     * (RKV_VERBS_SET_*): tos, the IP traffic class of RoCE v2 packets
     * (0..255; a PFC fabric's lossless class); sl, the InfiniBand service
     * level (0..15); gid_index, the source GID on RoCE (0..65535, checked
     * against the port's table at open); mtu, the largest path MTU this
     * node announces and uses (256, 512, 1024, 2048 or 4096); srq_depth, the
     * most buffers of the shared receive pool (0..1048576; 0: a receive
     * queue per peer). The same values are the settings verbs-dev,
     * verbs-tos, ... of the command line and rkv_settings_*. */
    struct rkv_verbs_config {
        char dev[64];
        uint32_t set;
        int tos, sl, gid_index, mtu, srq_depth;
    } verbs;
    /* Internal, NULL (the default) for applications: a table derived from
     * machines[] that a process holding many nodes of one cluster (the
     * twin) builds once and keeps, with machines[], until every node made
     * from this config is destroyed; the nodes then read it in place
     * instead of each keeping its own copy (N nodes x M machines). */
    const struct rkv_cluster *shared;
    /* Internal, 0 (the default) for applications: 1 makes a client keep no
     * per-server counters (rkv_client_peer_stats then fails), for a process
     * holding thousands of clients that never reads them (the twin, which
     * prints them only for clusters of up to 64 servers): 51 counters of
     * 376 bytes per worker of a 1,024-server cluster. */
    int no_peer_stats;
};

enum {
    RKV_VERBS_SET_TOS = 1,
    RKV_VERBS_SET_SL = 2,
    RKV_VERBS_SET_GID_INDEX = 4,
    RKV_VERBS_SET_MTU = 8,
    RKV_VERBS_SET_SRQ_DEPTH = 16
};

RKV_API void rkv_config_defaults(struct rkv_config *cfg);

/* ---- server ---- */
struct rkv_server;

/* Creates server `local_id` (0..servers-1) of cfg->machine_id; it listens at
 * once. Server 0 of machine 0 assigns client ids.
 * Restart: in durable mode, a server whose machine has a snapshot in
 * cfg->durable_dir (rkv-m<machine>.snap) serves the shard from it (or from
 * the machine's shared memory when that is of the same snapshot lineage and
 * so at least as new), logs which snapshot it loaded, and re-registers its
 * address with server 0 under the same server id. Start it with the same
 * config as the first time. Server 0 restarts too (client ids, barriers
 * and registered addresses are in DIR/rkv-coord). When the machine's log
 * holds pushes of a custom op, the replay stops before the first of them
 * and rkv_server_run finishes it with the handlers registered since, and
 * only then listens; a handler still missing there fails rkv_server_run
 * (rkv_server_errmsg names the op). */
RKV_API int rkv_server_create(const struct rkv_config *cfg, uint32_t local_id,
                              struct rkv_server **srv_p, char *err, size_t err_len);
/* Registers custom push op `op` (RKV_OP_CUSTOM..RKV_OP_MAX-1; -RKV_EINVAL
 * otherwise); a NULL fn unregisters. This and the pull handlers'
 * registration, called from inside a handler the server runs, are refused
 * with -RKV_EINVAL (the handler holds the tables they change). */
RKV_API int rkv_server_register_handler(struct rkv_server *srv, int op, rkv_handler_fn fn,
                                        void *user);
/* Registers pull handler `id` (RKV_PULL_CUSTOM..RKV_OP_MAX-1): a pulled row
 * of a tensor with row_len elements gives out_mult * row_len + out_add
 * elements of the tensor's dtype (at least 1, at most the largest row).
 * A NULL fn unregisters (out_mult and out_add are then not read).
 * Register the same on every server and on the clients that use it, before
 * they pull. -RKV_EINVAL: id outside that range, or a fn with out_mult and
 * out_add both 0. */
RKV_API int rkv_server_register_pull_handler(struct rkv_server *srv, int id, rkv_pull_fn fn,
                                             uint32_t out_mult, uint32_t out_add, void *user);
/* The server serves from rkv_server_create() on, on threads of its own,
 * until rkv_server_destroy(); this blocks the calling thread until a client
 * calls rkv_client_shutdown_servers(), after which the server refuses new
 * requests (-RKV_ESHUTDOWN), or until rkv_server_stop() is called, after
 * which it still answers them (see there). Before returning it lingers
 * until the NIC sent every reply it owes (a lossy link retransmits them) or
 * cfg.timeout_ms passed, as TCP's close does. Then call
 * rkv_server_destroy(): the last server of a machine to stop removes the
 * machine's shared memory there (one stopped beside a sibling that still
 * serves leaves it to that one; a server killed by a signal leaves it
 * behind). One thread
 * at a time: a call while another thread is in it is -RKV_EINVAL (said in
 * the server's log). */
RKV_API int rkv_server_run(struct rkv_server *srv);
/* Makes rkv_server_run() return, from any thread: for a server whose
 * cluster never formed (no client will ever shut it down) or the
 * application's own stop. It goes on serving until rkv_server_destroy()
 * (which is what ends its connections): clients with retry_ms in durable
 * mode then redial the server restarted in its place, where one told
 * -RKV_ESHUTDOWN meanwhile would fail. A call before rkv_server_run() makes
 * that return at once. Not from a signal handler (it takes a lock). */
RKV_API void rkv_server_stop(struct rkv_server *srv);
RKV_API const char *rkv_server_errmsg(const struct rkv_server *srv);
/* Stops the server and frees it. A thread still in rkv_server_run() is
 * stopped and waited for first (its call returns; the server is not freed
 * under it); any other call must not overlap this one, and it must not be
 * called from a handler (the server's own thread runs those). */
RKV_API void rkv_server_destroy(struct rkv_server *srv);

/* ---- client (worker) ---- */
struct rkv_client;
/* A NULL client or server (a create whose failure went unchecked) is
 * refused by every call that returns an int (-RKV_EINVAL); the others do
 * nothing or return 0, RKV_CLIENT_OBSERVER (rkv_client_id) or a message
 * saying so (rkv_client_errmsg, rkv_server_errmsg). */

/* Joins server 0 and blocks until all cfg->n_workers clients joined and it
 * assigned ids (or the connect retry time + cfg->timeout_ms passed). Other
 * servers are joined on first use, so a client holds connections only to
 * the servers it talks to. */
RKV_API int rkv_client_create(const struct rkv_config *cfg, struct rkv_client **cli_p, char *err,
                              size_t err_len);
/* A client that reads the store's catalogue only (`rkv ls`, a process
 * joining a running job): it connects to server 0 without taking a worker
 * slot, so it neither waits for the n_workers clients nor counts as one.
 * rkv_client_list and rkv_client_meta work; every other request returns
 * -RKV_EINVAL. Its rkv_client_id is RKV_CLIENT_OBSERVER. It says no HELLO,
 * so no cluster check: point it at the right cluster. Errors: those of
 * rkv_client_create's connect (-RKV_ECONFIG for a bad config, a connect
 * failure within connect_retry_ms). Destroy it with rkv_client_destroy. */
#define RKV_CLIENT_OBSERVER 0xffffffffu
RKV_API int rkv_client_create_observer(const struct rkv_config *cfg, struct rkv_client **cli_p,
                                       char *err, size_t err_len);
RKV_API uint32_t rkv_client_id(const struct rkv_client *cli);
RKV_API int rkv_client_register_handler(struct rkv_client *cli, int op, rkv_handler_fn fn,
                                        void *user);
/* The client's side of rkv_server_register_pull_handler (same arguments and
 * errors): the shape of its replies, and the handler for the rows of this
 * client's machine. */
RKV_API int rkv_client_register_pull_handler(struct rkv_client *cli, int id, rkv_pull_fn fn,
                                             uint32_t out_mult, uint32_t out_add, void *user);
/* Creates a tensor on every machine. Idempotent for an identical desc: the
 * same dtype, rows, row_len, policy (and book), with_state, init and, for
 * RKV_INIT_UNIFORM, init_seed; a desc that differs in any of them under an
 * existing name: -RKV_EEXIST, naming the field, and the tensor keeps its
 * rows. A server that holds the name under another id than server 0's (the
 * servers disagree: restarted apart, or a peer with the secret made it
 * first) refuses it: -RKV_EEXIST naming both ids; one that answers with
 * another id anyway: -RKV_EPROTO naming it. A desc the servers could not take is refused before
 * anything is sent (-RKV_EINVAL, nothing created, the connections untouched): an empty or
 * unterminated name, an unknown dtype, policy or init, rows 0 or above 2^40, row_len 0 or above
 * 2^27, RKV_PART_EXPLICIT without a book (or a book with another policy), with more than 2^32-1
 * rows, or with an entry >= n_machines. So is, with -RKV_ELIMIT naming both sizes, a desc one of
 * whose rows no push could carry to a server, in a cluster of several machines or in durable mode:
 * a push message of one row (the row, its 8-byte id and a 64-byte header)
 * over this client's cfg.max_slot_bytes (a tensor's optimizer state is not
 * pushed; a pull of one row with it, two rows' worth, is refused by that
 * pull alone, saying to raise max_slot_bytes). One that fails on
 * a server part way (no room for a machine's shard: -RKV_ENOMEM, saying
 * which room: /dev/shm's free space, or the memory the host or the server's
 * memory cgroup has left, less a 32nd of its size, 16 MiB to 1 GiB, kept
 * for the processes)
 * leaves
 * the name reserved for that desc until the servers restart, and the shards
 * already made on the machines that had room keep their memory (/dev/shm)
 * until then too: the same desc
 * may be tried again (once there is room; it reuses them), another one
 * under that name is -RKV_EEXIST saying so; list and meta do not show it.
 * Machines that share a host (loopback clusters) share its /dev/shm, and
 * each checks its own shard's room only. The cluster holds
 * at most RKV_MAX_TENSORS tensors (-RKV_ELIMIT past them). A server answers
 * once its machine's shard is made and populated, which takes time in
 * proportion to it: each step waits timeout_ms plus 32 ms per MiB of the
 * largest machine's shard. A shard of 64 MiB or more is made by a task of
 * the server's own, one at a time, while the server goes on answering
 * every other request; a second init_data of that tensor meanwhile waits
 * for the same make. That wait does not count the makes of other tensors
 * queued before it on the same server: an init_data behind several large
 * ones may end -RKV_ETIMEDOUT while its make is still to come, and the
 * same desc tried again waits for it. A server stopped while it makes
 * answers -RKV_ESHUTDOWN (it finishes the make first). */
RKV_API int rkv_client_init_data(struct rkv_client *cli, const struct rkv_tensor_desc *desc);
RKV_API int rkv_client_meta(struct rkv_client *cli, const char *name,
                            struct rkv_tensor_meta *meta_p);
/* Every tensor (DGL's get_data_name_list), as server 0 knows them: those
 * whose rkv_client_init_data finished, by id. Writes the first
 * min(cap, total) into metas (metas may be NULL when cap is 0) and the total
 * into *n_p: call again with a larger array when *n_p > cap. Errors:
 * -RKV_EINVAL for a NULL n_p, or NULL metas with cap > 0; those of a
 * request to server 0 (-RKV_ETIMEDOUT, -RKV_EPEERDEAD, -RKV_EPROTO). */
RKV_API int rkv_client_list(struct rkv_client *cli, struct rkv_tensor_meta *metas, size_t cap,
                            size_t *n_p);
/* Applies rows[i] (row_len elements of the tensor's dtype each) to row ids[i].
 * Returns once every server involved acknowledged (the push is then visible to
 * this client's pulls and, after a barrier, to everyone's). A failed push or
 * pull returns only once the NIC no longer reads or writes rows, unless its
 * connection did not close within cfg.timeout_ms: then -RKV_EINUSE, and the
 * rows must stay valid until rkv_client_destroy.
 * Duplicate ids apply once per occurrence, in the order given: a sum adds
 * each occurrence, an assign leaves the last one's row (and a custom op
 * runs once per occurrence). n = 0 moves nothing and returns 0 (ids and
 * rows may then be NULL); the tensor must still exist and the op be valid.
 * What a push may have applied when it fails:
 *  - nothing, when it fails a check made before anything is sent: unknown
 *    tensor, an id out of range (-RKV_ERANGE), an op out of range, not
 *    registered in this client or not valid for the tensor's dtype or state
 *    (-RKV_ENOHANDLER, -RKV_EDTYPE, -RKV_EINVAL), bad arguments, or
 *    -RKV_ESHUTDOWN: the servers were asked to exit (by this client; or
 *    by another, once server 0 told this one, or for rows of this
 *    machine's shard);
 *  - otherwise (a server died, timed out, or refused its part: a server
 *    without a custom handler the client has; or this client ran out of
 *    memory between two machines' parts), some of it: this machine's
 *    rows (applied by the call itself, unless in durable mode), and the rows
 *    of each server that acknowledged or applied its part before the
 *    failure. Which servers failed is in rkv_client_errmsg. Repeating an
 *    assign is harmless; repeating a sum may apply it twice on the servers
 *    that had applied it (with cfg.retry_ms in durable mode the store's own
 *    retries apply it once). */
RKV_API int rkv_client_push(struct rkv_client *cli, const char *name, const uint64_t *ids, size_t n,
                            const void *rows, int op, double param);
/* A push in flight. */
struct rkv_pending;
/* The same push, returning once it is sent (rows of this machine's shard
 * are applied already): several in flight overlap one's transfer with the
 * servers' work on the others, as ps-lite's ZPush and DGL's push do.
 * ids and rows are read until rkv_client_wait(*pending_p) returns (the NIC
 * may send rows in place, and a retry sends them again): keep both valid
 * and unchanged that long. Pushes to one row apply in issue order, and a
 * pull sees every push issued before it. Errors found before anything was
 * sent are returned here (*pending_p is then NULL); the others by the wait,
 * which every pending push needs exactly once (rkv_client_destroy frees
 * the ones never waited for). A barrier first waits for this client's
 * pushes in flight. A NULL pending_p is -RKV_EINVAL, nothing sent.
 * At most RKV_MAX_ASYNC_REQS requests (one per server a push reaches) of
 * pushes in flight may be unanswered: past it, push_async first waits
 * until the oldest are (it does not wait for them in the caller's stead:
 * each still needs its rkv_client_wait), up to timeout_ms, after which it
 * fails with -RKV_ETIMEDOUT and sends nothing. */
#define RKV_MAX_ASYNC_REQS 4096u
RKV_API int rkv_client_push_async(struct rkv_client *cli, const char *name, const uint64_t *ids,
                                  size_t n, const void *rows, int op, double param,
                                  struct rkv_pending **pending_p);
/* Waits for the acks of a push (or the timeout) and frees it; returns as
 * rkv_client_push would have. pending must be one of cli's not waited for
 * yet; one of another client, or one waited for already, is refused
 * (-RKV_EINVAL) and not read (a freed handle whose address a later
 * push_async of cli reused names that push). */
RKV_API int rkv_client_wait(struct rkv_client *cli, struct rkv_pending *pending);
/* Registers addr..addr+len for zero-copy pushes and pulls (see
 * rkv_config.zero_copy_bytes) until rkv_client_deregister(addr) or
 * rkv_client_destroy: calls whose rows lie inside it skip registering
 * their buffer, which costs a system call and, with verbs, pinning pages.
 * The memory must stay mapped until then: deregister before freeing it (a
 * registration cannot see a buffer freed and allocated again at the same
 * address). At most 64 regions and 4 GiB; beyond, the least recently used
 * registration is dropped (calls then register that memory for themselves).
 * Buffers never registered are registered for the duration of each call.
 * Registrations are not counted: registering memory again that a
 * registration holds is one registration, which one deregister removes. */
RKV_API int rkv_client_register(struct rkv_client *cli, void *addr, size_t len);
RKV_API int rkv_client_deregister(struct rkv_client *cli, void *addr);
/* Fills rows_out[i] with row ids[i], in the caller's order (duplicates allowed;
 * ids may lie inside rows_out: they are copied first then).
 * n = 0 reads nothing and returns 0 (ids and rows_out may be NULL). After
 * the servers were asked to exit: -RKV_ESHUTDOWN, as for a push. */
RKV_API int rkv_client_pull(struct rkv_client *cli, const char *name, const uint64_t *ids, size_t n,
                            void *rows_out);
/* A pull through pull handler `handler` (enum rkv_pull_op, or a registered
 * custom id) with parameter param: rows_out[i] gets what the handler writes
 * for row ids[i], rkv_client_pull_len elements each. Errors, all before
 * anything is sent: -RKV_ENOHANDLER for a handler this client has not
 * registered (or out of range); -RKV_EINVAL for RKV_PULL_WITH_STATE on a
 * tensor without optimizer state; -RKV_ELIMIT for a reply row over the
 * largest row; then those of rkv_client_pull. A server without the handler
 * answers -RKV_ENOHANDLER, one whose registration gives another reply row
 * length -RKV_EPROTO. handler 0 is rkv_client_pull. */
RKV_API int rkv_client_pull_with(struct rkv_client *cli, const char *name, const uint64_t *ids,
                                 size_t n, void *rows_out, int handler, double param);
/* Elements per row that rkv_client_pull_with(name, handler) returns. Same
 * errors as its checks (-RKV_ESHUTDOWN after the servers were asked to
 * exit, as rkv_client_meta). */
RKV_API int rkv_client_pull_len(struct rkv_client *cli, const char *name, int handler,
                                uint32_t *len_p);
/* Returns when every client has entered the barrier, however long that
 * takes (timeout_ms does not end it: a warning is logged each timeout_ms
 * it waits; rkv_client_interrupt does). Fails when a client left the
 * cluster or server 0 is gone (-RKV_EPEERDEAD), and with -RKV_ESHUTDOWN
 * when a client asked the servers to exit meanwhile. */
RKV_API int rkv_client_barrier(struct rkv_client *cli);
/* Asks every server to exit its run loop (any client may call it), each
 * whatever became of the others. Returns 0 once every server acknowledged;
 * a server that could not be asked (dead, unreachable) or did not answer
 * makes it fail, naming the server(s) in rkv_client_errmsg: such a server
 * may still be running. Afterwards every call of this client that needs a
 * server (this one too) returns -RKV_ESHUTDOWN. Other clients' calls that
 * a server holds unanswered (a barrier, an init_data waiting for a large
 * tensor's make) are answered -RKV_ESHUTDOWN by it before it exits, and
 * every server tells the other clients it talked to that it exits (a
 * notice, request id 0): their requests to it, and once server 0 told
 * them, all their calls that need a server, fail -RKV_ESHUTDOWN naming
 * the client that asked, not -RKV_EPEERDEAD as for a server that died. A
 * server that answers it is exiting already (another client asked it, or
 * said it exits) counts as asked, and so, once server 0 said the servers
 * were asked, does one that no longer takes connections. */
RKV_API int rkv_client_shutdown_servers(struct rkv_client *cli);
/* Interrupts the client's calls, from another thread (a watcher of
 * signals: Ctrl-C in the Python binding; it takes the client's lock, so
 * not from a signal handler). While on != 0, a call waiting for its
 * servers, or redialling one (between connect attempts), stops at once
 * with -RKV_EINTR, as if its timeout had passed then, and leaves what a
 * timed-out call leaves: a push may or may not have been applied, a
 * barrier may have been entered (server 0 keeps the entry: the others may
 * pass it, and this client's next barrier call completes that one), late
 * replies are dropped, a zero-copy connection is closed (which may take up
 * to timeout_ms; -RKV_EINUSE if it does not close). Until on = 0, the
 * calls that would send to the servers (push, push_async, pull, pull_with,
 * pull_len, barrier, init_data, meta, list, shutdown_servers) are refused
 * with -RKV_EINTR, nothing sent (a push or pull of n = 0 sends nothing: it
 * returns 0, unless its tensor is one this client would first have to ask
 * server 0 about); rkv_client_wait stops waiting as above and
 * frees the handle. Returns 0, or -RKV_EINVAL for a NULL client. */
RKV_API int rkv_client_interrupt(struct rkv_client *cli, int on); /* not during destroy */
RKV_API const char *rkv_client_errmsg(const struct rkv_client *cli);
RKV_API void rkv_client_destroy(struct rkv_client *cli);

/* ---- counters and latency histograms of a client ----
 * Kept per operation (one entry per call: rkv_client_push, _pull, ...) and
 * per server (one entry per request the call sent that server), since the
 * client's creation or the last rkv_client_stats_reset. Counting costs two
 * clock reads per call and per request and no allocation (a server's
 * counters are allocated once, with its connection). */
enum rkv_stats_op {
    RKV_STATS_PUSH = 0,    /* rkv_client_push; push_async to its wait */
    RKV_STATS_PULL = 1,    /* rkv_client_pull, rkv_client_pull_with */
    RKV_STATS_BARRIER = 2, /* rkv_client_barrier */
    RKV_STATS_INIT = 3,    /* rkv_client_init_data */
    RKV_STATS_OTHER = 4,   /* meta, list, shutdown; per server also hello, address table */
    RKV_STATS_OPS = 5
};
/* Latency buckets, log2: hist[b] counts latencies in [2^b, 2^(b+1)) ns
 * (hist[0] also 0 ns); the last bucket holds everything from 2^39 ns (9 min).
 * Per operation (rkv_client_stats), every call is counted (count, errors,
 * rows, bytes) but not every one is timed: a push or pull served entirely
 * from the caller's own machine's shared-memory shard takes ~50 ns, and
 * reading the clock twice would double that, so of those calls only one in
 * 64 is timed (the first after a reset, then every 64th; timed ones from
 * start to end). A push or pull that sent a request to a server is always
 * timed, from that first request's send to its end (the checks and
 * grouping of its ids before, a few ns a row, are not in it); barrier,
 * init and the others from start to end. Per server every request is
 * timed. `timed` says how many are in total_ns, max_ns and hist: the mean
 * is total_ns / timed. */
#define RKV_STATS_BUCKETS 40
struct rkv_op_stats {
    uint64_t count; /* calls (per operation) or requests (per server) that ended */
    /* Of them, those that failed (timed out, refused, peer gone). Per
     * server, a META answered "no such tensor" is no error: init_data
     * asks one to learn whether its tensor was made before. */
    uint64_t errors;
    uint64_t rows;     /* rows pushed or pulled (by the successful ones) */
    uint64_t bytes;    /* row bytes pushed or pulled (by the successful ones) */
    uint64_t total_ns; /* latencies summed (of every timed one) */
    uint64_t max_ns;
    uint64_t hist[RKV_STATS_BUCKETS]; /* sums to timed */
    uint64_t timed;                   /* of count, those timed: in total_ns, max_ns and hist */
};
/* "push", "pull", "barrier", "init", "other"; NULL for another value. */
RKV_API const char *rkv_stats_op_name(int op);
/* The lower edge of bucket b in ns (2^b; 0 for b = 0; for b past the
 * last bucket, the last's: it holds every latency above its edge). */
RKV_API uint64_t rkv_stats_bucket_ns(uint32_t b);
/* The counters of operation op (enum rkv_stats_op). -RKV_EINVAL for an op
 * out of range. Call from the thread that uses the client. */
RKV_API int rkv_client_stats(struct rkv_client *cli, int op, struct rkv_op_stats *st_p);
/* The counters of the requests of kind op sent to server `server` (global
 * id, 0..rkv_client_n_servers-1): zeros for a server never contacted.
 * -RKV_EINVAL for a server or op out of range, or for a client made with
 * rkv_config.no_peer_stats (it kept none). */
RKV_API int rkv_client_peer_stats(struct rkv_client *cli, uint32_t server, int op,
                                  struct rkv_op_stats *st_p);
RKV_API uint32_t rkv_client_n_servers(const struct rkv_client *cli);
/* Zeroes every counter (per operation and per server). */
RKV_API void rkv_client_stats_reset(struct rkv_client *cli);

/* ---- configuration by name ----
 * The settings of the rkv binary by their flag names ("rx-depth", "cluster",
 * "num-workers"; `rkv config --dump` lists them), so that a program or a
 * binding configures a store without filling struct rkv_config itself. */
struct rkv_settings;

/* An empty set: rkv_settings_build starts from the defaults and the
 * environment as it is then (RKV_* and the ps-lite/DGL names such as
 * DMLC_NUM_WORKER and DGL_IP_CONFIG, as the CLI reads them). */
RKV_API int rkv_settings_create(struct rkv_settings **set_p, char *err, size_t err_len);
/* Sets one setting, overriding the environment as a flag does. key is a flag
 * name, '_' standing for '-' ("rx_depth"); an unknown key, or a number
 * setting's value that is not decimal digits, is -RKV_ECONFIG. Ranges and
 * the rest are checked by rkv_settings_build. */
RKV_API int rkv_settings_set(struct rkv_settings *set, const char *key, const char *value,
                             char *err, size_t err_len);
/* Builds the configuration as the CLI does: machines from the cluster file
 * ("cluster": one machine per line, "host base_port [servers]") or from
 * "machines"/"host"/"base-port"; every value checked. cfg->machines is
 * allocated: rkv_config_release(cfg) frees it. "server-id" (global), when
 * set, chooses cfg->machine_id and *local_server_p (else 0); local_server_p
 * may be NULL. */
RKV_API int rkv_settings_build(const struct rkv_settings *set, struct rkv_config *cfg,
                               uint32_t *local_server_p, char *err, size_t err_len);
RKV_API void rkv_settings_destroy(struct rkv_settings *set);
/* Frees what rkv_settings_build allocated in cfg. */
RKV_API void rkv_config_release(struct rkv_config *cfg);

#ifdef __cplusplus
}
#endif
#endif
