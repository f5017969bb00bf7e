/* Hosts as machine tables name them: brackets, one address written several
 * ways, and two machines that would put two servers on one port. */
#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "util/util.h"

const char *rkv_host_bare(const char *host, char *buf, size_t len)
{
    size_t hl = host ? strlen(host) : 0;
    if (hl < 2 || host[0] != '[' || host[hl - 1] != ']' || hl - 2 >= len)
        return host;
    memcpy(buf, host + 1, hl - 2);
    buf[hl - 2] = 0;
    return buf;
}

/* A host as the overlap check compares it: an address by its bytes
 * (brackets off, an IPv4-mapped IPv6 address as the IPv4 one: "[::1]",
 * "::1" and "0:0:0:0:0:0:0:1" are one host), a name without regard to case
 * (DNS names are case-insensitive). Names are not resolved: a table of
 * thousands of machines would wait on DNS for each. */
struct host_ent {
    int family; /* AF_INET, AF_INET6, or 0: a name */
    unsigned char addr[16];
    const struct rkv_machine *m;
    uint32_t idx;
};

static void host_key(const struct rkv_machine *m, uint32_t idx, struct host_ent *k)
{
    char buf[RKV_HOST_MAX + 1];
    const char *bare = rkv_host_bare(m->host, buf, sizeof(buf));
    memset(k, 0, sizeof(*k));
    k->m = m;
    k->idx = idx;
    static const unsigned char v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (inet_pton(AF_INET, bare, k->addr) == 1) {
        k->family = AF_INET;
    } else if (inet_pton(AF_INET6, bare, k->addr) == 1) {
        k->family = AF_INET6;
        if (!memcmp(k->addr, v4mapped, sizeof(v4mapped))) {
            memmove(k->addr, k->addr + 12, 4);
            memset(k->addr + 4, 0, 12);
            k->family = AF_INET;
        }
    }
}

static int host_cmp(const struct host_ent *a, const struct host_ent *b)
{
    if (a->family != b->family)
        return a->family < b->family ? -1 : 1;
    return a->family ? memcmp(a->addr, b->addr, sizeof(a->addr))
                     : strcasecmp(a->m->host, b->m->host);
}

/* By host, then first port, then index: a host's machines in port order. */
static int host_ent_cmp(const void *pa, const void *pb)
{
    const struct host_ent *a = pa, *b = pb;
    int c = host_cmp(a, b);
    if (c)
        return c;
    if (a->m->base_port != b->m->base_port)
        return a->m->base_port < b->m->base_port ? -1 : 1;
    return a->idx < b->idx ? -1 : a->idx > b->idx;
}

int rkv_machines_overlap(const struct rkv_machine *ms, uint32_t n, uint32_t *a_p, uint32_t *b_p)
{
    struct host_ent *e = malloc((n ? n : 1) * sizeof(*e));
    if (!e)
        return -1;
    uint32_t k = 0;
    for (uint32_t i = 0; i < n; i++)
        if (ms[i].host[0])
            host_key(&ms[i], i, &e[k++]);
    qsort(e, k, sizeof(*e), host_ent_cmp);
    /* In a host's run, sorted by first port, a machine overlaps an earlier
     * one iff its first port is below the furthest end seen so far. */
    int found = 0;
    const struct host_ent *far = NULL; /* of this host, the range that ends last */
    for (uint32_t i = 0; i < k && !found; i++) {
        const struct host_ent *c = &e[i];
        if (far && host_cmp(far, c) != 0)
            far = NULL;
        uint32_t end = (uint32_t)c->m->base_port + c->m->servers;
        if (far && c->m->base_port < (uint32_t)far->m->base_port + far->m->servers) {
            *a_p = far->idx < c->idx ? far->idx : c->idx;
            *b_p = far->idx < c->idx ? c->idx : far->idx;
            found = 1;
        } else if (!far || end > (uint32_t)far->m->base_port + far->m->servers) {
            far = c;
        }
    }
    free(e);
    return found;
}
