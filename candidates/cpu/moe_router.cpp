// CPU candidates of moe_router (reference/moe_router.h), both in f32 as the GLM router runs:
//   moe_router_cpu_naive_f32     the policy's naive: plain loops. s = 1 / (1 + exp(-z)), sel = s + b;
//                                a group's score is its largest sel plus its second largest (two
//                                argmax passes); the groups and then the k experts by repeated argmax
//                                (a strictly larger score replaces, so the lower index wins ties);
//                                slots in rank order; renorm sums the weights in slot order
//   moe_router_cpu_grouped_f32   the form of vLLM's grouped_topk (noaux_tc): the biased scores of a
//                                token, each group's top-2 sum, the kept groups as a mask that sets the
//                                other experts' scores to -inf, then one top-k over the masked row
//                                (partial sorts with the key (score desc, index asc), the tie rule);
//                                the k slots come out in increasing expert id, as an unsorted top-k
//                                may leave them, and renorm sums them in that order
// Both read the logits as f32 (exact for f32 and bf16 storage) and the f32 bias, and write the ids
// (the harness allocates them in i32) and the weights w = s / (sum + 1e-20f) * f32(rsf) (renorm), else s * f32(rsf).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "candidates/cpu/op_io.h"
#include "harness/cases/registry.h"
#include "harness/ops/moe_router.h"

namespace dg {
namespace {

float sigmoid(float z) { return 1.0f / (1.0f + std::exp(-z)); }

// The index of the largest score among those allowed and not taken (lower index on ties).
int64_t argmax(const std::vector<float>& v, const std::vector<char>& allowed) {
  int64_t best = -1;
  for (int64_t i = 0; i < static_cast<int64_t>(v.size()); ++i)
    if (allowed[static_cast<size_t>(i)] && (best < 0 || v[static_cast<size_t>(i)] > v[static_cast<size_t>(best)])) best = i;
  return best;
}

// Naive: one token's ids in rank order.
std::vector<int64_t> route_naive(const MoeRouterParams& p, const std::vector<float>& sel) {
  const int64_t G = p.E / p.n_group;
  std::vector<char> allowed(sel.size(), 1);
  if (p.n_group > 1) {
    std::vector<float> gscore(static_cast<size_t>(p.n_group));
    for (int64_t g = 0; g < p.n_group; ++g) {   // the largest, then the largest of the others
      const int64_t lo = g * G, hi = lo + G;
      int64_t a = lo;
      for (int64_t e = lo + 1; e < hi; ++e)
        if (sel[static_cast<size_t>(e)] > sel[static_cast<size_t>(a)]) a = e;
      int64_t b = a == lo ? lo + 1 : lo;
      for (int64_t e = b + 1; e < hi; ++e)
        if (e != a && sel[static_cast<size_t>(e)] > sel[static_cast<size_t>(b)]) b = e;
      gscore[static_cast<size_t>(g)] = sel[static_cast<size_t>(a)] + sel[static_cast<size_t>(b)];
    }
    std::vector<char> gopen(gscore.size(), 1);
    allowed.assign(sel.size(), 0);
    for (int64_t j = 0; j < p.topk_group; ++j) {
      const int64_t g = argmax(gscore, gopen);
      gopen[static_cast<size_t>(g)] = 0;
      for (int64_t e = g * G; e < (g + 1) * G; ++e) allowed[static_cast<size_t>(e)] = 1;
    }
  }
  std::vector<int64_t> ids;
  for (int64_t j = 0; j < p.k; ++j) {
    const int64_t e = argmax(sel, allowed);
    allowed[static_cast<size_t>(e)] = 0;
    ids.push_back(e);
  }
  return ids;
}

// grouped_topk: top-2 sums, a -inf mask of the dropped groups, one partial sort; ids by increasing id.
std::vector<int64_t> route_grouped(const MoeRouterParams& p, std::vector<float> sel) {
  const int64_t G = p.E / p.n_group;
  auto by_score = [](const std::vector<float>& v) {
    return [&v](int64_t a, int64_t b) {
      const float x = v[static_cast<size_t>(a)], y = v[static_cast<size_t>(b)];
      return x > y || (x == y && a < b);
    };
  };
  if (p.n_group > 1) {
    std::vector<float> gscore(static_cast<size_t>(p.n_group));
    std::vector<int64_t> in(static_cast<size_t>(G));
    for (int64_t g = 0; g < p.n_group; ++g) {
      std::iota(in.begin(), in.end(), g * G);
      std::partial_sort(in.begin(), in.begin() + 2, in.end(), by_score(sel));
      gscore[static_cast<size_t>(g)] = sel[static_cast<size_t>(in[0])] + sel[static_cast<size_t>(in[1])];
    }
    std::vector<int64_t> groups(static_cast<size_t>(p.n_group));
    std::iota(groups.begin(), groups.end(), 0);
    std::partial_sort(groups.begin(), groups.begin() + p.topk_group, groups.end(), by_score(gscore));
    std::vector<char> keep(static_cast<size_t>(p.n_group), 0);
    for (int64_t j = 0; j < p.topk_group; ++j) keep[static_cast<size_t>(groups[static_cast<size_t>(j)])] = 1;
    for (int64_t e = 0; e < p.E; ++e)
      if (!keep[static_cast<size_t>(e / G)]) sel[static_cast<size_t>(e)] = -INFINITY;
  }
  std::vector<int64_t> idx(static_cast<size_t>(p.E));
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + p.k, idx.end(), by_score(sel));
  idx.resize(static_cast<size_t>(p.k));
  std::sort(idx.begin(), idx.end());
  return idx;
}

RunFn make(bool grouped) {
  return [grouped](const Case& c, const TensorMap& in, TensorMap& out) {
    const MoeRouterParams p = moe_router_params(c);
    const std::string op = c.op();
    std::vector<float> z(static_cast<size_t>(p.E)), b(z.size()), s(z.size()), sel(z.size()), w(static_cast<size_t>(p.k));
    load_row(need(in, "bias", op), 0, p.E, b.data());
    Tensor& ids_t = need_out(out, "topk_ids", p.T * p.k, op);
    Tensor& w_t = need_out(out, "topk_weights", p.T * p.k, op);
    const float rsf = static_cast<float>(p.rsf);
    for (int64_t t = 0; t < p.T; ++t) {
      load_row(need(in, "logits", op), t * p.E, p.E, z.data());
      for (size_t e = 0; e < z.size(); ++e) {
        s[e] = sigmoid(z[e]);
        sel[e] = s[e] + b[e];
      }
      const std::vector<int64_t> ids = grouped ? route_grouped(p, sel) : route_naive(p, sel);
      float sum = 0.0f;
      for (int64_t j = 0; j < p.k; ++j) sum += s[static_cast<size_t>(ids[static_cast<size_t>(j)])];
      for (int64_t j = 0; j < p.k; ++j) {
        float v = s[static_cast<size_t>(ids[static_cast<size_t>(j)])];
        if (p.renorm) v = v / (sum + 1e-20f);
        w[static_cast<size_t>(j)] = v * rsf;
        ids_t.set(t * p.k + j, static_cast<double>(ids[static_cast<size_t>(j)]));
      }
      store_row(w_t, t * p.k, p.k, w.data());
    }
  };
}

}  // namespace

DG_REGISTER_CANDIDATE(moe_router_cpu_naive_f32,
                      {"moe_router_cpu_naive_f32", "moe_router", "cpu", "naive", DType::f32, DType::f32, DType::f32,
                       "plain f32 loops: sigmoid, biased scores, top-2 group sums and top-k by repeated argmax (the policy's naive)"},
                      make(false));
DG_REGISTER_CANDIDATE(moe_router_cpu_grouped_f32,
                      {"moe_router_cpu_grouped_f32", "moe_router", "cpu", "grouped", DType::f32, DType::f32, DType::f32,
                       "vLLM grouped_topk's form in f32: top-2 group sums, a -inf mask, one partial top-k; slots by expert id"},
                      make(true));

}  // namespace dg
