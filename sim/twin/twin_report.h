/* A twin run (sim/twin/twin.h) as the harness's report (harness/report.h),
 * as a real run on the launcher gives it, and the twin as the measuring
 * tools' runner (rkv_launch_twin_fn). */
#ifndef RKV_TWIN_REPORT_H
#define RKV_TWIN_REPORT_H

#include "harness/launch.h"
#include "harness/report.h"
#include "harness/scenario.h"

struct rkv_twin_result;

/* The report of a finished twin run (0, or -RKV_ENOMEM). */
int rkv_twin_report(struct rkv_report *r_p, const struct rkv_scenario *sc,
                    const struct rkv_twin_result *res);

/* Runs sc in the twin and reports it (0, or the twin's -RKV_E*, with
 * r_p->node_error saying why). */
int rkv_twin_launch(const struct rkv_scenario *sc, const struct rkv_launch_twin_opts *o,
                    struct rkv_report *r_p);

#endif
