/* Server 0's coordination record: encoding, validation, durable replace
 * (format in coord.h). */
#include "store/coord.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "port/port_file.h"
#include "rkv.h"
#include "store/snapshot.h"
#include "util/util.h"

static size_t coord_bytes(uint32_t version, uint32_t n_workers, uint32_t n_servers)
{
    return RKV_COORD_HDR_BYTES + (size_t)n_workers * RKV_COORD_CLIENT_BYTES +
           (size_t)n_servers * RKV_COORD_ADDR_BYTES + (version >= 3 ? RKV_COORD_COMMIT_BYTES : 0) +
           4;
}

size_t rkv_coord_bytes(uint32_t n_workers, uint32_t n_servers)
{
    return coord_bytes(RKV_COORD_VERSION, n_workers, n_servers);
}

void rkv_coord_encode(const struct rkv_coord *c, uint64_t wall_ns, uint8_t *out)
{
    assert(c->ids_given == 0 || c->ids_given == c->n_workers);
    size_t len = rkv_coord_bytes(c->n_workers, c->n_servers);
    memset(out, 0, len);
    uint8_t *p = out;
    p = rkv_put64(p, RKV_COORD_MAGIC);
    p = rkv_put32(p, RKV_COORD_VERSION);
    p = rkv_put32(p, c->n_workers);
    p = rkv_put64(p, c->fingerprint);
    p = rkv_put64(p, c->barriers_done);
    p = rkv_put32(p, c->n_servers);
    p = rkv_put32(p, c->ids_given);
    p = rkv_put64(p, wall_ns);
    assert((size_t)(p - out) == RKV_COORD_HDR_BYTES);
    for (uint32_t i = 0; i < c->n_workers; i++) {
        p = rkv_put32(p, c->clients[i].machine);
        p = rkv_put32(p, c->clients[i].flags);
        p = rkv_put64(p, c->clients[i].nonce);
    }
    for (uint32_t i = 0; i < c->n_servers; i++) {
        p = rkv_put32(p, c->addrs[i].port);
        p = rkv_put32(p, 0);
        memcpy(p, c->addrs[i].host, strnlen(c->addrs[i].host, RKV_COORD_HOST_BYTES - 1));
        p += RKV_COORD_HOST_BYTES;
    }
    memcpy(p, c->committed, RKV_COORD_COMMIT_BYTES);
    p[0] &= (uint8_t)~1u; /* no id 0 */
    p += RKV_COORD_COMMIT_BYTES;
    rkv_put32(p, rkv_crc32c(0, out, (size_t)(p - out)));
    assert((size_t)(p - out) + 4 == len);
}

int rkv_coord_decode(const uint8_t *buf, size_t len, const char *path, struct rkv_coord *c,
                     char *err, size_t err_len)
{
    if (len < RKV_COORD_HDR_BYTES || rkv_get64(buf) != RKV_COORD_MAGIC)
        return rkv_errf(err, err_len, -RKV_EIO, "%s: not a coordination record (%zu bytes, magic)",
                        path, len);
    uint32_t version = rkv_get32(buf + 8), n_workers = rkv_get32(buf + 12);
    uint32_t n_servers = rkv_get32(buf + 32), ids_given = rkv_get32(buf + 36);
    if (version < 1 || version > RKV_COORD_VERSION)
        return rkv_errf(err, err_len, -RKV_EIO, "%s: version %u, this build reads %u", path,
                        version, RKV_COORD_VERSION);
    /* Whole and intact as its own sizes say before anything it says is
     * believed: a bit flipped in its sizes or fingerprint read as another
     * configuration's record, which a first start removes as an earlier
     * run's (and a restart refused as such). */
    size_t own = coord_bytes(version, n_workers, n_servers);
    if (len != own)
        return rkv_errf(err, err_len, -RKV_EIO,
                        "%s: %zu bytes, its header says %zu (torn or corrupted)", path, len, own);
    if (rkv_get32(buf + len - 4) != rkv_crc32c(0, buf, len - 4))
        return rkv_errf(err, err_len, -RKV_EIO, "%s: CRC-32C mismatch (corrupted)", path);
    if (rkv_get64(buf + 16) != c->fingerprint || n_workers != c->n_workers ||
        n_servers != c->n_servers)
        return rkv_errf(err, err_len, -RKV_ECONFIG,
                        "%s was written by another cluster configuration (%u workers, %u servers; "
                        "this one has %u and %u, or machines, ports or shm prefix differ)",
                        path, n_workers, n_servers, c->n_workers, c->n_servers);
    if (ids_given != 0 && ids_given != n_workers)
        return rkv_errf(err, err_len, -RKV_EIO, "%s: %u ids handed out of %u", path, ids_given,
                        n_workers);
    c->ids_given = ids_given;
    c->barriers_done = rkv_get64(buf + 24);
    const uint8_t *p = buf + RKV_COORD_HDR_BYTES;
    for (uint32_t i = 0; i < n_workers; i++, p += RKV_COORD_CLIENT_BYTES) {
        uint32_t flags = rkv_get32(p + 4);
        if (flags & ~RKV_COORD_LEFT || (flags && i >= ids_given))
            return rkv_errf(err, err_len, -RKV_EIO, "%s: client %u's flags %#x are malformed", path,
                            i, flags);
        c->clients[i] = (struct rkv_coord_client){
            .machine = rkv_get32(p), .flags = flags, .nonce = rkv_get64(p + 8)};
    }
    for (uint32_t i = 0; i < n_servers; i++, p += RKV_COORD_ADDR_BYTES) {
        uint32_t port = rkv_get32(p);
        if (port > UINT16_MAX || p[8 + RKV_COORD_HOST_BYTES - 1] != 0)
            return rkv_errf(err, err_len, -RKV_EIO, "%s: server %u's address is malformed", path,
                            i);
        c->addrs[i].port = (uint16_t)port;
        memcpy(c->addrs[i].host, p + 8, RKV_COORD_HOST_BYTES);
    }
    c->has_committed = version >= 3;
    if (!c->has_committed)
        return 0;
    /* Bits past RKV_MAX_TENSORS, or for id 0, name no tensor. */
    for (uint32_t id = 0; id < RKV_COORD_COMMIT_BYTES * 8u; id++)
        if ((id == 0 || id > RKV_MAX_TENSORS) && (p[id / 8] >> (id % 8) & 1u))
            return rkv_errf(err, err_len, -RKV_EIO, "%s: committed tensor id %u is malformed", path,
                            id);
    memcpy(c->committed, p, RKV_COORD_COMMIT_BYTES);
    return 0;
}

int rkv_coord_write(const char *dir, const struct rkv_coord *c, char *err, size_t err_len)
{
    size_t len = rkv_coord_bytes(c->n_workers, c->n_servers);
    uint8_t *buf = malloc(len);
    if (!buf)
        return rkv_errf(err, err_len, -RKV_ENOMEM, "out of memory");
    rkv_coord_encode(c, rkv_file_wall_ns(), buf);
    int rc =
        rkv_file_replace(dir, RKV_COORD_FILE, RKV_COORD_FILE ".tmp", buf, len, NULL, err, err_len);
    free(buf);
    return rc;
}

int rkv_coord_read(const char *dir, struct rkv_coord *c, char *err, size_t err_len)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, RKV_COORD_FILE);
    uint8_t *buf = NULL;
    size_t len = 0;
    int rc = rkv_file_read(path, &buf, &len, err, err_len);
    if (rc < 0)
        return rc;
    rc = rkv_coord_decode(buf, len, path, c, err, err_len);
    free(buf);
    return rc;
}

void rkv_coord_remove(const char *dir)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, RKV_COORD_FILE);
    rkv_file_unlink(path);
}
