/* ps-lite's launch, the node's side on the command line: once the
 * scheduler gave it its place (harness/pslite.c), the node runs as
 * `rkv server` or `rkv worker` with that cluster and id. */
#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cli/cli.h"
#include "harness/oracle.h"
#include "harness/pslite.h"
#include "harness/scenario.h"
#include "harness/timed.h"
#include "util/util.h"

/* Runs as `rkv server|worker ARGS --cluster TABLE --server-id|--machine-id N`. */
static int psl_run(int argc, char **argv, int is_server, const char *ans, const char *host)
{
    const char *who = is_server ? "rkv server" : "rkv worker";
    unsigned id, m, nm;
    int ok = sscanf(ans, "OK %u %u %u", &id, &m, &nm) == 3;
    assert(ok); /* psl_answer checked it */
    (void)ok;
    if (argc > 64) {
        fprintf(stderr, "%s: more than 64 arguments\n", who);
        return RKV_EXIT_USAGE;
    }
    /* The cluster as a file for the usual path, in memory: nothing is left
     * behind in /tmp whatever happens to this process. */
    int cfd = memfd_create("rkv-cluster", 0);
    const char *table = strchr(ans, '\n') + 1;
    if (cfd < 0 || write(cfd, table, strlen(table)) != (ssize_t)strlen(table)) {
        fprintf(stderr, "%s: cannot keep the cluster table: %s\n", who, strerror(errno));
        if (cfd >= 0)
            close(cfd);
        return RKV_EXIT_STORE;
    }
    char path[64], idv[16];
    snprintf(path, sizeof(path), "/proc/self/fd/%d", cfd);
    snprintf(idv, sizeof(idv), "%u", is_server ? id : m);
    char *args[64 + 8];
    int n = 0;
    for (int i = 0; i < argc; i++)
        args[n++] = argv[i];
    args[n++] = "--cluster";
    args[n++] = path;
    args[n++] = is_server ? "--server-id" : "--machine-id";
    args[n++] = idv;
    args[n] = NULL;
    if (is_server)
        fprintf(stderr, "%s: the scheduler made this node server %u, on machine %u of %u (%s)\n",
                who, id, m, nm, host);
    else
        fprintf(stderr, "%s: the scheduler put this node on machine %u of %u (%s)\n", who, m, nm,
                host);
    int code = is_server ? cmd_server(n, args) : cmd_worker(n, args);
    close(cfd);
    return code;
}

/* What of --scenario's cluster the worker can check before it registers:
 * the oracle's epoch check, and the totals DMLC_NUM_SERVER and
 * DMLC_NUM_WORKER give (the machines are the scheduler's to group). Both
 * were checked only after the scheduler answered (cmd_scenario), when the
 * job had formed: the worker exited 2 and its servers waited forever. */
static int psl_scenario_precheck(const struct cmd_settings *s, const struct rkv_scenario *sc,
                                 char *err, size_t err_len)
{
    uint64_t ns, nw;
    if (rkv_oracle_check_scenario(sc, err, err_len) < 0)
        return -1;
    if (rkv_cmd_get_u64(s, CMD_NUM_SERVERS, &ns, err, err_len) < 0 ||
        rkv_cmd_get_u64(s, CMD_NUM_WORKERS, &nw, err, err_len) < 0)
        return -1;
    if (ns != rkv_scenario_servers(sc) || nw != rkv_scenario_workers(sc))
        return rkv_errf(err, err_len, -1,
                        "%s describes %u server(s) and %u worker(s), but num-servers is %llu "
                        "(%s) and num-workers %llu (%s): launch the cluster the file describes",
                        s->val[CMD_SCENARIO], rkv_scenario_servers(sc), rkv_scenario_workers(sc),
                        (unsigned long long)ns, s->src[CMD_NUM_SERVERS], (unsigned long long)nw,
                        s->src[CMD_NUM_WORKERS]);
    return 0;
}

/* A worker's own settings, checked before it registers: one refused after
 * (RKV_ROUNDS=5000, an unreadable --scenario) had been counted by the
 * scheduler, so the job started, and its servers waited for it forever.
 * Refused here, it never registers and the scheduler fails the launch. */
static int psl_worker_precheck(const struct cmd_settings *s)
{
    struct rkv_timed_workload wl;
    struct rkv_scenario *sc = NULL;
    char err[512];
    if (cmd_worker_refuse_workload(s, "rkv worker") < 0)
        return RKV_EXIT_USAGE;
    if (rkv_timed_workload_load(s, &wl, err, sizeof(err)) == 0 &&
        (!*s->val[CMD_SCENARIO] ||
         (rkv_scenario_load(s->val[CMD_SCENARIO], &sc, err, sizeof(err)) == 0 &&
          psl_scenario_precheck(s, sc, err, sizeof(err)) == 0))) {
        rkv_scenario_free(sc);
        return RKV_EXIT_OK;
    }
    rkv_scenario_free(sc);
    fprintf(stderr, "rkv worker: %s (before registering with the scheduler)\n", err);
    return RKV_EXIT_USAGE;
}

int cmd_pslite_node(int argc, char **argv, const struct cmd_settings *s, int is_server)
{
    char host[RKV_HOST_MAX + 1], *ans = NULL;
    int code = is_server ? RKV_EXIT_OK : psl_worker_precheck(s);
    if (code != RKV_EXIT_OK)
        return code;
    code = rkv_pslite_place(s, is_server, &ans, host, sizeof(host));
    if (code == RKV_EXIT_OK)
        code = psl_run(argc, argv, is_server, ans, host);
    free(ans);
    return code;
}
