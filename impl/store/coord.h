/* Server 0's coordination record (durable mode): what server 0 alone
 * knows and a restarted server 0 needs to go on serving the same run. The
 * shards, the pushes and every machine's (client, sequence) table are in
 * the machines' snapshots and logs (snapshot.h, wal.h); this small file
 * holds the rest:
 *   - the client ids handed out: per id, the machine and join nonce of the
 *     client that holds it, so that each client re-joins under its id
 *     (and only it: the nonce) after server 0 restarted;
 *   - which client left (its connection went for good while ids were
 *     handed out), so that a barrier after a restart fails as it did
 *     before it ("client N left") instead of waiting for it forever;
 *   - the number of barriers completed, so that a client whose barrier
 *     reply the crash swallowed gets it when it asks again, and one that
 *     asks for the next barrier joins that one, not a stale one;
 *   - the addresses servers registered (machines the config gives no
 *     host), so that clients still find every server.
 * It is replaced whole (temp file, fsync, rename, directory fsync) before
 * what it records is acknowledged: before the HELLO replies that hand out
 * the ids, before the replies of a completed barrier, before a REGISTER's
 * ack, and when the first client leaves or the one that left re-joins.
 * Those are rare events (once per run, once per barrier, once per server
 * start), so a synchronous write costs little.
 *
 * and which tensors server 0 committed (INIT's last phase, after every
 * machine made its shard): a restarted server 0 holds every tensor of its
 * snapshot, and took them all as committed, so one whose init_data had
 * failed was listed, and the same init_data tried again was refused.
 *
 * File DIR/rkv-coord, little-endian, version 3 (version 2, read too, had no
 * committed tensors: all are; version 1 also had zero where the flags are):
 *    0 u64 magic "RKVCOORD"   8 u32 version      12 u32 n_workers
 *   16 u64 cluster fingerprint                    24 u64 barriers done
 *   32 u32 n_servers         36 u32 ids handed out (0 or n_workers)
 *   40 u64 wall_ns (written, Unix)
 *   48 n_workers x { u32 machine, u32 flags (1: it left), u64 nonce }
 *      n_servers x { u32 port (0: not registered), u32 zero,
 *                    RKV_COORD_HOST_BYTES host, NUL-padded }
 *      version 3: RKV_COORD_COMMIT_BYTES, bit i of byte i / 8 set when
 *                 tensor id i is committed (ids 1..RKV_MAX_TENSORS)
 *      u32 CRC-32C of every byte before it
 * A file that is short, fails its CRC, or has another magic, version,
 * fingerprint, worker or server count is refused, naming the file and why.
 */
#ifndef RKV_COORD_H
#define RKV_COORD_H

#include <stddef.h>
#include <stdint.h>

#include "proto/proto.h"
#include "rkv.h"

#define RKV_COORD_MAGIC 0x44524f4f43564b52ull /* "RKVCOORD" */
#define RKV_COORD_VERSION 3u
#define RKV_COORD_LEFT 1u
#define RKV_COORD_FILE "rkv-coord"
#define RKV_COORD_HDR_BYTES 48u
#define RKV_COORD_CLIENT_BYTES 16u
#define RKV_COORD_HOST_BYTES (RKV_PROTO_HOST_MAX + 1)
#define RKV_COORD_ADDR_BYTES (8u + RKV_COORD_HOST_BYTES)
#define RKV_COORD_COMMIT_BYTES ((RKV_MAX_TENSORS + 8u) / 8u)

struct rkv_coord_client {
    uint32_t machine;
    uint32_t flags; /* RKV_COORD_LEFT */
    uint64_t nonce;
};

struct rkv_coord_addr {
    uint16_t port; /* 0: this server has not registered */
    char host[RKV_COORD_HOST_BYTES];
};

/* The record in memory; clients and addrs are the caller's arrays. */
struct rkv_coord {
    uint64_t fingerprint;
    uint32_t n_workers, n_servers;
    uint32_t ids_given; /* 0, or n_workers once every id is handed out */
    uint64_t barriers_done;
    struct rkv_coord_client *clients; /* n_workers */
    struct rkv_coord_addr *addrs;     /* n_servers */
    /* Tensor ids committed (bit id); has_committed: the file said (version
     * 3), else every tensor counts as committed. */
    uint8_t committed[RKV_COORD_COMMIT_BYTES];
    int has_committed;
};

size_t rkv_coord_bytes(uint32_t n_workers, uint32_t n_servers);
/* Encodes c into out (rkv_coord_bytes long). */
void rkv_coord_encode(const struct rkv_coord *c, uint64_t wall_ns, uint8_t *out);
/* Decodes buf into c, whose fingerprint, n_workers, n_servers and arrays
 * the caller set: the file must match them. -RKV_ECONFIG or -RKV_EIO with
 * the reason (prefixed by path) in err. */
int rkv_coord_decode(const uint8_t *buf, size_t len, const char *path, struct rkv_coord *c,
                     char *err, size_t err_len);
/* Writes c durably as DIR/rkv-coord. */
int rkv_coord_write(const char *dir, const struct rkv_coord *c, char *err, size_t err_len);
/* Reads DIR/rkv-coord into c: -RKV_ENOTENSOR when there is none. */
int rkv_coord_read(const char *dir, struct rkv_coord *c, char *err, size_t err_len);
/* Removes a record of an earlier run (a new lineage starts). */
void rkv_coord_remove(const char *dir);

#endif
