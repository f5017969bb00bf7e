/* Opening a server's or worker's port and NIC in `rkv server` / `rkv worker`.
 * Under `rkv run`, the launcher names each child's node (RKV_FAULT_NODE,
 * the scenario's s<m>.<l> / w<k>); when the scenario aims drop, delay or
 * link_down faults at it, the NIC is wrapped by the fault NIC and its counts
 * go to the file RKV_FAULT_STATS names, for the launcher's report. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "harness/scenario.h"
#include "nic/nic_fault.h"
#include "port/trace.h"
#include "store/node.h"
#include "util/util.h"

#define NODE_MAX_FAULTS RKV_NIC_FAULTS_MAX

/* The faults aimed at this node, and their seed: the scenario's (or the
 * run's --seed), drawn per node as the twin draws it. The process's own
 * seed (a worker's differs by its stack address, for its HELLO nonce)
 * made each run drop other messages: a file's verdict changed from run to
 * run (an outside tester: a 5 % drop on a worker acted on 0, 1 or 2). */
static int node_faults(const struct cmd_settings *s, const char *node, struct rkv_nic_fault *f,
                       uint32_t *n_p, uint64_t *seed_p, char *err, size_t err_len)
{
    const char *name = getenv("RKV_FAULT_NODE");
    *n_p = 0;
    if (!*s->val[CMD_SCENARIO])
        return 0;
    struct rkv_scenario *sc;
    int rc = rkv_scenario_load(s->val[CMD_SCENARIO], &sc, err, err_len);
    if (rc < 0)
        return rc;
    if (!name || !*name) {
        /* Started by a cluster launcher (mpirun, srun), not `rkv run`:
         * nothing here crashes, restarts, slows or names the nodes the
         * faults aim at, and a file with faults passed without a word of
         * them (an outside tester). Said once, by the first rank. */
        if (sc->n_faults && node && !strcmp(node, "s0.0"))
            fprintf(stderr,
                    "rkv node: %s has %u fault(s); none is run here: faults run under `rkv "
                    "run` (its own launcher, --backend tcp or verbs, or the twin), not under "
                    "mpirun or srun, and this run's verdict counts none of them\n",
                    s->val[CMD_SCENARIO], sc->n_faults);
        rkv_scenario_free(sc);
        return 0;
    }
    uint64_t seed = sc->seed;
    char serr[128];
    if (strcmp(s->src[CMD_SEED], "default") != 0 &&
        rkv_cmd_get_u64(s, CMD_SEED, &seed, serr, sizeof(serr)) < 0)
        seed = sc->seed; /* refused with its message where the node reads its settings */
    *n_p = rkv_scenario_nic_faults(sc, name, f, NODE_MAX_FAULTS);
    *seed_p = rkv_scenario_fault_seed(sc, name, seed);
    rkv_scenario_free(sc);
    return 0;
}

/* Under `rkv run --trace` the launcher gives each child a trace file
 * (RKV_TRACE_FILE), its node's name (RKV_TRACE_NODE) and the address of
 * its clock server (RKV_TRACE_CLOCK, "IP:PORT"), see harness/trace_merge.h.
 * RKV_TRACE_SKEW_NS, for tests only, shifts the trace clock of the node
 * RKV_TRACE_SKEW_NODE names (of every node without it) as if it ran on a
 * host whose clock differs. */
static int node_trace_open(struct cmd_node *nd, const char *node, char *err, size_t err_len)
{
    const char *path = getenv("RKV_TRACE_FILE"), *name = getenv("RKV_TRACE_NODE");
    const char *clock = getenv("RKV_TRACE_CLOCK"), *skew = getenv("RKV_TRACE_SKEW_NS");
    const char *skewed = getenv("RKV_TRACE_SKEW_NODE"); /* the one node skewed, or every one */
    if (!path || !*path)
        return 0;
    char host[64] = "";
    unsigned port = 0;
    if (clock && *clock && (sscanf(clock, "%63[^:]:%u", host, &port) != 2 || port > 65535))
        return rkv_errf(err, err_len, -RKV_ECONFIG, "RKV_TRACE_CLOCK: expected IP:PORT, got \"%s\"",
                        clock);
    name = name && *name ? name : node;
    if (skewed && *skewed && strcmp(skewed, name) != 0)
        skew = NULL;
    int rc = rkv_trace_open(path, name, skew && *skew ? strtoll(skew, NULL, 0) : 0, &nd->trace, err,
                            err_len);
    if (rc == 0 && (rc = rkv_trace_sync(nd->trace, host, (uint16_t)port, err, err_len)) < 0) {
        rkv_trace_close(nd->trace);
        nd->trace = NULL;
    }
    if (rc == 0)
        nd->port->trace = nd->trace;
    return rc;
}

int cmd_node_open(const struct cmd_settings *s, const struct rkv_config *cfg, const char *node,
                  uint64_t seed, struct cmd_node *nd, char *err, size_t err_len)
{
    struct rkv_nic_fault f[NODE_MAX_FAULTS];
    uint32_t n_f;
    uint64_t fault_seed = 0;
    memset(nd, 0, sizeof(*nd));
    int rc = node_faults(s, node, f, &n_f, &fault_seed, err, err_len);
    if (rc < 0)
        return rc;
    if ((rc = rkv_node_open(cfg, node, seed, &nd->port, &nd->nic, err, err_len)) < 0)
        return rc;
    if ((rc = node_trace_open(nd, node, err, err_len)) < 0) {
        rkv_node_close(nd->port, nd->nic);
        return rc;
    }
    if (n_f == 0)
        return 0;
    struct rkv_nic *wrapped;
    if ((rc = rkv_nic_fault_wrap(nd->nic, f, n_f, fault_seed, &wrapped)) < 0) {
        rkv_trace_close(nd->trace);
        nd->trace = NULL;
        rkv_node_close(nd->port, nd->nic);
        return rkv_errf(err, err_len, rc, "cannot set up the fault NIC");
    }
    nd->nic = wrapped;
    nd->faulty = 1;
    return 0;
}

/* The counts as one line the launcher reads back (run_fault_stats). */
static void node_write_stats(struct cmd_node *nd)
{
    const char *path = getenv("RKV_FAULT_STATS"), *name = getenv("RKV_FAULT_NODE");
    struct rkv_nic_fault_stats st;
    rkv_nic_fault_stats(nd->nic, &st);
    FILE *f = path && *path ? fopen(path, "w") : NULL;
    if (!f)
        return;
    fprintf(f,
            "FAULTSTAT node=%s messages=%llu dropped=%llu delayed=%llu held=%llu broken=%llu "
            "acted=",
            name ? name : "?", (unsigned long long)st.messages, (unsigned long long)st.dropped,
            (unsigned long long)st.delayed, (unsigned long long)st.held_down,
            (unsigned long long)st.broken);
    for (int i = 0; i < RKV_NIC_FAULTS_MAX; i++)
        fprintf(f, "%s%llu", i ? "," : "", (unsigned long long)st.acted[i]);
    fputc('\n', f);
    fclose(f);
}

void cmd_node_close(struct cmd_node *nd)
{
    if (!nd->nic)
        return;
    if (nd->faulty)
        node_write_stats(nd);
    /* The node's threads are gone (its server or client was destroyed). */
    nd->port->trace = NULL;
    rkv_trace_close(nd->trace);
    nd->trace = NULL;
    rkv_node_close(nd->port, nd->nic);
    nd->nic = NULL;
}
