/* Platforms for the twin, written as SimGrid XML from the scenario's `sim`
 * block (SimGrid 3.32 builds platforms programmatically only from C++).
 * Machine k is host "m<k>", except on the loopback platform, where every
 * machine's nodes share the one host SIM_LOOPBACK_HOST. Numbers and what each topology leaves out
 * are in sim/README.md. */
#include <stdio.h>
#include <string.h>

#include "sim/twin/sim_plat.h"
#include "sim/twin/twin.h"

void sim_plat_defaults(const struct rkv_scenario *sc, struct sim_plat *p)
{
    p->gbps = sc->sim_bandwidth_gbps > 0 ? sc->sim_bandwidth_gbps : SIM_DEFAULT_GBPS;
    p->lat_us = sc->sim_latency_us > 0 ? sc->sim_latency_us : SIM_DEFAULT_LAT_US;
    p->cores = sc->sim_cores ? sc->sim_cores : SIM_DEFAULT_CORES;
    p->topology = sc->sim_platform[0] ? sc->sim_platform : "star";
    /* A 4:1 oversubscribed backbone unless the scenario says otherwise. */
    p->backbone_gbps =
        sc->sim_backbone_gbps > 0 ? sc->sim_backbone_gbps : p->gbps * (sc->machines + 3) / 4;
}

static void plat_head(FILE *f)
{
    fprintf(f, "<?xml version='1.0'?>\n"
               "<!DOCTYPE platform SYSTEM \"https://simgrid.org/simgrid.dtd\">\n"
               "<platform version=\"4.1\">\n");
}

/* Star and cluster: every machine has a full-duplex link into the switch;
 * the cluster also sends every inter-machine flow over one shared backbone. */
static void plat_cluster(FILE *f, const struct rkv_scenario *sc, const struct sim_plat *p,
                         int backbone)
{
    /* Each route crosses two host links (and the backbone): split the
     * latency so that one message pays latency_us end to end. */
    fprintf(f,
            "  <cluster id=\"rkv\" prefix=\"m\" suffix=\"\" radical=\"0-%u\" speed=\"1Gf\" "
            "core=\"%u\" bw=\"%.6fGbps\" lat=\"%.6fus\" sharing_policy=\"SPLITDUPLEX\" "
            "loopback_bw=\"%.6fGbps\" loopback_lat=\"%.6fus\"",
            sc->machines - 1, p->cores, p->gbps, p->lat_us / 2, p->gbps, p->lat_us);
    if (backbone)
        fprintf(f, " bb_bw=\"%.6fGbps\" bb_lat=\"0us\" bb_sharing_policy=\"SHARED\"",
                p->backbone_gbps);
    fprintf(f, "/>\n");
}

/* Two-level fat tree: leaves of up to 16 machines, each leaf linked once to
 * every spine, as many spines as machines per leaf (non-blocking). */
static void plat_fattree(FILE *f, const struct rkv_scenario *sc, const struct sim_plat *p)
{
    uint32_t leaf = sc->machines < 16 ? sc->machines : 16;
    uint32_t leaves = (sc->machines + leaf - 1) / leaf;
    /* Cross-leaf routes take four links. */
    fprintf(f,
            "  <cluster id=\"rkv\" prefix=\"m\" suffix=\"\" radical=\"0-%u\" speed=\"1Gf\" "
            "core=\"%u\" bw=\"%.6fGbps\" lat=\"%.6fus\" sharing_policy=\"SPLITDUPLEX\" "
            "loopback_bw=\"%.6fGbps\" loopback_lat=\"%.6fus\" topology=\"FAT_TREE\" "
            "topo_parameters=\"2;%u,%u;1,%u;1,1\"/>\n",
            leaf * leaves - 1, p->cores, p->gbps, p->lat_us / 4, p->gbps, p->lat_us, leaf, leaves,
            leaf);
}

/* Loopback: the machines are processes on one host (a calibrated loopback
 * run): one host with all the cores, whose every message crosses its
 * loopback link. FATPIPE: each transfer has the link's bandwidth to itself
 * (loopback TCP is limited by the CPU of its copies, charged as CPU, not by
 * a shared wire). */
static void plat_loopback(FILE *f, const struct sim_plat *p)
{
    fprintf(f,
            "  <zone id=\"rkv\" routing=\"Full\">\n"
            "    <host id=\"%s\" speed=\"1Gf\" core=\"%u\"/>\n"
            "    <link id=\"lo\" bandwidth=\"%.6fGbps\" latency=\"%.6fus\" "
            "sharing_policy=\"FATPIPE\"/>\n"
            "    <route src=\"%s\" dst=\"%s\" symmetrical=\"NO\"><link_ctn id=\"lo\"/></route>\n"
            "  </zone>\n",
            SIM_LOOPBACK_HOST, p->cores, p->gbps, p->lat_us, SIM_LOOPBACK_HOST, SIM_LOOPBACK_HOST);
}

int rkv_twin_platform_xml(const struct rkv_scenario *sc, const char *path, char *err,
                          size_t err_len)
{
    struct sim_plat p;
    sim_plat_defaults(sc, &p);
    FILE *f = fopen(path, "w");
    if (!f) {
        snprintf(err, err_len, "cannot write the platform file %s", path);
        return -RKV_EIO;
    }
    plat_head(f);
    if (!strcmp(p.topology, "fattree"))
        plat_fattree(f, sc, &p);
    else if (!strcmp(p.topology, "loopback"))
        plat_loopback(f, &p);
    else
        plat_cluster(f, sc, &p, !strcmp(p.topology, "cluster"));
    fprintf(f, "</platform>\n");
    if (fclose(f) != 0) {
        snprintf(err, err_len, "cannot write the platform file %s", path);
        return -RKV_EIO;
    }
    return 0;
}
