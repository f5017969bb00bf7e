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
        sc->sim_backbone_gbps > 0 ? sc->sim_backbone_gbps : p->gbps * sc->machines / 4;
    uint32_t leaf = !strcmp(p->topology, "rail") ? SIM_DEFAULT_RAIL_UNIT : SIM_DEFAULT_LEAF;
    p->leaf_machines = sc->sim_leaf_machines ? sc->sim_leaf_machines
                       : sc->machines < leaf ? sc->machines
                                             : leaf;
    /* As the leaf: a default pod no larger than the leaves there are (2
     * machines were "1 pod of 8 leaves"). One pod has no core links, so
     * the routes are the same. */
    uint32_t leaves =
        (sc->machines + p->leaf_machines - 1) / (p->leaf_machines ? p->leaf_machines : 1);
    p->pod_leaves = sc->sim_pod_leaves         ? sc->sim_pod_leaves
                    : leaves < SIM_DEFAULT_POD ? (leaves ? leaves : 1)
                                               : SIM_DEFAULT_POD;
    p->rails = sc->sim_rails ? sc->sim_rails : SIM_DEFAULT_RAILS;
    p->oversub = sc->sim_oversub > 0 ? sc->sim_oversub : 1;
    p->pod_oversub = sc->sim_pod_oversub > 0 ? sc->sim_pod_oversub : 1;
    p->uplink_lat_us = sc->sim_uplink_latency_us > 0 ? sc->sim_uplink_latency_us : p->lat_us / 2;
}

void sim_plat_describe(const struct rkv_scenario *sc, char *buf, size_t len)
{
    struct sim_plat p;
    sim_plat_defaults(sc, &p);
    uint32_t leaves = (sc->machines + p.leaf_machines - 1) / p.leaf_machines;
    buf[0] = 0;
    uint32_t pods = (leaves + p.pod_leaves - 1) / p.pod_leaves;
    /* A last leaf (pod, unit) that is not full: "up to", or 20 machines
     * read as "2 leaves of 16 machines". */
    const char *leaf_up = sc->machines % p.leaf_machines ? "up to " : "";
    const char *pod_up = leaves % p.pod_leaves ? "up to " : "";
    if (!sc->sim_platform_file[0] && !strcmp(p.topology, "fattree3"))
        snprintf(buf, len,
                 "%u %s of %s%u machine%s, %u pod%s of %s%u %s; uplinks %g:1 at the leaves, "
                 "%g:1 at the pods",
                 leaves, leaves == 1 ? "leaf" : "leaves", leaf_up, p.leaf_machines,
                 p.leaf_machines == 1 ? "" : "s", pods, pods == 1 ? "" : "s", pod_up, p.pod_leaves,
                 p.pod_leaves == 1 ? "leaf" : "leaves", p.oversub, p.pod_oversub);
    else if (!sc->sim_platform_file[0] && !strcmp(p.topology, "rail"))
        snprintf(buf, len, "%u unit%s of %s%u machine%s with %u rail%s; rail leaves' uplinks %g:1",
                 leaves, leaves == 1 ? "" : "s", leaf_up, p.leaf_machines,
                 p.leaf_machines == 1 ? "" : "s", p.rails, p.rails == 1 ? "" : "s", p.oversub);
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
    /* Each link half of latency_us: a route inside a leaf (two links,
     * one switch) pays latency_us, as on the star and on fattree3, and one
     * across leaves (four links, three switches) twice that, as fattree3's
     * by default. A quarter made a leaf's routes half the star's, so a
     * fat tree ran small messages faster than a star (an outside tester). */
    fprintf(f,
            "  <cluster id=\"rkv\" prefix=\"m\" suffix=\"\" radical=\"0-%u\" speed=\"1Gf\" "
            "core=\"%u\" bw=\"%.6fGbps\" lat=\"%.6fus\" sharing_policy=\"SPLITDUPLEX\" "
            "loopback_bw=\"%.6fGbps\" loopback_lat=\"%.6fus\" topology=\"FAT_TREE\" "
            "topo_parameters=\"2;%u,%u;1,%u;1,1\"/>\n",
            leaf * leaves - 1, p->cores, p->gbps, p->lat_us / 2, p->gbps, p->lat_us, leaf, leaves,
            leaf);
}

/* A SPLITDUPLEX link (its UP and DOWN halves are separate capacities). */
static void plat_link(FILE *f, const char *id, uint32_t a, uint32_t b, double gbps, double lat_us)
{
    fprintf(f,
            "    <link id=\"%s%u_%u\" bandwidth=\"%.6fGbps\" latency=\"%.6fus\" "
            "sharing_policy=\"SPLITDUPLEX\"/>\n",
            id, a, b, gbps, lat_us);
}

/* A route between two zones (through their gateways) over one link up and
 * another down; symmetrical="NO" so that each direction names its halves. */
static void plat_zone_route(FILE *f, const char *src, const char *dst, const char *gw_src,
                            const char *gw_dst, const char *up, const char *down)
{
    fprintf(f,
            "    <zoneRoute src=\"%s\" dst=\"%s\" gw_src=\"%s\" gw_dst=\"%s\" "
            "symmetrical=\"NO\">",
            src, dst, gw_src, gw_dst);
    if (up[0])
        fprintf(f, "<link_ctn id=\"%s\" direction=\"UP\"/>", up);
    if (down[0])
        fprintf(f, "<link_ctn id=\"%s\" direction=\"DOWN\"/>", down);
    fprintf(f, "</zoneRoute>\n");
}

/* Three-level fat tree, as zones: a pod (zone p<q>) holds its leaves (a
 * cluster l<i> of machines each, whose router is the leaf switch) and an
 * aggregation router (zone p<q>a, its gateway to the core). A leaf's
 * uplinks are one bundle of machines_per_leaf x bandwidth / oversubscription
 * (ECMP spreading flows perfectly over them), a pod's the same over its
 * leaves' bundles. Routes: same leaf 2 links, same pod 4, across pods 6.
 * Routes between zones make the XML grow as leaves_per_pod^2 x pods +
 * pods^2, not machines^2. */
static void plat_fattree3(FILE *f, const struct rkv_scenario *sc, const struct sim_plat *p)
{
    uint32_t leaf = p->leaf_machines, pod = p->pod_leaves;
    uint32_t leaves = (sc->machines + leaf - 1) / leaf, pods = (leaves + pod - 1) / pod;
    double leaf_gbps = leaf * p->gbps / p->oversub, pod_gbps = pod * leaf_gbps / p->pod_oversub;
    char a[32], b[32], ga[32], gb[32], la[32], lb[32];
    fprintf(f, "  <zone id=\"rkv\" routing=\"Full\">\n");
    for (uint32_t q = 0; q < pods; q++) {
        uint32_t l0 = q * pod, l1 = l0 + pod < leaves ? l0 + pod : leaves;
        fprintf(f, "  <zone id=\"p%u\" routing=\"Full\">\n", q);
        for (uint32_t l = l0; l < l1; l++) {
            uint32_t last = (l + 1) * leaf < sc->machines ? (l + 1) * leaf : sc->machines;
            fprintf(f,
                    "    <cluster id=\"l%u\" prefix=\"m\" suffix=\"\" radical=\"%u-%u\" "
                    "speed=\"1Gf\" core=\"%u\" bw=\"%.6fGbps\" lat=\"%.6fus\" "
                    "sharing_policy=\"SPLITDUPLEX\" loopback_bw=\"%.6fGbps\" "
                    "loopback_lat=\"%.6fus\" router_id=\"l%u_r\"/>\n",
                    l, l * leaf, last - 1, p->cores, p->gbps, p->lat_us / 2, p->gbps, p->lat_us, l);
            plat_link(f, "l", l, 0, leaf_gbps, p->uplink_lat_us);
        }
        fprintf(f, "    <zone id=\"p%ua\" routing=\"Full\"><router id=\"p%u_r\"/></zone>\n", q, q);
        snprintf(b, sizeof(b), "p%ua", q);
        snprintf(gb, sizeof(gb), "p%u_r", q);
        for (uint32_t i = l0; i < l1; i++) {
            snprintf(a, sizeof(a), "l%u", i);
            snprintf(ga, sizeof(ga), "l%u_r", i);
            snprintf(la, sizeof(la), "l%u_0", i);
            plat_zone_route(f, a, b, ga, gb, la, "");
            plat_zone_route(f, b, a, gb, ga, "", la);
            for (uint32_t j = l0; j < l1; j++) {
                char d[32], gd[32];
                snprintf(d, sizeof(d), "l%u", j);
                snprintf(gd, sizeof(gd), "l%u_r", j);
                snprintf(lb, sizeof(lb), "l%u_0", j);
                if (i != j)
                    plat_zone_route(f, a, d, ga, gd, la, lb);
            }
        }
        fprintf(f, "  </zone>\n");
    }
    for (uint32_t q = 0; q < pods; q++)
        plat_link(f, "p", q, 0, pod_gbps, p->uplink_lat_us);
    for (uint32_t q = 0; q < pods; q++)
        for (uint32_t r = 0; r < pods; r++) {
            if (q == r)
                continue;
            snprintf(a, sizeof(a), "p%u", q);
            snprintf(b, sizeof(b), "p%u", r);
            snprintf(ga, sizeof(ga), "p%u_r", q);
            snprintf(gb, sizeof(gb), "p%u_r", r);
            snprintf(la, sizeof(la), "p%u_0", q);
            snprintf(lb, sizeof(lb), "p%u_0", r);
            plat_zone_route(f, a, b, ga, gb, la, lb);
        }
    fprintf(f, "  </zone>\n");
}

/* Rail-optimized: a scalable unit (zone u<s>) of machines_per_leaf
 * machines, each with `rails` NICs; NIC r of every machine of the unit
 * plugs into the unit's leaf r (router u<s>_<r>), whose uplinks to rail
 * r's spine are one bundle of machines_per_leaf x bandwidth /
 * oversubscription. The twin runs a machine's nodes on one host, so a flow
 * cannot name its GPU's rail: a pair of machines a, b uses rail (a + b) mod
 * rails (one leaf hop in a unit), and two units s, t talk over rail
 * (s + t) mod rails (NIC, leaf, spine, leaf, NIC: SimGrid routes zones
 * through one gateway pair). */
static void plat_rail(FILE *f, const struct rkv_scenario *sc, const struct sim_plat *p)
{
    uint32_t unit = p->leaf_machines, units = (sc->machines + unit - 1) / unit;
    double up_gbps = unit * p->gbps / p->oversub;
    fprintf(f, "  <zone id=\"rkv\" routing=\"Full\">\n");
    for (uint32_t s = 0; s < units; s++) {
        uint32_t m0 = s * unit, m1 = m0 + unit < sc->machines ? m0 + unit : sc->machines;
        fprintf(f, "  <zone id=\"u%u\" routing=\"Full\">\n", s);
        for (uint32_t a = m0; a < m1; a++)
            fprintf(f, "    <host id=\"m%u\" speed=\"1Gf\" core=\"%u\"/>\n", a, p->cores);
        for (uint32_t r = 0; r < p->rails; r++)
            fprintf(f, "    <router id=\"u%u_%u\"/>\n", s, r);
        for (uint32_t a = m0; a < m1; a++)
            for (uint32_t r = 0; r < p->rails; r++)
                plat_link(f, "n", a, r, p->gbps, p->lat_us / 2);
        fprintf(f,
                "    <link id=\"u%u_lo\" bandwidth=\"%.6fGbps\" latency=\"%.6fus\" "
                "sharing_policy=\"FATPIPE\"/>\n",
                s, p->gbps, p->lat_us);
        for (uint32_t a = m0; a < m1; a++) {
            fprintf(f,
                    "    <route src=\"m%u\" dst=\"m%u\" symmetrical=\"NO\"><link_ctn "
                    "id=\"u%u_lo\"/></route>\n",
                    a, a, s);
            for (uint32_t b = m0; b < m1; b++)
                if (b != a)
                    fprintf(f,
                            "    <route src=\"m%u\" dst=\"m%u\" symmetrical=\"NO\">"
                            "<link_ctn id=\"n%u_%u\" direction=\"UP\"/>"
                            "<link_ctn id=\"n%u_%u\" direction=\"DOWN\"/></route>\n",
                            a, b, a, (a + b) % p->rails, b, (a + b) % p->rails);
            for (uint32_t r = 0; r < p->rails; r++)
                fprintf(f,
                        "    <route src=\"m%u\" dst=\"u%u_%u\" symmetrical=\"NO\"><link_ctn "
                        "id=\"n%u_%u\" direction=\"UP\"/></route>\n"
                        "    <route src=\"u%u_%u\" dst=\"m%u\" symmetrical=\"NO\"><link_ctn "
                        "id=\"n%u_%u\" direction=\"DOWN\"/></route>\n",
                        a, s, r, a, r, s, r, a, a, r);
        }
        fprintf(f, "  </zone>\n");
    }
    for (uint32_t s = 0; s < units; s++)
        for (uint32_t r = 0; r < p->rails; r++)
            plat_link(f, "s", s, r, up_gbps, p->uplink_lat_us);
    for (uint32_t s = 0; s < units; s++)
        for (uint32_t t = 0; t < units; t++) {
            if (s == t)
                continue;
            uint32_t r = (s + t) % p->rails;
            char a[32], b[32], ga[32], gb[32], la[32], lb[32];
            snprintf(a, sizeof(a), "u%u", s);
            snprintf(b, sizeof(b), "u%u", t);
            snprintf(ga, sizeof(ga), "u%u_%u", s, r);
            snprintf(gb, sizeof(gb), "u%u_%u", t, r);
            snprintf(la, sizeof(la), "s%u_%u", s, r);
            snprintf(lb, sizeof(lb), "s%u_%u", t, r);
            plat_zone_route(f, a, b, ga, gb, la, lb);
        }
    fprintf(f, "  </zone>\n");
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
    else if (!strcmp(p.topology, "fattree3"))
        plat_fattree3(f, sc, &p);
    else if (!strcmp(p.topology, "rail"))
        plat_rail(f, sc, &p);
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
