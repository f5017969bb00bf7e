/* Platform parameters after defaults (sim/README.md says where they come from). */
#ifndef RKV_SIM_PLAT_H
#define RKV_SIM_PLAT_H

#include <stddef.h>
#include <stdint.h>

#include "harness/scenario.h"

#define SIM_DEFAULT_GBPS 100.0 /* 4x EDR InfiniBand line rate */
#define SIM_DEFAULT_LAT_US 1.0 /* ib_write_lat, 8 B, one switch hop (EDR/HDR) */
#define SIM_DEFAULT_CORES 16
#define SIM_LOOPBACK_HOST "loopback" /* the one host of the loopback platform */

#define SIM_DEFAULT_LEAF 16      /* fattree3: machines per leaf (a 32-port leaf, half up) */
#define SIM_DEFAULT_RAIL_UNIT 32 /* rail: machines per scalable unit (a DGX SuperPOD SU) */
#define SIM_DEFAULT_POD 8        /* fattree3: leaves per pod */
#define SIM_DEFAULT_RAILS 8      /* rail: NICs per machine, one per GPU */

struct sim_plat {
    double gbps, lat_us, backbone_gbps;
    uint32_t cores;
    const char *topology;
    /* fattree3 and rail (sim/README.md, "Platforms") */
    uint32_t leaf_machines, pod_leaves, rails;
    double oversub, pod_oversub, uplink_lat_us;
};

void sim_plat_defaults(const struct rkv_scenario *sc, struct sim_plat *p);
/* The shape of a generated fabric (fattree3, rail) after defaults, in a
 * phrase for the run's header; "" for the other platforms. */
void sim_plat_describe(const struct rkv_scenario *sc, char *buf, size_t len);

#endif
