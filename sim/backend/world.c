/* The simulated world's registries and its event log. */
#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <simgrid/engine.h>

#include "port/hostmem.h"
#include "rkv.h"
#include "sim/backend/route_fifo.h"
#include "sim/backend/sim.h"
#include "sim/backend/sim_int.h"

struct sim_listener {
    char host[64];
    uint16_t port;
    uint32_t nic;
    struct sim_listener *next;
    struct sim_listener *nic_next; /* the same NIC's others */
};

int sim_world_init(struct sim_world *w, uint64_t seed)
{
    memset(w, 0, sizeof(*w));
    w->seed = seed;
    w->listener_cap = 4096;
    w->listeners = calloc(w->listener_cap, sizeof(*w->listeners));
    w->hash = 0xcbf29ce484222325ull;
    return w->listeners ? 0 : -RKV_ENOMEM;
}

void sim_world_fini(struct sim_world *w)
{
    sim_ats_close(&w->ats); /* its users cancel theirs below */
    for (uint32_t i = 0; i < w->listener_cap; i++) {
        for (struct sim_listener *l = w->listeners[i], *next; l; l = next) {
            next = l->next;
            free(l);
        }
    }
    free(w->listeners);
    assert(w->n_nics == 0 || w->nic_free);
    free(w->nic_listeners);
    for (uint32_t i = 0; i < w->n_nics; i++)
        w->nic_free(w->nics[i]);
    free(w->nics);
    free(w->mid_tx_free);
    sim_route_fifo_free(w->route_fifo);
    w->route_fifo = NULL;
    free(w->mid_rx_free);
    if (w->nic_rx_release)
        w->nic_rx_release(w);
    assert(!w->shms || w->shm_free_all);
    if (w->shm_free_all)
        w->shm_free_all(w);
    sim_cpu_fini(w);
    sim_cv_pool_fini(w);
    sim_ats_fini(&w->ats); /* after every user took its own off */
    free(w->log_fold);     /* a run that ended early: its counts are moot */
    if (w->trace) {
        fprintf(w->trace, "\n]}\n");
        fclose(w->trace);
    }
}

static uint32_t sim_bucket(const struct sim_world *w, const char *host, uint16_t port)
{
    uint64_t h = 0xcbf29ce484222325ull ^ port;
    for (const char *c = host; *c; c++)
        h = (h ^ (unsigned char)*c) * 0x100000001b3ull;
    return (uint32_t)(h % w->listener_cap);
}

/* Twice the buckets, when listeners outnumber them: with a fixed 4,096 a
 * connection's lookup at 65,536 nodes walked a chain of 16 and compared
 * their host strings. Out of memory, the chains just stay longer. */
static void sim_listeners_grow(struct sim_world *w)
{
    uint32_t old_cap = w->listener_cap, cap = old_cap * 2;
    struct sim_listener **by = cap > old_cap ? calloc(cap, sizeof(*by)) : NULL;
    if (!by)
        return;
    struct sim_listener **old = w->listeners;
    w->listeners = by;
    w->listener_cap = cap;
    for (uint32_t i = 0; i < old_cap; i++) {
        for (struct sim_listener *l = old[i], *next; l; l = next) {
            next = l->next;
            uint32_t b = sim_bucket(w, l->host, l->port);
            l->next = by[b];
            by[b] = l;
        }
    }
    free(old);
}

int sim_world_listen(struct sim_world *w, const char *host, uint16_t port, uint32_t nic)
{
    uint32_t dummy;
    if (port == 0 || strlen(host) >= 64)
        return -RKV_EINVAL;
    if (sim_world_lookup(w, host, port, &dummy) == 0)
        return -RKV_EEXIST;
    if (nic >= w->nic_listener_cap) {
        uint32_t cap = w->nic_listener_cap ? w->nic_listener_cap : 64;
        while (cap <= nic)
            cap *= 2;
        struct sim_listener **by = realloc(w->nic_listeners, (size_t)cap * sizeof(*by));
        if (!by)
            return -RKV_ENOMEM;
        memset(by + w->nic_listener_cap, 0, (size_t)(cap - w->nic_listener_cap) * sizeof(*by));
        w->nic_listeners = by;
        w->nic_listener_cap = cap;
    }
    struct sim_listener *l = calloc(1, sizeof(*l));
    if (!l)
        return -RKV_ENOMEM;
    strcpy(l->host, host);
    l->port = port;
    l->nic = nic;
    if (w->n_listeners >= w->listener_cap)
        sim_listeners_grow(w);
    uint32_t b = sim_bucket(w, host, port);
    l->next = w->listeners[b];
    w->listeners[b] = l;
    w->n_listeners++;
    l->nic_next = w->nic_listeners[nic];
    w->nic_listeners[nic] = l;
    return 0;
}

int sim_world_lookup(const struct sim_world *w, const char *host, uint16_t port, uint32_t *nic_p)
{
    for (const struct sim_listener *l = w->listeners[sim_bucket(w, host, port)]; l; l = l->next) {
        if (l->port == port && strcmp(l->host, host) == 0) {
            *nic_p = l->nic;
            return 0;
        }
    }
    return -RKV_ENOTENSOR;
}

int sim_world_listening(const struct sim_world *w, const char *host, uint32_t nic, uint16_t port)
{
    uint32_t owner;
    return sim_world_lookup(w, host, port, &owner) == 0 && owner == nic;
}

void sim_world_unlisten(struct sim_world *w, uint32_t nic)
{
    if (nic >= w->nic_listener_cap)
        return; /* it never listened */
    for (struct sim_listener *l = w->nic_listeners[nic], *next; l; l = next) {
        next = l->nic_next;
        struct sim_listener **pp = &w->listeners[sim_bucket(w, l->host, l->port)];
        while (*pp != l)
            pp = &(*pp)->next;
        *pp = l->next;
        free(l);
        w->n_listeners--;
    }
    w->nic_listeners[nic] = NULL;
}

volatile sig_atomic_t sim_world_signo;

void sim_world_event(struct sim_world *w, const uint64_t *v, int n)
{
    if (sim_world_signo && w->on_signal)
        w->on_signal(w, (int)sim_world_signo);
    for (int i = 0; i < n; i++) {
        uint64_t x = v[i];
        for (int b = 0; b < 8; b++, x >>= 8)
            w->hash = (w->hash ^ (x & 0xff)) * 0x100000001b3ull;
    }
    w->events++;
    /* The wall clock is read every 64 events: cheap, and far more often than
     * once per progress_s, or per second of the memory floor, at any rate
     * the twin reaches. */
    int watch_mem = w->mem_floor_bytes && w->mem_low;
    if ((w->events & 63) || (w->progress_s <= 0 && !watch_mem))
        return;
    double now = sim_world_wall();
    /* /proc and /sys once a second, every 50 ms when less than 8 floors
     * are left: a run that starts its nodes takes ~250 MiB a second, past
     * a small cgroup's floor between two reads a second apart. */
    if (watch_mem && now - w->mem_last_s >= (w->mem_near ? 0.05 : 1.0)) {
        w->mem_last_s = now;
        sim_world_mem_check(w);
    }
    if (w->progress_s <= 0)
        return;
    if (w->progress_last_s == 0)
        w->progress_last_s = now;
    else if (now - w->progress_last_s >= w->progress_s) {
        w->progress_last_s = now;
        fprintf(
            stderr, "rkv: twin: simulated %.6f s, %llu network events, %u of %u nodes finished\n",
            simgrid_get_clock(), (unsigned long long)w->events, w->nodes_finished, w->nodes_total);
    }
}

void sim_world_mem_check(struct sim_world *w)
{
    if (!w->mem_floor_bytes || !w->mem_low)
        return;
    struct port_hostmem m;
    (void)rkv_hostmem_read(NULL, &m);
    uint64_t left = rkv_hostmem_left(&m);
    if (left < w->mem_floor_bytes)
        w->mem_low(w, &m);
    w->mem_near = left / 8 < w->mem_floor_bytes;
}

void sim_world_mem_tick(struct sim_world *w)
{
    if (!(++w->mem_ticks & 63))
        sim_world_mem_check(w);
}

double sim_world_wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void sim_world_trace(struct sim_world *w, const char *name, const char *cat, uint32_t pid,
                     uint32_t tid, double t0_s, double t1_s, uint64_t bytes)
{
    if (!w->trace)
        return;
    fprintf(w->trace,
            "%s\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%u,\"tid\":%u,"
            "\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"bytes\":%llu}}",
            w->trace_started ? "," : "", name, cat, pid, tid, t0_s * 1e6, (t1_s - t0_s) * 1e6,
            (unsigned long long)bytes);
    w->trace_started = 1;
}

void sim_world_trace_process(struct sim_world *w, uint32_t pid, const char *name)
{
    if (!w->trace)
        return;
    /* Perfetto showed every machine as "Process N" without it; sorted by
     * machine, as a tcp run's trace is by node. */
    fprintf(w->trace,
            "%s\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%u,\"tid\":0,"
            "\"args\":{\"name\":\"%s\"}},"
            "\n{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%u,\"tid\":0,"
            "\"args\":{\"sort_index\":%u}}",
            w->trace_started ? "," : "", pid, name, pid, pid);
    w->trace_started = 1;
}

void sim_world_trace_name(struct sim_world *w, uint32_t pid, uint32_t tid, const char *name)
{
    if (!w->trace)
        return;
    fprintf(w->trace,
            "%s\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%u,\"tid\":%u,"
            "\"args\":{\"name\":\"%s\"}}",
            w->trace_started ? "," : "", pid, tid, name);
    w->trace_started = 1;
}
