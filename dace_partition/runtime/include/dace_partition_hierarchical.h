// Hierarchy-aware reduction of partial results (P^2 programs, dace_partition/solvers/hierarchical.py).
//
// The solver synthesizes and chooses the program at lowering time and emits it as a table of ints:
//   nsteps, nranks, then per step: collective, then per grid rank: colour (-1: not in a group this
//   step), position in the group, npack, pack chunks..., nunpack, unpack chunks...
// The rank's block is cut into equal chunks (the solver checks divisibility); a step packs the chunks
// it sends into a scratch buffer, runs one collective on the group's sub-communicator and unpacks
// what it received. Sub-communicators come from MPI_Comm_split of the grid communicator, once per
// distinct group set (the runtime's split_comm: shared by every call site with the same groups), and are
// freed at exit.
//
// At the first call the hierarchy the program was lowered for is checked: against
// DACE_PARTITION_HIERARCHY if it is set at run time (a mismatch stops every rank), else against the nodes
// MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) finds on the grid (a mismatch prints one warning on grid
// rank 0 and runs on: the result is the same, only the grouping may be slower).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "dace_partition_runtime.h"

namespace {
namespace dace_partition {
namespace hier {

enum Collective { H_ALLREDUCE = 1, H_REDUCE_SCATTER = 2, H_ALLGATHER = 3, H_REDUCE = 4, H_BCAST = 5 };

// One rank's view of one step, read from the table.
struct Step {
    int coll = 0, colour = -1, pos = 0;
    std::vector<int> pack, unpack;
    MPI_Comm c = MPI_COMM_NULL;
};

// A call site (its table, static in the emitted code) and this rank's steps, with their communicators
// bound (those belong to the runtime's cache of split communicators, which frees them).
struct HierSite {
    std::vector<Step> steps;
    std::vector<long long> probe;
    bool built = false;
    void release() { steps.clear(); }
};

inline std::string normalized(const char *s) {
    std::string out;
    for (; s && *s; ++s)
        if (*s != ' ' && *s != '\t') out += (char)((*s == '*' || *s == 'X') ? 'x' : *s);
    return out;
}

// The nodes of the grid's ranks as shared memory sees them: `regular` when every node holds the same
// number of grid ranks and each node's ranks are consecutive (node-major, as the program's groups assume),
// and a description. `nodes` is exact on grid rank 0 (the one that prints). Only communicator creation (set-up calls: no
// traffic the PMPI byte counter sees, so the report's bytes stay exact); every communicator and group is
// freed before returning. Collective over the grid.
struct Nodes {
    bool regular = false;  // equal sizes, node-major
    int nodes = 0, per = 0;
    std::string text;
};

inline Nodes detect_nodes(MPI_Comm cart) {
    int me = 0, size = 0;
    MPI_Comm_rank(cart, &me);
    MPI_Comm_size(cart, &size);
    MPI_Comm node = MPI_COMM_NULL;
    check(MPI_Comm_split_type(cart, MPI_COMM_TYPE_SHARED, me, MPI_INFO_NULL, &node), "MPI_Comm_split_type");
    int local = 0, per = 0;
    MPI_Comm_rank(node, &local);
    MPI_Comm_size(node, &per);
    // the grid ranks of this node, in grid-rank order (the key above): consecutive or not
    MPI_Group ng = MPI_GROUP_NULL, cg = MPI_GROUP_NULL;
    MPI_Comm_group(node, &ng);
    MPI_Comm_group(cart, &cg);
    std::vector<int> in(per), out(per);
    std::iota(in.begin(), in.end(), 0);
    check(MPI_Group_translate_ranks(ng, per, in.data(), cg, out.data()), "MPI_Group_translate_ranks");
    MPI_Group_free(&ng);
    MPI_Group_free(&cg);
    MPI_Comm_free(&node);
    int consecutive = out.back() - out.front() == per - 1 ? 1 : 0;
    // one rank per node (the node's first): their communicator's size is the number of nodes
    MPI_Comm leaders = MPI_COMM_NULL;
    check(MPI_Comm_split(cart, local == 0 ? 0 : MPI_UNDEFINED, me, &leaders), "MPI_Comm_split");
    Nodes n;
    n.per = per;
    if (leaders != MPI_COMM_NULL) {
        MPI_Comm_size(leaders, &n.nodes);
        MPI_Comm_free(&leaders);
    }
    // the ranks whose node has this rank's size and layout: all of them iff the nodes are alike
    MPI_Comm same = MPI_COMM_NULL;
    check(MPI_Comm_split(cart, 2 * per + consecutive, me, &same), "MPI_Comm_split");
    int nsame = 0;
    MPI_Comm_size(same, &nsame);
    MPI_Comm_free(&same);
    std::string ranks = std::to_string(size) + " grid ranks on " + std::to_string(n.nodes) + " node" +
                        (n.nodes == 1 ? "" : "s");
    if (nsame != size) {
        n.text = ranks + " of unequal sizes or layouts (rank 0's node has " + std::to_string(per) + ")";
    } else {
        n.regular = consecutive == 1;
        n.text = ranks + " of " + std::to_string(per) + (consecutive ? " ranks" : " ranks, not node-major");
    }
    return n;
}

// Run-time check of the hierarchy the program was lowered for (see the top of this file). Collective over
// the grid; the detection runs once per grid and hierarchy, the warning is printed once per message.
inline void check_hierarchy(int gid, const char *hierarchy) {
    const char *env = std::getenv("DACE_PARTITION_HIERARCHY");
    if (env && *env) {
        if (normalized(env) != normalized(hierarchy))
            fail("this program was lowered for DACE_PARTITION_HIERARCHY=%s but runs with DACE_PARTITION_HIERARCHY=%s; "
                 "lower it again",
                 hierarchy, env);
        return;
    }
    static std::set<std::pair<int, std::string>> checked;
    static std::set<std::string> warned;
    std::string h = normalized(hierarchy);
    if (!checked.insert(std::make_pair(gid, h)).second) return;
    Grid &g = grid(gid);
    Nodes n = detect_nodes(g.cart);
    // lowered: the outermost level's size is the number of nodes, the others multiply to ranks per node
    long long lnodes = std::atoll(h.c_str()), lper = 1;
    for (size_t at = h.find('x'); at != std::string::npos; at = h.find('x', at + 1))
        lper *= std::atoll(h.c_str() + at + 1);
    int me = 0;
    MPI_Comm_rank(g.cart, &me);
    if (me != 0 || (n.regular && n.nodes == lnodes && n.per == lper)) return;
    std::string msg = "dace_partition: warning: the reductions of this program were lowered for the hierarchy " + h +
                      " (" + std::to_string(lnodes) + (lnodes == 1 ? " node of " : " nodes of ") +
                      std::to_string(lper) + " ranks, node-major), but MPI_COMM_TYPE_SHARED finds " + n.text +
                      "; the results do not change, the grouping may be slower" +
                      (n.regular ? "; lower again with DACE_PARTITION_HIERARCHY=" + std::to_string(n.nodes) + "x" +
                                       std::to_string(n.per)
                                 : std::string()) +
                      " (set DACE_PARTITION_HIERARCHY at run time to silence this check)";
    if (!warned.insert(msg).second) return;
    std::fprintf(stderr, "%s\n", msg.c_str());
    std::fflush(stderr);
}

// Parses the table and splits the sub-communicators (collective over the grid, first call only).
inline std::vector<Step> &bind(const int *table, int n, int gid, const char *hierarchy) {
    SiteKey site_key{std::type_index(typeid(HierSite)), std::type_index(typeid(void)), {gid, n, 0, 0},
                     MPI_DATATYPE_NULL, {(long long)(std::intptr_t)table}};  // the table's address: its call site
    bool fresh = false;
    HierSite &site = SiteCache<HierSite>::get(site_key, {}, fresh);
    if (!fresh) return site.steps;
    check_hierarchy(gid, hierarchy);
    Grid &g = grid(gid);
    int me = 0;
    MPI_Comm_rank(g.cart, &me);
    int at = 0;
    auto next = [&]() {
        if (at >= n) fail("hierarchical reduction table of %d ints is truncated", n);
        return table[at++];
    };
    int nsteps = next(), nranks = next();
    int gsize = 0;
    MPI_Comm_size(g.cart, &gsize);
    if (gsize != nranks) fail("hierarchical reduction planned for %d grid ranks, the grid has %d", nranks, gsize);
    std::vector<Step> steps(nsteps);
    for (int s = 0; s < nsteps; ++s) {
        int coll = next();
        std::vector<int> key;
        for (int r = 0; r < nranks; ++r) {
            Step st;
            st.coll = coll;
            st.colour = next();
            st.pos = next();
            for (int i = 0, np = next(); i < np; ++i) st.pack.push_back(next());
            for (int i = 0, nu = next(); i < nu; ++i) st.unpack.push_back(next());
            key.push_back(st.colour);
            key.push_back(st.pos);
            if (r == me) steps[s] = st;
        }
        int colour = steps[s].colour < 0 ? MPI_UNDEFINED : steps[s].colour;
        steps[s].c = split_comm(g.cart, std::move(key), colour, steps[s].pos);
    }
    site.steps = std::move(steps);
    return site.steps;
}

template <typename T>
void pack(const T *buf, const std::vector<int> &chunks, long long chunk, T *to) {
    for (size_t i = 0; i < chunks.size(); ++i) std::memcpy(to + i * chunk, buf + chunks[i] * chunk, chunk * sizeof(T));
}
template <typename T>
void unpack(T *buf, const std::vector<int> &chunks, long long chunk, const T *from) {
    for (size_t i = 0; i < chunks.size(); ++i)
        std::memcpy(buf + chunks[i] * chunk, from + i * chunk, chunk * sizeof(T));
}

// `out` = the combination over this rank's replica group of every rank's `in` (count elements, cut
// into chunks of `chunk` elements). Counts fit an int: the solver refuses larger blocks.
template <typename T>
void allreduce(const char *array, int gid, const int *table, int n, const char *hierarchy, long long chunk,
               const T *in, T *out, long long count, int op) {
    Grid &g = grid(gid);
    if (!g.member) return;
    std::vector<Step> &steps = bind(table, n, gid, hierarchy);
    if (in != out) std::memcpy(out, in, count * sizeof(T));
    MPI_Datatype t = mpi_type(out);
    MPI_Op o = mpi_op(op);
    std::vector<T> a, b;
    for (const Step &st : steps) {
        if (st.colour < 0) continue;
        int np = (int)(st.pack.size() * chunk), nu = (int)(st.unpack.size() * chunk);
        a.resize(np);
        b.resize(nu);
        pack(out, st.pack, chunk, a.data());
        switch (st.coll) {
            case H_ALLREDUCE:
                check(MPI_Allreduce(MPI_IN_PLACE, a.data(), np, t, o, st.c), "MPI_Allreduce");
                unpack(out, st.unpack, chunk, a.data());
                break;
            case H_REDUCE:
                if (st.pos == 0)
                    check(MPI_Reduce(MPI_IN_PLACE, a.data(), np, t, o, 0, st.c), "MPI_Reduce");
                else
                    check(MPI_Reduce(a.data(), nullptr, np, t, o, 0, st.c), "MPI_Reduce");
                unpack(out, st.unpack, chunk, a.data());
                break;
            case H_REDUCE_SCATTER:
                check(MPI_Reduce_scatter_block(a.data(), b.data(), nu, t, o, st.c), "MPI_Reduce_scatter_block");
                unpack(out, st.unpack, chunk, b.data());
                break;
            case H_ALLGATHER:
                check(MPI_Allgather(a.data(), np, t, b.data(), np, t, st.c), "MPI_Allgather");
                unpack(out, st.unpack, chunk, b.data());
                break;
            case H_BCAST:
                if (st.pos == 0) {
                    check(MPI_Bcast(a.data(), np, t, 0, st.c), "MPI_Bcast");
                } else {
                    check(MPI_Bcast(b.data(), nu, t, 0, st.c), "MPI_Bcast");
                    unpack(out, st.unpack, chunk, b.data());
                }
                break;
            default:
                fail("%s: unknown collective %d in a hierarchical reduction table", array, st.coll);
        }
    }
}

}  // namespace hier
}  // namespace dace_partition
}  // namespace
