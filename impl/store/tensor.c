/* Tensor descriptions on the wire, and the configuration both roles share. */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nic/nic.h"
#include "store/cluster.h"
#include "store/store_int.h"
#include "util/util.h"

void rkv_tensor_to_wire(const struct rkv_tensor_meta *m, const struct rkv_tensor_desc *d,
                        struct rkv_wire_tensor *w)
{
    memset(w, 0, sizeof(*w));
    memcpy(w->name, m->name, sizeof(w->name));
    w->dtype = m->dtype;
    w->policy = m->policy;
    w->row_len = m->row_len;
    w->rows = m->rows;
    w->with_state = (uint32_t)m->with_state;
    w->init = d ? d->init : 0;
    w->init_seed = d ? d->init_seed : 0;
    w->book_len = m->policy == RKV_PART_EXPLICIT ? (uint32_t)m->rows : 0;
}

int rkv_tensor_from_wire(const struct rkv_wire_tensor *w, const uint32_t *book, uint32_t machines,
                         uint32_t id, struct rkv_tensor *t, char *err, size_t err_len)
{
    return rkv_tensor_from_wire_local(w, book, NULL, machines, id, t, err, err_len);
}

void rkv_tensor_meta_from_wire(const struct rkv_wire_tensor *w, uint32_t id,
                               struct rkv_tensor_meta *m)
{
    memset(m, 0, sizeof(*m));
    memcpy(m->name, w->name, sizeof(m->name));
    m->name[RKV_NAME_MAX] = 0;
    m->id = id;
    m->dtype = (enum rkv_dtype)w->dtype;
    m->rows = w->rows;
    m->row_len = w->row_len;
    m->policy = (enum rkv_policy)w->policy;
    m->with_state = (int)w->with_state;
}

int rkv_tensor_from_wire_local(const struct rkv_wire_tensor *w, const uint32_t *book,
                               const uint64_t *local, uint32_t machines, uint32_t id,
                               struct rkv_tensor *t, char *err, size_t err_len)
{
    memset(t, 0, sizeof(*t));
    size_t esz = rkv_dtype_size((enum rkv_dtype)w->dtype);
    uint64_t row_bytes;
    if (esz == 0 || !rkv_mul_ok(esz, w->row_len, &row_bytes) || row_bytes > RKV_PROTO_MAX_ROW_BYTES)
        return rkv_errf(err, err_len, -RKV_EDTYPE, "tensor '%s': bad dtype or row length", w->name);
    memcpy(t->meta.name, w->name, sizeof(t->meta.name));
    t->meta.name[RKV_NAME_MAX] = 0;
    t->meta.id = id;
    t->meta.dtype = (enum rkv_dtype)w->dtype;
    t->meta.rows = w->rows;
    t->meta.row_len = w->row_len;
    t->meta.policy = (enum rkv_policy)w->policy;
    t->meta.with_state = (int)w->with_state;
    t->row_bytes = (size_t)row_bytes;
    t->init = (enum rkv_init)w->init;
    t->init_seed = w->init_seed;
    return rkv_pbook_init_local(&t->pb, t->meta.policy, w->rows, machines, book, local, err,
                                err_len);
}

int rkv_tensor_desc_check(const struct rkv_tensor_desc *d, char *e, size_t el)
{
    const uint32_t max_row_len = RKV_PROTO_MAX_ROW_BYTES / 8; /* the wire's, whatever the dtype */
    if (!memchr(d->name, 0, sizeof(d->name)) || !d->name[0])
        return rkv_errf(e, el, -RKV_EINVAL,
                        "init_data: name empty or not NUL-terminated within RKV_NAME_MAX + 1 "
                        "bytes");
    const char *n = d->name;
    if (rkv_dtype_size(d->dtype) == 0)
        return rkv_errf(e, el, -RKV_EINVAL, "init_data '%s': dtype %d unknown (RKV_F32..RKV_I64)",
                        n, (int)d->dtype);
    if (d->rows == 0 || d->rows > RKV_PROTO_MAX_ROWS)
        return rkv_errf(e, el, -RKV_EINVAL, "init_data '%s': rows %llu outside [1, %llu]", n,
                        (unsigned long long)d->rows, RKV_PROTO_MAX_ROWS);
    if (d->row_len == 0 || d->row_len > max_row_len)
        return rkv_errf(e, el, -RKV_EINVAL, "init_data '%s': row_len %u outside [1, %u]", n,
                        d->row_len, max_row_len);
    if (d->policy != RKV_PART_RANGE && d->policy != RKV_PART_HASH && d->policy != RKV_PART_EXPLICIT)
        return rkv_errf(e, el, -RKV_EINVAL,
                        "init_data '%s': policy %d unknown (RKV_PART_RANGE..RKV_PART_EXPLICIT)", n,
                        (int)d->policy);
    if (d->policy == RKV_PART_EXPLICIT && !d->book)
        return rkv_errf(e, el, -RKV_EINVAL, "init_data '%s': RKV_PART_EXPLICIT without a book", n);
    if (d->policy != RKV_PART_EXPLICIT && d->local_index) /* said first: the cause of both */
        return rkv_errf(e, el, -RKV_EINVAL,
                        "init_data '%s': a local index needs the EXPLICIT policy (a book)", n);
    /* The wire carries a book only for EXPLICIT: one given with another
     * policy (the policy left as RANGE by mistake) was dropped, and the
     * rows went where the policy put them. */
    if (d->policy != RKV_PART_EXPLICIT && d->book)
        return rkv_errf(e, el, -RKV_EINVAL,
                        "init_data '%s': a book with policy %d, which ignores it (a book needs "
                        "RKV_PART_EXPLICIT)",
                        n, (int)d->policy);
    if (d->policy == RKV_PART_EXPLICIT && d->rows > UINT32_MAX) /* the wire's book_len: 32 bits */
        return rkv_errf(e, el, -RKV_EINVAL,
                        "init_data '%s': an explicit book holds at most 2^32-1 rows, not %llu", n,
                        (unsigned long long)d->rows);
    if (d->init != RKV_INIT_ZEROS && d->init != RKV_INIT_UNIFORM)
        return rkv_errf(e, el, -RKV_EINVAL,
                        "init_data '%s': init %d unknown (RKV_INIT_ZEROS or RKV_INIT_UNIFORM)", n,
                        (int)d->init);
    return 0;
}

void rkv_tensor_free(struct rkv_tensor *t)
{
    if (t->mapped)
        rkv_shard_unmap(&t->shard);
    rkv_pbook_free(&t->pb);
    memset(t, 0, sizeof(*t));
}

int rkv_tensor_put(struct rkv_tensor_table *tt, uint32_t id, struct rkv_tensor *t)
{
    assert(id >= 1 && id <= RKV_MAX_TENSORS);
    struct rkv_tensor ***c = &tt->chunk[id / RKV_TENSOR_CHUNK];
    if (!*c && !(*c = calloc(RKV_TENSOR_CHUNK, sizeof(**c))))
        return -RKV_ENOMEM;
    (*c)[id % RKV_TENSOR_CHUNK] = t;
    return 0;
}

void rkv_tensor_table_free(struct rkv_tensor_table *tt)
{
    for (size_t i = 0; i < sizeof(tt->chunk) / sizeof(tt->chunk[0]); i++) {
        free(tt->chunk[i]);
        tt->chunk[i] = NULL;
    }
}

uint32_t rkv_cfg_n_servers(const struct rkv_config *cfg)
{
    uint32_t n = 0;
    for (uint32_t m = 0; m < cfg->n_machines; m++)
        n += cfg->machines[m].servers;
    return n;
}

uint32_t rkv_cfg_server_id(const struct rkv_config *cfg, uint32_t machine, uint32_t local)
{
    uint32_t n = 0;
    for (uint32_t m = 0; m < machine; m++)
        n += cfg->machines[m].servers;
    return n + local;
}

uint64_t rkv_cfg_slot_mem(const struct rkv_config *cfg, uint64_t host_mem_bytes)
{
    if (cfg->slot_mem_bytes)
        return cfg->slot_mem_bytes;
    /* Slots are pinned on verbs: 4 GiB of them in a 4 GiB VM was the OOM
     * killer (test_hostile's hoarder on soft-RoCE). */
    uint64_t b = RKV_SLOT_MEM_DEFAULT_BYTES;
    if (host_mem_bytes && host_mem_bytes / 4 < b)
        b = host_mem_bytes / 4;
    return cfg->max_slot_bytes > b ? cfg->max_slot_bytes : b;
}

void rkv_cfg_engine(const struct rkv_config *cfg, struct rkv_port *port, uint32_t node_id,
                    struct rkv_engine_cfg *ec)
{
    *ec = (struct rkv_engine_cfg){.node_id = node_id,
                                  .rx_depth = cfg->rx_depth,
                                  .ctrl_buf_bytes = cfg->ctrl_buf_bytes,
                                  .max_slots = cfg->push_slots,
                                  .max_slot_bytes = cfg->max_slot_bytes,
                                  .slot_mem_bytes = rkv_cfg_slot_mem(
                                      cfg, port->ops->mem_bytes ? port->ops->mem_bytes(port) : 0),
                                  .revoke_grace_ms = cfg->timeout_ms / 4 ? cfg->timeout_ms / 4 : 1,
                                  .busy_poll = cfg->busy_poll};
}

static int rkv_cfg_check_verbs(const struct rkv_verbs_config *v, char *err, size_t err_len);

int rkv_cfg_check_machines(const struct rkv_config *cfg, char *err, size_t err_len)
{
    if (cfg->n_machines == 0 || cfg->n_machines > RKV_MAX_MACHINES)
        return rkv_errf(err, err_len, -RKV_ECONFIG, "config: need 1..%u machines, got %u",
                        RKV_MAX_MACHINES, cfg->n_machines);
    /* A required pointer (rkv.h): it said "need 1..65536 machines, got 1". */
    if (!cfg->machines)
        return rkv_errf(err, err_len, -RKV_EINVAL, "config: machines is NULL (n_machines %u)",
                        cfg->n_machines);
    for (uint32_t m = 0; m < cfg->n_machines; m++) {
        const struct rkv_machine *mc = &cfg->machines[m];
        /* First: every message below and later prints the host. */
        if (!memchr(mc->host, 0, sizeof(mc->host)))
            return rkv_errf(err, err_len, -RKV_ECONFIG,
                            "config: machine %u: host is not terminated (at most %u characters)", m,
                            RKV_HOST_MAX);
        /* Port 0 would listen on a port the kernel picks, which no client
         * or announced address knows (a cluster file refuses it too). */
        if (mc->base_port == 0)
            return rkv_errf(err, err_len, -RKV_ECONFIG,
                            "config: machine %u (%s): base_port 0; its servers listen at "
                            "base_port + their local index",
                            m, mc->host);
        if (mc->servers == 0 || mc->servers > 256)
            return rkv_errf(err, err_len, -RKV_ECONFIG,
                            "config: machine %u (%s): servers %u, expected 1..256", m, mc->host,
                            mc->servers);
        if ((uint32_t)mc->base_port + mc->servers > 65536)
            return rkv_errf(err, err_len, -RKV_ECONFIG,
                            "config: machine %u (%s): base_port %u + %u servers runs past port "
                            "65535 (its servers listen at base_port + their local index)",
                            m, mc->host, mc->base_port, mc->servers);
    }
    if (rkv_cfg_n_servers(cfg) > RKV_MAX_SERVERS)
        return rkv_errf(err, err_len, -RKV_ECONFIG,
                        "config: %u servers, but the wire format names at most %u",
                        rkv_cfg_n_servers(cfg), RKV_MAX_SERVERS);
    /* A machine listed twice (or two on one host whose ports meet) put two
     * servers on one port: the second failed at listen, or, a client
     * reaching the first for the second's rows, at HELLO, far from the
     * cause. A cluster file was checked so; a table a program fills was
     * not. */
    uint32_t a, b;
    int dup = rkv_machines_overlap(cfg->machines, cfg->n_machines, &a, &b);
    if (dup < 0)
        return rkv_errf(err, err_len, -RKV_ENOMEM, "config: out of memory checking %u machines",
                        cfg->n_machines);
    if (dup) {
        const struct rkv_machine *ma = &cfg->machines[a], *mb = &cfg->machines[b];
        return rkv_errf(err, err_len, -RKV_ECONFIG,
                        "config: machine %u (%s ports %u..%u) overlaps machine %u (%s ports "
                        "%u..%u): a machine is listed once, and machines on one host need "
                        "distinct ports",
                        b, mb->host, mb->base_port, mb->base_port + mb->servers - 1, a, ma->host,
                        ma->base_port, ma->base_port + ma->servers - 1);
    }
    return 0;
}

int rkv_cfg_check(const struct rkv_config *cfg, char *err, size_t err_len)
{
    /* A shared cluster table checked this machine table when it was built:
     * the twin's nodes would each check it again, machines x nodes. */
    const struct rkv_cluster *sh = cfg->shared;
    if (!sh || sh->machines != cfg->machines || sh->n_machines != cfg->n_machines) {
        int rc = rkv_cfg_check_machines(cfg, err, err_len);
        if (rc < 0)
            return rc;
    }
    if (cfg->n_workers == 0)
        return rkv_errf(err, err_len, -RKV_ECONFIG, "config: need at least one worker");
    if (cfg->n_workers > RKV_MAX_WORKERS)
        return rkv_errf(err, err_len, -RKV_ECONFIG, "config: need 1..%u workers, got %u",
                        RKV_MAX_WORKERS, cfg->n_workers);
    /* Named one by one, as the machines' hosts are. */
    const struct {
        const char *name, *field;
        size_t size;
    } texts[] = {{"backend", cfg->backend, sizeof(cfg->backend)},
                 {"shm_prefix", cfg->shm_prefix, sizeof(cfg->shm_prefix)},
                 {"durable_dir", cfg->durable_dir, sizeof(cfg->durable_dir)}};
    for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++)
        if (!memchr(texts[i].field, 0, texts[i].size))
            return rkv_errf(err, err_len, -RKV_ECONFIG,
                            "config: %s is not terminated (at most %zu characters)", texts[i].name,
                            texts[i].size - 1);
    /* A config zeroed by hand, or a field forgotten: refused by name, as no
     * field of the struct has a default hidden behind its 0 or "". */
    if (!cfg->backend[0] || !cfg->shm_prefix[0])
        return rkv_errf(err, err_len, -RKV_ECONFIG,
                        "config: %s is empty (rkv_config_defaults() sets every field: start from "
                        "it)",
                        !cfg->backend[0] ? "backend" : "shm_prefix");
    /* As the CLI refuses them: "a/b" failed in shm_open as an I/O error,
     * and a log level or busy_poll out of range was taken in silence. A
     * leading '/' is no part of the name (shm_open skips it: the twin's
     * "/rkv-twin", a caller's "/job"). */
    if (strchr(cfg->shm_prefix + strspn(cfg->shm_prefix, "/"), '/'))
        return rkv_errf(err, err_len, -RKV_ECONFIG,
                        "config: shm_prefix \"%s\": a '/' cannot be in a shared-memory name",
                        cfg->shm_prefix);
    if (cfg->log_level < 0 || cfg->log_level > 3)
        return rkv_errf(err, err_len, -RKV_ECONFIG,
                        "config: log_level %d: expected 0 (errors) .. 3 (debug)", cfg->log_level);
    if (cfg->busy_poll != 0 && cfg->busy_poll != 1)
        return rkv_errf(err, err_len, -RKV_ECONFIG, "config: busy_poll %d: expected 0 or 1",
                        cfg->busy_poll);
    /* Other machines may leave their host empty (they register with server 0),
     * but everybody must know where server 0 is. */
    if (!cfg->machines[0].host[0])
        return rkv_errf(err, err_len, -RKV_ECONFIG, "config: machine 0 needs a host");
    if (cfg->machine_id >= cfg->n_machines)
        return rkv_errf(err, err_len, -RKV_ECONFIG, "config: machine id %u, but only %u machines",
                        cfg->machine_id, cfg->n_machines);
    if (cfg->rx_depth < 4 || cfg->ctrl_buf_bytes < 256 || cfg->push_slots < 2 ||
        cfg->max_slot_bytes < cfg->ctrl_buf_bytes)
        return rkv_errf(err, err_len, -RKV_ECONFIG,
                        "config: %s out of range: need rx_depth >= 4, ctrl_buf_bytes >= 256, "
                        "push_slots >= 2, max_slot_bytes >= ctrl_buf_bytes (got rx_depth %u, "
                        "ctrl_buf_bytes %u, push_slots %u, max_slot_bytes %llu)%s",
                        cfg->rx_depth < 4           ? "rx_depth"
                        : cfg->ctrl_buf_bytes < 256 ? "ctrl_buf_bytes"
                        : cfg->push_slots < 2       ? "push_slots"
                                                    : "max_slot_bytes",
                        cfg->rx_depth, cfg->ctrl_buf_bytes, cfg->push_slots,
                        (unsigned long long)cfg->max_slot_bytes,
                        cfg->rx_depth == 0 && cfg->ctrl_buf_bytes == 0
                            ? "; rkv_config_defaults() sets every field: start from it"
                            : "");
    if (cfg->max_slot_bytes > RKV_MAX_SLOT_BYTES)
        return rkv_errf(err, err_len, -RKV_ECONFIG,
                        "config: max_slot_bytes %llu is above %llu (1 GiB, RKV_MAX_SLOT_BYTES), "
                        "the largest message the wire format carries: a row or a request "
                        "larger than that cannot travel in one message at any setting",
                        (unsigned long long)cfg->max_slot_bytes, RKV_MAX_SLOT_BYTES);
    /* Past these a server accepted the setting and every client's connect
     * failed with "configured limit reached", naming none of them. */
    if (cfg->rx_depth > RKV_MAX_RX_DEPTH || cfg->push_slots > RKV_MAX_PUSH_SLOTS ||
        cfg->ctrl_buf_bytes > RKV_MAX_CTRL_BUF_BYTES)
        return rkv_errf(err, err_len, -RKV_ECONFIG,
                        "config: need rx_depth <= %u, push_slots <= %u, ctrl_buf_bytes <= %u (got "
                        "%u, %u, %u)",
                        RKV_MAX_RX_DEPTH, RKV_MAX_PUSH_SLOTS, RKV_MAX_CTRL_BUF_BYTES, cfg->rx_depth,
                        cfg->push_slots, cfg->ctrl_buf_bytes);
    if ((uint64_t)cfg->rx_depth * cfg->ctrl_buf_bytes > RKV_MAX_RX_BYTES)
        return rkv_errf(err, err_len, -RKV_ECONFIG,
                        "config: rx_depth x ctrl_buf_bytes = %u x %u bytes of receive buffers per "
                        "connection, above the limit of %llu MiB",
                        cfg->rx_depth, cfg->ctrl_buf_bytes, RKV_MAX_RX_BYTES >> 20);
    if (cfg->slot_mem_bytes && cfg->slot_mem_bytes < cfg->max_slot_bytes)
        return rkv_errf(err, err_len, -RKV_ECONFIG,
                        "config: slot_mem_bytes %llu is below max_slot_bytes %llu: a message of "
                        "the largest size could never get a slot (0: the default, a quarter of the "
                        "host's memory or of its memory cgroup's limit, at most %llu GiB and at "
                        "least max_slot_bytes)",
                        (unsigned long long)cfg->slot_mem_bytes,
                        (unsigned long long)cfg->max_slot_bytes, RKV_SLOT_MEM_DEFAULT_BYTES >> 30);
    if (cfg->timeout_ms == 0)
        return rkv_errf(err, err_len, -RKV_ECONFIG, "config: timeout_ms must be > 0");
    if (cfg->idle_timeout_ms && cfg->idle_timeout_ms < RKV_MIN_IDLE_TIMEOUT_MS)
        return rkv_errf(err, err_len, -RKV_ECONFIG,
                        "config: idle_timeout_ms %u is below %u (0: never): " RKV_IDLE_WHY,
                        cfg->idle_timeout_ms, RKV_MIN_IDLE_TIMEOUT_MS);
    /* A log's byte offsets are below 1 TiB (its LSNs, wal.h). */
    if (cfg->durable_log_prewrite >= (1ull << 40))
        return rkv_errf(err, err_len, -RKV_ECONFIG,
                        "config: durable_log_prewrite is %llu bytes; a log holds less than 1 TiB",
                        (unsigned long long)cfg->durable_log_prewrite);
    return rkv_cfg_check_verbs(&cfg->verbs, err, err_len);
}

/* Made of parts, so that a node refused for another cluster is told which
 * part differs (it read "machines, ports, workers, shm prefix or durable
 * mode differ", and a DGL job whose trainers counted other workers than its
 * servers was left to guess): bits 0..31 a hash of the machine table,
 * 32..47 n_workers - 1 (1..65536), 48..62 a hash of the shm prefix, 63
 * durable mode. */
#define FP_WORKERS_SHIFT 32
#define FP_PREFIX_SHIFT 48
#define FP_DURABLE (1ull << 63)

uint64_t rkv_cfg_fingerprint(const struct rkv_config *cfg)
{
    uint64_t h = rkv_mix64(cfg->n_machines);
    for (uint32_t m = 0; m < cfg->n_machines; m++) {
        const struct rkv_machine *mc = &cfg->machines[m];
        h = rkv_mix64(h ^ mc->base_port ^ ((uint64_t)mc->servers << 16));
        for (const char *c = mc->host; *c; c++)
            h = rkv_mix64(h ^ (uint8_t)*c);
    }
    uint64_t p = rkv_mix64(0x7072656669780000ull);
    for (const char *c = cfg->shm_prefix; *c; c++)
        p = rkv_mix64(p ^ (uint8_t)*c);
    uint64_t fp = (h & 0xffffffffull) |
                  (uint64_t)((cfg->n_workers - 1u) & 0xffffu) << FP_WORKERS_SHIFT |
                  (p & 0x7fffull) << FP_PREFIX_SHIFT;
    /* A non-durable client would write the shard around the snapshots and
     * take acknowledgements that promise nothing. */
    if (cfg->durable_dir[0])
        fp |= FP_DURABLE;
    return fp;
}

void rkv_fingerprint_diff(uint64_t mine, uint64_t theirs, const char *me, const char *them,
                          char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = 0;
    if ((mine ^ theirs) & 0xffffffffull)
        n += (size_t)snprintf(buf + n, n < len ? len - n : 0,
                              "%sthe machines differ (hosts, ports or servers per machine)",
                              n ? "; " : "");
    unsigned wm = (unsigned)((mine >> FP_WORKERS_SHIFT) & 0xffff) + 1,
             wt = (unsigned)((theirs >> FP_WORKERS_SHIFT) & 0xffff) + 1;
    if (wm != wt)
        n += (size_t)snprintf(buf + n, n < len ? len - n : 0,
                              "%sthe workers differ: %s counts %u, %s %u (num-workers, "
                              "DGL_NUM_CLIENT or DMLC_NUM_WORKER must agree on every node)",
                              n ? "; " : "", me, wm, them, wt);
    if ((mine ^ theirs) & 0x7fffull << FP_PREFIX_SHIFT)
        /* Only a hash of it travels, so neither value can be quoted: the
         * two defaults, which a C worker meeting `rkv server` mixes (an
         * outside tester), are named instead. */
        n += (size_t)snprintf(buf + n, n < len ? len - n : 0,
                              "%sthe shm prefix differs (every node needs the same shm_prefix; "
                              "when none is set, the rkv command line and Python use "
                              "\"rkv-<machine 0's first port>\", rkv_config_defaults \"rkv\")",
                              n ? "; " : "");
    if ((mine ^ theirs) & FP_DURABLE)
        n += (size_t)snprintf(buf + n, n < len ? len - n : 0,
                              "%sdurable mode differs: %s is %sdurable, %s %s", n ? "; " : "", me,
                              mine & FP_DURABLE ? "" : "not ", them,
                              theirs & FP_DURABLE ? "is" : "is not");
    if (!n)
        snprintf(buf, len, "the clusters are the same");
}

void rkv_config_defaults(struct rkv_config *cfg)
{
    if (!cfg) /* nothing to fill, and no way to say so: rkv.h documents it */
        return;
    memset(cfg, 0, sizeof(*cfg));
    strcpy(cfg->backend, "tcp");
    strcpy(cfg->shm_prefix, "rkv");
    cfg->timeout_ms = 30000;
    cfg->connect_retry_ms = 30000;
    cfg->rx_depth = 64;
    cfg->ctrl_buf_bytes = 8192;
    cfg->push_slots = 64;
    cfg->max_slot_bytes = 1ull << 30;
    cfg->seed = 1;
    cfg->log_level = 1;
    cfg->zero_copy_bytes = RKV_ZERO_COPY_DEFAULT_BYTES;
    cfg->hello_timeout_ms = RKV_NIC_HELLO_TIMEOUT_MS;
}

/* The verbs settings' ranges (a field without its bit in set: the NIC's own). */
static int rkv_cfg_check_verbs(const struct rkv_verbs_config *v, char *err, size_t err_len)
{
    static const struct {
        const char *name;
        int max;
    } f[] = {{"tos", 255}, {"sl", 15}, {"gid_index", 65535}, {"mtu", 4096}, {"srq_depth", 1 << 20}};
    const int val[] = {v->tos, v->sl, v->gid_index, v->mtu, v->srq_depth};
    for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++)
        if ((v->set & (1u << i)) && (val[i] < 0 || val[i] > f[i].max))
            return rkv_errf(err, err_len, -RKV_ECONFIG,
                            "config: verbs.%s: %d is out of range (0..%d)", f[i].name, val[i],
                            f[i].max);
    if ((v->set & RKV_VERBS_SET_MTU) && (v->mtu < 256 || (v->mtu & (v->mtu - 1))))
        return rkv_errf(err, err_len, -RKV_ECONFIG,
                        "config: verbs.mtu: %d is not an RDMA MTU (256, 512, 1024, 2048 or 4096)",
                        v->mtu);
    if (v->set & ~31u)
        return rkv_errf(err, err_len, -RKV_ECONFIG, "config: verbs.set: unknown bits 0x%x",
                        v->set & ~31u);
    if (!memchr(v->dev, 0, sizeof(v->dev)))
        return rkv_errf(err, err_len, -RKV_ECONFIG, "config: verbs.dev is not terminated");
    return 0;
}

int rkv_cfg_nic(const struct rkv_config *cfg, struct rkv_nic *nic, char *err, size_t err_len)
{
    if (nic->ops->set_verbs) {
        const struct rkv_verbs_config *v = &cfg->verbs;
        struct rkv_nic_verbs_opts o = {
            .tos = v->set & RKV_VERBS_SET_TOS ? v->tos : -1,
            .sl = v->set & RKV_VERBS_SET_SL ? v->sl : -1,
            .gid_index = v->set & RKV_VERBS_SET_GID_INDEX ? v->gid_index : -1,
            .mtu = v->set & RKV_VERBS_SET_MTU ? v->mtu : -1,
            .srq_depth = v->set & RKV_VERBS_SET_SRQ_DEPTH ? v->srq_depth : -1};
        int rc = nic->ops->set_verbs(nic, &o);
        if (rc < 0)
            return rkv_errf(err, err_len, rc,
                            "the verbs NIC refused the verbs settings (its log says why)");
    }
    nic->hello_timeout_ms = cfg->hello_timeout_ms;
    nic->idle_timeout_ms = cfg->idle_timeout_ms;
    /* A quarter of a request's time: a server blocked on one peer that
     * reads nothing gives it up while the others' requests, queued behind
     * it, still have time to be served (a stopped worker holding a server
     * for the whole timeout timed every other worker's requests out). */
    nic->send_wait_ms = cfg->timeout_ms / 4 > RKV_NIC_SEND_WAIT_MIN_MS ? cfg->timeout_ms / 4
                                                                       : RKV_NIC_SEND_WAIT_MIN_MS;
    size_t secret_len = strnlen(cfg->secret, sizeof(cfg->secret));
    if (secret_len) {
        rkv_nic_set_secret(nic, cfg->secret, secret_len);
    } else if (cfg->secret_file[0]) {
        /* Bounded: the field is a C string only if the caller ended it. */
        char path[sizeof(cfg->secret_file) + 1];
        snprintf(path, sizeof(path), "%.*s", (int)sizeof(cfg->secret_file), cfg->secret_file);
        /* Its message says why: it was "(missing, unreadable, a directory
         * or empty: the log says which)" when the file was too long. */
        int rc = rkv_nic_read_secret_file(nic, path, err, err_len);
        if (rc < 0)
            return rc;
    } /* else the NIC's own, from the environment */
    return 0;
}
