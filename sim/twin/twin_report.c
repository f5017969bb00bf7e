/* A twin run as the harness's report (twin_report.h). */
#include <stdio.h>
#include <string.h>

#include "harness/report.h"
#include "harness/scenario.h"
#include "sim/twin/twin.h"
#include "sim/twin/twin_report.h"

int rkv_twin_report(struct rkv_report *r_p, const struct rkv_scenario *sc,
                    const struct rkv_twin_result *res)
{
    struct rkv_report r;
    if (rkv_report_collect(&r, sc, res->outs, res->n_workers) < 0)
        return -RKV_ENOMEM;
    r.processes_ok = res->nodes_ok;
    r.wall_s = res->wall_s;
    r.sim_s = res->sim_s;
    r.sim_events = res->events;
    r.sim_hash = res->hash;
    r.sim_cpu_s = res->cpu_total_s;
    r.sim_node_cpu_s = res->cpu_s;
    r.sim_sched_cores = res->sched_cores;
    r.sim_sched_wakes = res->sched_wakes;
    if (sc->n_faults) {
        r.fault_run = 1;
        r.faults_fired =
            res->crashed == res->crash_faults && !res->restarts_missed && res->faults_fired;
        /* Nothing may be lost unless a node is gone for good or a
         * connection broke: then every worker must finish every phase. */
        r.must_complete = res->crash_faults == res->restarted && !res->broken;
        r.survivor_errors = res->survivor_errors;
        snprintf(r.faults, sizeof(r.faults), "%s", res->faults);
        snprintf(r.survivor_error, sizeof(r.survivor_error), "%s", res->survivor_error);
    }
    *r_p = r;
    return 0;
}

int rkv_twin_launch(const struct rkv_scenario *sc, const struct rkv_launch_twin_opts *o,
                    struct rkv_report *r_p)
{
    struct rkv_twin_opts to = {.log_level = o->log_level,
                               .test_corrupt_row = o->test_corrupt_row,
                               .store = o->store,
                               .store_set = o->store_set};
    struct rkv_twin_result res;
    memset(r_p, 0, sizeof(*r_p));
    int rc = rkv_twin_run(sc, &to, &res);
    if (rc == 0 && rkv_twin_report(r_p, sc, &res) < 0)
        rc = -RKV_ENOMEM;
    snprintf(r_p->node_error, sizeof(r_p->node_error), "%s",
             res.error[0] || rc == 0 ? res.error : rkv_strerror(rc));
    rkv_twin_result_free(&res);
    return rc;
}
