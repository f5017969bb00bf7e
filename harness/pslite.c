/* ps-lite's launch conventions: a scheduler at DMLC_PS_ROOT_URI:
 * DMLC_PS_ROOT_PORT that every server and worker registers with, and that
 * gives each its place. ps-lite users launch `DMLC_ROLE=scheduler`,
 * `=server` and `=worker` processes with the same DMLC_* variables and
 * nothing else: no server knows its id, no node knows the other hosts.
 *
 * Here the scheduler is only the rendezvous: it waits for DMLC_NUM_SERVER
 * servers and DMLC_NUM_WORKER workers, groups the servers by the host each
 * reports (DMLC_NODE_HOST, else DMLC_INTERFACE's IPv4 address, else the
 * address it reached the scheduler from) into machines, numbers them, sends
 * every node the whole cluster (one 'host port servers' line per machine,
 * servers from DMLC_PS_ROOT_PORT + 1) and its id, and exits 0. Each node
 * then runs as `rkv server --cluster ... --server-id N` or `rkv worker
 * --cluster ... --machine-id M` would (impl/cli/pslite.c). The store's own traffic never goes
 * through the scheduler.
 *
 * Wire (text, one line each way): node -> scheduler
 *   "RKV-PSLITE 1 server|worker HOST NUM_SERVER NUM_WORKER\n"
 * scheduler -> node: "OK ID MACHINE N\n" and N machine lines, or "ERR CODE why\n"
 * (CODE: the exit code the node should end with, 2 or 3). */
#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "harness/launch.h"
#include "harness/pslite.h"
#include "nic/nic_core.h"
#include "util/util.h"

#define PSL_LINE_MAX 256
#define PSL_MAGIC "RKV-PSLITE 1"

/* One registered (or registering) node, as the scheduler sees it. */
struct psl_conn {
    int fd;
    char buf[PSL_LINE_MAX]; /* the registration line as it arrives */
    size_t len;
    int registered; /* 1 once its line was accepted */
    int is_server;
    char host[RKV_HOST_MAX + 1];
    uint32_t seq;     /* arrival order, to number servers of one host */
    uint32_t machine; /* a worker's, once placed */
};

static uint64_t psl_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* The counts and the root's address every node and the scheduler agree on. */
struct psl_cfg {
    const char *root_host;
    const char *root_src; /* where root_host came from, for its errors: "env DMLC_PS_ROOT_URI" */
    uint16_t root_port;
    uint32_t n_servers, n_workers;
    uint64_t wait_ms; /* connect-retry-ms + timeout-ms: how long a rendezvous may take */
};

static int psl_cfg_load(const struct cmd_settings *s, struct psl_cfg *c, char *err, size_t err_len)
{
    uint64_t port, ns, nw, retry, tmo;
    if (!*s->val[CMD_NUM_SERVERS])
        return rkv_errf(err, err_len, -1,
                        "num-servers: DMLC_NUM_SERVER (or RKV_NUM_SERVERS) is needed with "
                        "DMLC_ROLE");
    /* ps-lite refuses a node without any of the four. Their defaults were
     * taken here without a word: a worker whose launch script lost
     * DMLC_PS_ROOT_URI waited out its retries for a scheduler at
     * 127.0.0.1:29500, then said "launch one" of the one that ran, and a
     * job without DMLC_NUM_WORKER counted on one worker. */
    static const struct {
        enum cmd_key k;
        const char *what;
    } needed[] = {{CMD_NUM_WORKERS, "num-workers: DMLC_NUM_WORKER (or RKV_NUM_WORKERS)"},
                  {CMD_HOST, "host: DMLC_PS_ROOT_URI (or RKV_HOST), the scheduler's address,"},
                  {CMD_BASE_PORT, "base-port: DMLC_PS_ROOT_PORT (or RKV_BASE_PORT), the "
                                  "scheduler's port,"}};
    for (size_t i = 0; i < sizeof(needed) / sizeof(needed[0]); i++)
        if (!strcmp(s->src[needed[i].k], "default"))
            return rkv_errf(err, err_len, -1,
                            "%s is needed with DMLC_ROLE (every node and the "
                            "scheduler are given the same)",
                            needed[i].what);
    if (rkv_cmd_get_u64(s, CMD_BASE_PORT, &port, err, err_len) < 0 ||
        rkv_cmd_get_u64(s, CMD_NUM_SERVERS, &ns, err, err_len) < 0 ||
        rkv_cmd_get_u64(s, CMD_NUM_WORKERS, &nw, err, err_len) < 0 ||
        rkv_cmd_get_u64(s, CMD_CONNECT_RETRY_MS, &retry, err, err_len) < 0 ||
        rkv_cmd_get_u64(s, CMD_TIMEOUT_MS, &tmo, err, err_len) < 0)
        return -1;
    /* Servers of one host take root_port + 1 ... root_port + n. */
    if (port == 0 || port + ns > 65535 || ns == 0 || ns > 4096 || nw == 0 || nw > 65536)
        return rkv_errf(err, err_len, -1,
                        "need DMLC_PS_ROOT_PORT + DMLC_NUM_SERVER <= 65535, 1..4096 servers and "
                        "1..65536 workers (got port %llu, %llu servers, %llu workers)",
                        (unsigned long long)port, (unsigned long long)ns, (unsigned long long)nw);
    /* Checked up front where it is used (it was looked up only once the
     * scheduler answered). As in ps-lite, the scheduler and a node given
     * DMLC_NODE_HOST do not use it: one launch script may set it for
     * every host, the scheduler's lacking that interface. */
    if (*s->val[CMD_INTERFACE] && strcmp(s->val[CMD_ROLE], "scheduler") != 0 &&
        !*s->val[CMD_NODE_HOST] && if_nametoindex(s->val[CMD_INTERFACE]) == 0)
        return rkv_errf(err, err_len, -1, "interface: no interface \"%s\" on this host (%s)",
                        s->val[CMD_INTERFACE], s->src[CMD_INTERFACE]);
    /* The root's address is checked here, as the cluster's hosts are: " localhost "
     * or "10.0.0.1:9000" reached getaddrinfo and failed as "host ' localhost ': Name
     * or service not known", naming neither the variable nor what to give. */
    char one[RKV_HOST_MAX + 1];
    if (strchr(s->val[CMD_HOST], ','))
        return rkv_errf(err, err_len, -1,
                        "host \"%s\" (%s): the scheduler has one address, not a list",
                        s->val[CMD_HOST], s->src[CMD_HOST]);
    if (rkv_cmd_host_pick(s->val[CMD_HOST], 0, one, sizeof(one), err, err_len) < 0) {
        size_t n = strlen(err);
        snprintf(err + n, err_len - n, " (%s)", s->src[CMD_HOST]);
        return -1;
    }
    *c = (struct psl_cfg){.root_host = s->val[CMD_HOST],
                          .root_src = s->src[CMD_HOST],
                          .root_port = (uint16_t)port,
                          .n_servers = (uint32_t)ns,
                          .n_workers = (uint32_t)nw,
                          .wait_ms = retry + tmo};
    return 0;
}

static int psl_addr(const struct psl_cfg *cfg, struct sockaddr_in *a, char *err, size_t err_len)
{
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res;
    int rc = getaddrinfo(cfg->root_host, NULL, &hints, &res);
    /* The rendezvous is IPv4 only (as ps-lite's): "::1" failed with
     * "Address family for hostname not supported" and no way out. */
    if (rc != 0)
        return rkv_errf(err, err_len, -1,
                        "scheduler host '%s' (%s): %s; give the scheduler's IPv4 address or a "
                        "name with one (the ps-lite rendezvous runs over IPv4)",
                        cfg->root_host, cfg->root_src, gai_strerror(rc));
    *a = *(struct sockaddr_in *)res->ai_addr;
    a->sin_port = htons(cfg->root_port);
    freeaddrinfo(res);
    return 0;
}

static void psl_send(int fd, const char *text)
{
    size_t len = strlen(text);
    while (len > 0) {
        ssize_t n = send(fd, text, len, MSG_NOSIGNAL);
        if (n <= 0)
            return; /* that node is gone; the others go on */
        text += n;
        len -= (size_t)n;
    }
}

/* ---- the scheduler ---- */

/* Checks a node's line; on success fills c. */
static const char *psl_parse_reg(const struct psl_cfg *cfg, struct psl_conn *c, char *why,
                                 size_t why_len)
{
    char role[16], host[PSL_LINE_MAX];
    unsigned long ns, nw;
    if (sscanf(c->buf, PSL_MAGIC " %15s %255s %lu %lu", role, host, &ns, &nw) != 4 ||
        (strcmp(role, "server") != 0 && strcmp(role, "worker") != 0))
        return "not an rkv node registration";
    if (strlen(host) > RKV_HOST_MAX)
        return "host name too long";
    if (ns != cfg->n_servers || nw != cfg->n_workers) {
        snprintf(why, why_len,
                 "this node has DMLC_NUM_SERVER=%lu DMLC_NUM_WORKER=%lu, the scheduler %u and %u",
                 ns, nw, cfg->n_servers, cfg->n_workers);
        return why;
    }
    c->is_server = role[0] == 's';
    memcpy(c->host, host, strlen(host) + 1); /* fits: checked above */
    return NULL;
}

static int psl_cmp_server(const void *a, const void *b)
{
    const struct psl_conn *x = *(const struct psl_conn *const *)a;
    const struct psl_conn *y = *(const struct psl_conn *const *)b;
    int h = strcmp(x->host, y->host);
    return h ? h : (x->seq > y->seq) - (x->seq < y->seq);
}

/* Groups the sorted servers into machines (one per host): first[m] is the
 * first server of machine m, first[*n_mach_p] == k; the cluster file's lines
 * in table. NULL, or why the store cannot take this cluster. */
static const char *psl_machines(const struct psl_cfg *cfg, struct psl_conn **srv, uint32_t k,
                                uint32_t *first, char *table, uint32_t *n_mach_p)
{
    uint32_t n_mach = 0;
    size_t tl = 0;
    for (uint32_t i = 0; i <= k; i++) {
        if (i < k && i > 0 && strcmp(srv[i]->host, srv[i - 1]->host) == 0)
            continue;
        if (i > 0) { /* the machine of servers first[n_mach - 1] .. i - 1 */
            if (i - first[n_mach - 1] > 256)
                return "more than 256 servers on one host";
            tl += (size_t)sprintf(table + tl, "%s %u %u\n", srv[i - 1]->host, cfg->root_port + 1u,
                                  i - first[n_mach - 1]);
        }
        first[n_mach++] = i;
    }
    *n_mach_p = n_mach - 1; /* the last entry is the end marker */
    return *n_mach_p > RKV_MAX_MACHINES ? "servers on more hosts than the machines rkv takes"
                                        : NULL;
}

/* Tells every node "ERR 2 why" (the launch is wrong as it stands). */
static void psl_fail_all(struct psl_conn *conns, uint32_t n, const char *why)
{
    char line[PSL_LINE_MAX + 256];
    snprintf(line, sizeof(line), "ERR %d %s\n", RKV_EXIT_USAGE, why);
    fprintf(stderr, "rkv scheduler: %s\n", why);
    for (uint32_t j = 0; j < n; j++)
        psl_send(conns[j].fd, line);
}

/* Everyone registered: machines are the servers' hosts in name order. */
static int psl_assign(const struct psl_cfg *cfg, struct psl_conn *conns, uint32_t n, FILE *log)
{
    struct psl_conn **srv = calloc(cfg->n_servers, sizeof(*srv));
    char *table = calloc(cfg->n_servers, RKV_HOST_MAX + 32);
    uint32_t *first = calloc(cfg->n_servers + 1, sizeof(*first)); /* machine -> first server */
    int code = RKV_EXIT_OK;
    if (!srv || !table || !first) {
        fprintf(stderr, "rkv scheduler: out of memory\n");
        code = RKV_EXIT_STORE;
        goto free_all;
    }
    uint32_t k = 0, n_mach = 0;
    for (uint32_t i = 0; i < n; i++)
        if (conns[i].registered && conns[i].is_server)
            srv[k++] = &conns[i];
    assert(k == cfg->n_servers);
    qsort(srv, k, sizeof(*srv), psl_cmp_server);
    const char *bad = psl_machines(cfg, srv, k, first, table, &n_mach);
    if (bad) {
        psl_fail_all(conns, n, bad);
        code = RKV_EXIT_USAGE;
        goto free_all;
    }
    /* A worker maps its machine's shard, so it runs where servers run.
     * Every worker is placed before anyone is answered: a node told OK
     * would start while the others are told the cluster failed. */
    for (uint32_t i = 0; i < n; i++) {
        struct psl_conn *c = &conns[i];
        if (!c->registered || c->is_server)
            continue;
        uint32_t m = 0;
        while (m < n_mach && strcmp(srv[first[m]]->host, c->host) != 0)
            m++;
        c->machine = m;
        if (m == n_mach) {
            char why[PSL_LINE_MAX + 160];
            snprintf(why, sizeof(why),
                     "a worker registered from %s, where no server runs: workers share their "
                     "machine's shared memory, so each runs on a server's host (set "
                     "DMLC_NODE_HOST to it)",
                     c->host);
            psl_fail_all(conns, n, why);
            code = RKV_EXIT_USAGE;
            goto free_all;
        }
    }
    for (uint32_t i = 0; i < n; i++) {
        if (!conns[i].registered || conns[i].is_server)
            continue;
        char head[64];
        snprintf(head, sizeof(head), "OK %u %u %u\n", conns[i].machine, conns[i].machine, n_mach);
        psl_send(conns[i].fd, head);
        psl_send(conns[i].fd, table);
    }
    for (uint32_t m = 0; m < n_mach; m++) {
        for (uint32_t i = first[m]; i < first[m + 1]; i++) {
            char head[64];
            snprintf(head, sizeof(head), "OK %u %u %u\n", i, m, n_mach);
            psl_send(srv[i]->fd, head);
            psl_send(srv[i]->fd, table);
        }
    }
    fprintf(log, "rkv scheduler: %u servers and %u workers on %u machines:\n%s", cfg->n_servers,
            cfg->n_workers, n_mach, table);
free_all:
    free(srv);
    free(table);
    free(first);
    return code;
}

/* Reads what a node sent; returns 1 once its line is complete. */
static int psl_read(struct psl_conn *c)
{
    ssize_t r = recv(c->fd, c->buf + c->len, sizeof(c->buf) - 1 - c->len, 0);
    if (r <= 0)
        return -1;
    c->len += (size_t)r;
    c->buf[c->len] = 0;
    char *nl = strchr(c->buf, '\n');
    if (nl) {
        *nl = 0;
        return 1;
    }
    return c->len == sizeof(c->buf) - 1 ? -1 : 0;
}

/* The scheduler's state while nodes register. */
struct psl_sched {
    struct psl_cfg cfg;
    struct psl_conn *conns; /* cap entries, n in use */
    uint32_t n, cap;
    uint32_t got_s, got_w; /* registered servers and workers */
    uint32_t seq;          /* registrations so far */
};

static void psl_drop(struct psl_sched *sc, uint32_t i)
{
    struct psl_conn *c = &sc->conns[i];
    if (c->registered)
        *(c->is_server ? &sc->got_s : &sc->got_w) -= 1;
    close(c->fd);
    *c = sc->conns[--sc->n];
}

/* conns[i] is readable: its line, its departure, or more of its line. */
static void psl_on_input(struct psl_sched *sc, uint32_t i)
{
    struct psl_conn *c = &sc->conns[i];
    int r = psl_read(c);
    if (r < 0 || (r == 0 && c->registered)) /* gone, or talking past its line */
        return psl_drop(sc, i);
    if (r == 0 || c->registered)
        return;
    char why[PSL_LINE_MAX + 64], reply[PSL_LINE_MAX + 80];
    const char *bad = psl_parse_reg(&sc->cfg, c, why, sizeof(why));
    if (!bad && (c->is_server ? sc->got_s == sc->cfg.n_servers : sc->got_w == sc->cfg.n_workers))
        bad = c->is_server ? "more servers than DMLC_NUM_SERVER registered"
                           : "more workers than DMLC_NUM_WORKER registered";
    if (bad) {
        snprintf(reply, sizeof(reply), "ERR %d %s\n", RKV_EXIT_USAGE, bad);
        fprintf(stderr, "rkv scheduler: refused a node: %s\n", bad);
        psl_send(c->fd, reply);
        return psl_drop(sc, i);
    }
    c->registered = 1;
    c->seq = sc->seq++;
    *(c->is_server ? &sc->got_s : &sc->got_w) += 1;
}

/* Waits until every node registered (0) or the deadline (-1). */
static int psl_gather(struct psl_sched *sc, int lfd, struct pollfd *pfd)
{
    uint64_t deadline = psl_now_ms() + sc->cfg.wait_ms;
    while (sc->got_s < sc->cfg.n_servers || sc->got_w < sc->cfg.n_workers) {
        uint64_t now = psl_now_ms();
        if (now >= deadline)
            return -1;
        pfd[0] = (struct pollfd){.fd = lfd, .events = POLLIN};
        for (uint32_t i = 0; i < sc->n; i++)
            pfd[i + 1] = (struct pollfd){.fd = sc->conns[i].fd, .events = POLLIN};
        if (poll(pfd, sc->n + 1, (int)(deadline - now)) < 0)
            continue; /* EINTR; the deadline still holds */
        /* Backwards: a dropped connection's slot takes the last one, seen already. */
        for (uint32_t i = sc->n; i-- > 0;)
            if (pfd[i + 1].revents & (POLLIN | POLLHUP | POLLERR))
                psl_on_input(sc, i);
        if (pfd[0].revents & POLLIN) {
            int fd = accept(lfd, NULL, NULL);
            if (fd >= 0 && sc->n < sc->cap)
                sc->conns[sc->n++] = (struct psl_conn){.fd = fd};
            else if (fd >= 0) /* more connections than nodes: not one of ours */
                close(fd);
        }
    }
    return 0;
}

static int psl_listen(const struct psl_cfg *cfg, int *fd_p)
{
    struct sockaddr_in a;
    char err[512];
    if (psl_addr(cfg, &a, err, sizeof(err)) < 0) {
        fprintf(stderr, "rkv scheduler: %s\n", err);
        return RKV_EXIT_USAGE;
    }
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
        bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(fd, 128) < 0) {
        /* A second scheduler on one port (two jobs given one
         * DMLC_PS_ROOT_PORT) was told only "Address already in use". */
        int e = errno;
        const char *todo =
            e == EADDRINUSE
                ? "; another scheduler, or another program, listens there: stop it, or give "
                  "this job its own DMLC_PS_ROOT_PORT (its servers take the ports after it)"
            : e == EADDRNOTAVAIL ? "; that is not an address of this host: run the scheduler where "
                                   "DMLC_PS_ROOT_URI points"
                                 : "";
        fprintf(stderr, "rkv scheduler: cannot listen on %s:%u (%s): %s%s\n", cfg->root_host,
                cfg->root_port, cfg->root_src, strerror(e), todo);
        if (fd >= 0)
            close(fd);
        return RKV_EXIT_STORE;
    }
    *fd_p = fd;
    return RKV_EXIT_OK;
}

int rkv_pslite_scheduler(const struct cmd_settings *s)
{
    char err[512];
    if (*s->val[CMD_CLUSTER]) {
        printf("rkv scheduler: not needed: the cluster file %s (%s) gives every node its "
               "address and id; exiting\n",
               s->val[CMD_CLUSTER], s->src[CMD_CLUSTER]);
        return RKV_EXIT_OK;
    }
    struct psl_sched sc = {0};
    if (psl_cfg_load(s, &sc.cfg, err, sizeof(err)) < 0) {
        fprintf(stderr, "rkv scheduler: %s\n", err);
        return RKV_EXIT_USAGE;
    }
    int lfd, code = psl_listen(&sc.cfg, &lfd);
    if (code != RKV_EXIT_OK)
        return code;
    /* Every expected node, and a few more connections that are refused. */
    sc.cap = sc.cfg.n_servers + sc.cfg.n_workers + 16;
    sc.conns = calloc(sc.cap, sizeof(*sc.conns));
    struct pollfd *pfd = calloc(sc.cap + 1, sizeof(*pfd));
    if (!sc.conns || !pfd) {
        fprintf(stderr, "rkv scheduler: out of memory\n");
        code = RKV_EXIT_STORE;
    } else if (psl_gather(&sc, lfd, pfd) < 0) {
        fprintf(stderr,
                "rkv scheduler: %u of %u servers and %u of %u workers registered within %llu ms "
                "(connect-retry-ms + timeout-ms)\n",
                sc.got_s, sc.cfg.n_servers, sc.got_w, sc.cfg.n_workers,
                (unsigned long long)sc.cfg.wait_ms);
        for (uint32_t i = 0; i < sc.n; i++)
            psl_send(sc.conns[i].fd, "ERR 3 the scheduler timed out waiting for the other nodes\n");
        code = RKV_EXIT_STORE;
    } else {
        code = psl_assign(&sc.cfg, sc.conns, sc.n, stdout);
    }
    for (uint32_t i = 0; sc.conns && i < sc.n; i++)
        close(sc.conns[i].fd);
    free(sc.conns);
    free(pfd);
    close(lfd);
    return code;
}

/* ---- a server or worker ---- */

/* The host this node announces: DMLC_NODE_HOST, else the IPv4 address of
 * DMLC_INTERFACE, else the address its connection to the scheduler left
 * from (what the scheduler's host can reach it by). */
static int psl_my_host(const struct cmd_settings *s, int fd, char *host, size_t len, char *err,
                       size_t err_len)
{
    if (*s->val[CMD_NODE_HOST]) {
        const char *name = s->val[CMD_NODE_HOST];
        if (strlen(name) >= len || strchr(name, ' '))
            return rkv_errf(err, err_len, -1, "node-host: \"%s\" is not a host name", name);
        /* Announced as its IPv4 address, as the other ways announce one:
         * the scheduler groups servers by what they announce, and
         * "localhost" beside "127.0.0.1" made two machines of one host on
         * one port, the second's server left waiting for ever (an outside
         * tester). */
        struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL;
        int rc = getaddrinfo(name, NULL, &hints, &res);
        if (rc != 0)
            return rkv_errf(err, err_len, -1, "node-host: \"%s\" (%s): %s", name,
                            s->src[CMD_NODE_HOST], gai_strerror(rc));
        const char *ok = inet_ntop(AF_INET, &((struct sockaddr_in *)(void *)res->ai_addr)->sin_addr,
                                   host, (socklen_t)len);
        freeaddrinfo(res);
        return ok ? 0 : rkv_errf(err, err_len, -1, "node-host: \"%s\": %s", name, strerror(errno));
    }
    if (*s->val[CMD_INTERFACE]) {
        struct ifaddrs *ifs;
        if (getifaddrs(&ifs) < 0)
            return rkv_errf(err, err_len, -1, "interface: cannot list interfaces: %s",
                            strerror(errno));
        int found = 0;
        for (struct ifaddrs *i = ifs; i && !found; i = i->ifa_next)
            if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET &&
                strcmp(i->ifa_name, s->val[CMD_INTERFACE]) == 0)
                found = inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, host,
                                  (socklen_t)len) != NULL;
        freeifaddrs(ifs);
        if (!found)
            return rkv_errf(err, err_len, -1, "interface: %s has no IPv4 address (%s)",
                            s->val[CMD_INTERFACE], s->src[CMD_INTERFACE]);
        return 0;
    }
    struct sockaddr_in a;
    socklen_t alen = sizeof(a);
    if (getsockname(fd, (struct sockaddr *)&a, &alen) < 0 ||
        !inet_ntop(AF_INET, &a.sin_addr, host, (socklen_t)len))
        return rkv_errf(err, err_len, -1, "cannot tell this node's address: %s", strerror(errno));
    return 0;
}

/* How often a node waiting for its scheduler says so. */
#define PSL_WAIT_SAY_MS 10000

/* Connects to the scheduler, retrying while it is not up yet; says on
 * stderr that it waits, and for what, when it starts and every
 * PSL_WAIT_SAY_MS (it waited the whole connect-retry-ms + timeout-ms, a
 * minute by default, without a word). Returns the socket, -RKV_ECONFIG when
 * the scheduler's address does not resolve, else -1; err says why. */
static int psl_connect(const struct psl_cfg *cfg, const char *who, uint64_t deadline, char *err,
                       size_t err_len)
{
    struct sockaddr_in a;
    if (psl_addr(cfg, &a, err, err_len) < 0)
        return -RKV_ECONFIG; /* a usage error, not a store one: exit 2 */
    uint64_t t0 = psl_now_ms(), say = t0;
    for (;;) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0)
            return rkv_errf(err, err_len, -1, "socket: %s", strerror(errno));
        int e = connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0 ? 0 : errno;
        if (e == 0 && rkv_nic_self_connected(fd)) {
            /* No scheduler yet, and the root port in the ephemeral range:
             * the kernel gave this socket that port and it connected to
             * itself. It read its own registration back as the scheduler's
             * answer and waited out its deadline, while holding the port
             * the scheduler then could not listen on (an outside tester).
             * A refusal, reset so that nothing lingers in TIME_WAIT. */
            struct linger lg = {.l_onoff = 1, .l_linger = 0};
            (void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
            e = ECONNREFUSED;
        }
        if (e == 0)
            return fd;
        close(fd);
        if (psl_now_ms() >= deadline)
            return rkv_errf(err, err_len, -1,
                            "no scheduler at %s:%u (DMLC_PS_ROOT_URI:DMLC_PS_ROOT_PORT): %s; "
                            "launch one with DMLC_ROLE=scheduler (a job's scheduler exits once "
                            "its DMLC_NUM_SERVER servers and DMLC_NUM_WORKER workers "
                            "registered, so a node started later, a restarted server or one "
                            "worker too many, finds none: a job whose servers may restart is "
                            "launched with a cluster file, RKV_CLUSTER or DGL_IP_CONFIG)",
                            cfg->root_host, cfg->root_port, strerror(e));
        uint64_t now = psl_now_ms();
        if (now >= say) {
            fprintf(stderr,
                    "%s: waiting for the scheduler at %s:%u (DMLC_PS_ROOT_URI:DMLC_PS_ROOT_PORT): "
                    "%s; %llu s so far, giving up in %llu s\n",
                    who, cfg->root_host, cfg->root_port, strerror(e),
                    (unsigned long long)((now - t0) / 1000),
                    (unsigned long long)((deadline - now + 999) / 1000));
            say = now + PSL_WAIT_SAY_MS;
        }
        usleep(100 * 1000);
    }
}

/* Reads the scheduler's answer (up to "OK ..." and its machine lines):
 * RKV_EXIT_OK, or the exit code an "ERR CODE why" line or a failure means. */
static int psl_answer(int fd, uint64_t deadline, char *buf, size_t cap, char *err, size_t err_len)
{
    size_t len = 0;
    for (;;) {
        buf[len] = 0;
        unsigned id, m, nm;
        int code, at;
        if (sscanf(buf, "ERR %d %n", &code, &at) == 1 && strchr(buf, '\n')) {
            *strchr(buf, '\n') = 0;
            rkv_errf(err, err_len, -1, "scheduler: %s", buf + at);
            return code == RKV_EXIT_USAGE ? RKV_EXIT_USAGE : RKV_EXIT_STORE;
        }
        if (sscanf(buf, "OK %u %u %u", &id, &m, &nm) == 3) {
            unsigned lines = 0;
            for (const char *p = buf; (p = strchr(p, '\n')) != NULL; p++)
                lines++;
            if (lines == nm + 1)
                return RKV_EXIT_OK;
        }
        uint64_t now = psl_now_ms();
        if (len == cap - 1 || now >= deadline) {
            rkv_errf(err, err_len, -1, "scheduler: no answer within %s",
                     len == cap - 1 ? "the size limit" : "connect-retry-ms + timeout-ms");
            return RKV_EXIT_STORE;
        }
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, (int)(deadline - now)) <= 0)
            continue;
        ssize_t r = recv(fd, buf + len, cap - 1 - len, 0);
        if (r <= 0) {
            rkv_errf(err, err_len, -1, "scheduler: closed the connection without an answer");
            return RKV_EXIT_STORE;
        }
        len += (size_t)r;
    }
}

int rkv_pslite_mode(const struct cmd_settings *s)
{
    return strcmp(s->src[CMD_ROLE], "env DMLC_ROLE") == 0 && !*s->val[CMD_CLUSTER];
}

/* Registers with the scheduler and reads its answer into ans (cap bytes):
 * RKV_EXIT_OK, or an exit code with the reason in err. */
static int psl_rendezvous(const struct cmd_settings *s, const struct psl_cfg *cfg, int is_server,
                          char *ans, size_t cap, char *host, size_t host_len, char *err,
                          size_t err_len)
{
    uint64_t deadline = psl_now_ms() + cfg->wait_ms;
    int fd = psl_connect(cfg, is_server ? "rkv server" : "rkv worker", deadline, err, err_len);
    if (fd < 0)
        return fd == -RKV_ECONFIG ? RKV_EXIT_USAGE : RKV_EXIT_STORE;
    int code = RKV_EXIT_USAGE;
    if (psl_my_host(s, fd, host, host_len, err, err_len) < 0)
        goto close_fd;
    char line[PSL_LINE_MAX + 64];
    snprintf(line, sizeof(line), PSL_MAGIC " %s %s %u %u\n", is_server ? "server" : "worker", host,
             cfg->n_servers, cfg->n_workers);
    psl_send(fd, line);
    /* The scheduler answers once every node registered: allow for the
     * slowest one's own connect retries. */
    code = psl_answer(fd, deadline + cfg->wait_ms, ans, cap, err, err_len);
close_fd:
    close(fd);
    return code;
}

int rkv_pslite_place(const struct cmd_settings *s, int is_server, char **ans_p, char *host,
                     size_t host_len)
{
    char err[512];
    struct psl_cfg cfg;
    const char *who = is_server ? "rkv server" : "rkv worker";
    *ans_p = NULL;
    if (*s->val[CMD_SERVER_ID]) {
        fprintf(stderr,
                "%s: server-id (%s): under DMLC_ROLE the scheduler numbers the servers; unset "
                "it, or launch with RKV_ROLE and give each server its id\n",
                who, s->src[CMD_SERVER_ID]);
        return RKV_EXIT_USAGE;
    }
    if (psl_cfg_load(s, &cfg, err, sizeof(err)) < 0) {
        fprintf(stderr, "%s: %s\n", who, err);
        return RKV_EXIT_USAGE;
    }
    /* The answer: a head line and one line per machine (bounded by the
     * machine count the store accepts). */
    size_t cap = (size_t)RKV_MAX_MACHINES * (RKV_HOST_MAX + 24) + 64;
    char *ans = malloc(cap);
    if (!ans) {
        fprintf(stderr, "%s: out of memory\n", who);
        return RKV_EXIT_STORE;
    }
    int code = psl_rendezvous(s, &cfg, is_server, ans, cap, host, host_len, err, sizeof(err));
    if (code != RKV_EXIT_OK) {
        fprintf(stderr, "%s: %s\n", who, err);
        free(ans);
        return code;
    }
    *ans_p = ans;
    return RKV_EXIT_OK;
}
