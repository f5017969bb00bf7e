/* Mid-size messages over every link of their route (route_fifo.h). C++ for
 * the route's links: SimGrid 3.32's C API gives a route's latency and
 * bottleneck bandwidth, not its links. */
#include "sim/backend/route_fifo.h"

#include <new>
#include <unordered_map>
#include <vector>

#include <simgrid/s4u/Host.hpp>
#include <simgrid/s4u/Link.hpp>

namespace
{

struct Hop {
    double free_at; /* when the link has sent the last message given it */
    double bw;      /* bytes per second */
    double lat;     /* seconds */
    bool queues;    /* shared (a FATPIPE link gives each message its bandwidth) */
};

} // namespace

/* Routes kept at most: a pair of machines is a map entry and a vector of
 * a few hops, ~100 bytes, and a cluster of 16,384 machines whose workers
 * reach every server could name 268 million pairs. Past this the cache is
 * emptied and routes are looked up again as they come (hops, one per link,
 * are kept). */
#define ROUTE_FIFO_MAX_ROUTES (1u << 20)

struct sim_route_fifo {
    std::unordered_map<const simgrid::s4u::Link *, uint32_t> hop_of;
    std::vector<Hop> hops;
    /* (src machine << 32 | dst machine) -> its route's hops, in order */
    std::unordered_map<uint64_t, std::vector<uint32_t>> routes;
};

struct sim_route_fifo *sim_route_fifo_new(void)
{
    return new (std::nothrow) sim_route_fifo();
}

void sim_route_fifo_free(struct sim_route_fifo *f)
{
    delete f;
}

static const std::vector<uint32_t> &route_of(sim_route_fifo *f, sg_host_t src, sg_host_t dst,
                                             uint64_t key)
{
    auto it = f->routes.find(key);
    if (it != f->routes.end())
        return it->second;
    if (f->routes.size() >= ROUTE_FIFO_MAX_ROUTES)
        f->routes.clear();
    std::vector<simgrid::s4u::Link *> links;
    double lat = 0;
    src->route_to(dst, links, &lat);
    std::vector<uint32_t> r;
    r.reserve(links.size());
    for (const simgrid::s4u::Link *l : links) {
        auto h = f->hop_of.find(l);
        uint32_t i;
        if (h == f->hop_of.end()) {
            i = (uint32_t)f->hops.size();
            f->hops.push_back(
                Hop{0, l->get_bandwidth(), l->get_latency(),
                    l->get_sharing_policy() != simgrid::s4u::Link::SharingPolicy::FATPIPE});
            f->hop_of.emplace(l, i);
        } else {
            i = h->second;
        }
        r.push_back(i);
    }
    return f->routes.emplace(key, std::move(r)).first->second;
}

double sim_route_fifo_due(struct sim_route_fifo *f, sg_host_t src, sg_host_t dst, uint32_t src_m,
                          uint32_t dst_m, double now, double bytes)
{
    try {
        const std::vector<uint32_t> &r = route_of(f, src, dst, (uint64_t)src_m << 32 | dst_m);
        /* head: when the message's first byte enters the link; tail: when
         * its last byte left the link before (so it leaves this one no
         * sooner plus that link's latency). */
        double head = now, tail = now, prev_lat = 0;
        for (size_t k = 0; k < r.size(); k++) {
            Hop &h = f->hops[r[k]];
            if (k > 0)
                head += prev_lat;
            if (h.queues && head < h.free_at)
                head = h.free_at;
            double s = h.bw > 0 ? bytes / h.bw : 0;
            double end = head + s;
            if (k > 0 && end < tail + prev_lat)
                end = tail + prev_lat;
            if (h.queues)
                h.free_at = end;
            tail = end;
            prev_lat = h.lat;
        }
        return tail + prev_lat;
    } catch (const std::bad_alloc &) {
        return -1;
    }
}
