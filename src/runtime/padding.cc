// plan_padding (kiln/runtime/padding.h): whether a graph's rows along its varying dim are independent, op by op,
// and the scratch of the inputs and outputs that carry it.
#include "kiln/runtime/padding.h"

#include <algorithm>
#include <functional>

#include "kiln/validate/host_tensor.h"

namespace kiln {

std::string PaddingLayout::text() const {
  std::string s;
  for (const PaddedTensor& t : tensors)
    s += (s.empty() ? "" : ", ") + t.name + " " + std::to_string(t.real_bytes) + " of " +
         std::to_string(t.padded_bytes) + " bytes";
  return s.empty() ? "nothing padded" : s;
}

namespace {

Status refuse(const std::string& why) { return not_supported("no padded plan: " + why); }

std::string dim_text(int d) { return "dim " + std::to_string(d); }

// The rule of one node: each operand's varying dim (-1: none) must be where the op keeps rows independent.
// `g` is the graph at the request, `big` at the plan's shape.
Status check_node(const Graph& g, const Graph& big, const Node& n, const std::vector<int>& vary) {
  const std::string where = "node '" + n.name + "' (" + op_kind_name(n.op) + ")";
  auto v = [&](int t) { return vary[static_cast<size_t>(t)]; };
  auto rank = [&](int t) { return static_cast<int>(g.tensors[static_cast<size_t>(t)].dims.size()); };
  auto name = [&](int t) { return "'" + g.tensors[static_cast<size_t>(t)].name + "'"; };
  auto extent = [](const Graph& gr, int t, int d) {
    return gr.tensors[static_cast<size_t>(t)].dims[static_cast<size_t>(d)].value;
  };
  // Right-aligned (broadcast) consistency of inputs with the output: an input's varying dim must be the
  // output's, with the output's extent at both shapes (an input that broadcasts there at one shape and not
  // at the other, extent 1 against n, computes something else), and a varying output needs a varying input.
  auto aligned = [&](const std::vector<int>& ins, int out) -> Status {
    bool any = false;
    for (int in : ins) {
      if (v(in) < 0) continue;
      any = true;
      const int at = v(in) + (rank(out) - rank(in));
      if (at != v(out))
        return refuse(where + ": input " + name(in) + " varies in its " + dim_text(v(in)) + " (" + dim_text(at) +
                      " of the output) but output " + name(out) +
                      (v(out) < 0 ? std::string(" does not") : " in " + dim_text(v(out))));
      for (const Graph* gr : {&g, &big})
        if (extent(*gr, in, v(in)) != extent(*gr, out, at))
          return refuse(where + ": input " + name(in) + " broadcasts in its varying " + dim_text(v(in)) + " (extent " +
                        std::to_string(extent(*gr, in, v(in))) + " against the output's " +
                        std::to_string(extent(*gr, out, at)) + " at " +
                        (gr == &g ? "the request" : "the plan's shape") + "), so the padded rows would not be its own");
    }
    if (v(out) >= 0 && !any) return refuse(where + ": output " + name(out) + " varies but none of its inputs does");
    return Status::ok();
  };
  switch (n.op) {
    case OpKind::kPointwise: return aligned(n.inputs, n.outputs[0]);
    case OpKind::kMatmul: {
      const int a = n.inputs[0], b = n.inputs[1], c = n.outputs[0];
      if (v(a) == rank(a) - 1) return refuse(where + ": the contracted dim K of " + name(a) + " varies");
      if (v(b) >= rank(b) - 2)
        return refuse(where + ": " + name(b) + " varies in " + (v(b) == rank(b) - 2 ? "K" : "N") +
                      " (only M and batch dims keep rows independent)");
      return aligned({a, b}, c);
    }
    case OpKind::kConvFprop:
    case OpKind::kConvDgrad: {
      const int x = n.inputs[0], w = n.inputs[1], y = n.outputs[0];
      if (v(w) >= 0) return refuse(where + ": the filter " + name(w) + " varies");
      if (v(x) > 1)
        return refuse(where + ": " + name(x) + " varies in spatial " + dim_text(v(x)) +
                      " (only the batch dim 0 keeps images independent; padding rows would enter the border windows)");
      if (v(x) == 1) return refuse(where + ": " + name(x) + " varies in its channels (dim 1), which the filter sums");
      if (v(x) != v(y))
        return refuse(where + ": " + name(y) + " varies in " + (v(y) < 0 ? std::string("no dim") : dim_text(v(y))) +
                      ", " + name(x) + " in " + (v(x) < 0 ? std::string("none") : dim_text(v(x))) +
                      " (only the batch dim 0 may vary, in both)");
      return Status::ok();
    }
    case OpKind::kConvWgrad:
      for (int t : n.inputs)
        if (v(t) >= 0) return refuse(where + ": the weight gradient sums over " + name(t) + "'s varying dim");
      return Status::ok();
    case OpKind::kReduction: {
      const int x = n.inputs[0], y = n.outputs[0];
      if (v(x) >= 0 && std::find(n.reduction.axes.begin(), n.reduction.axes.end(), v(x)) != n.reduction.axes.end())
        return refuse(where + ": it reduces over " + name(x) + "'s varying " + dim_text(v(x)));
      if (v(x) != v(y)) return refuse(where + ": " + name(x) + " and " + name(y) + " do not vary alike");
      return Status::ok();
    }
    case OpKind::kLayerNorm:
    case OpKind::kRmsNorm: {
      const int x = n.inputs[0];
      if (v(x) > 0) return refuse(where + ": " + name(x) + " varies in " + dim_text(v(x)) + ", a normalized axis");
      for (size_t i = 1; i < n.inputs.size(); ++i)
        if (v(n.inputs[i]) >= 0) return refuse(where + ": the parameter " + name(n.inputs[i]) + " varies");
      for (int y : n.outputs)
        if (v(y) != v(x)) return refuse(where + ": " + name(x) + " and " + name(y) + " do not vary alike");
      return Status::ok();
    }
    case OpKind::kSdpaFp8:  // amax_o is the max over every batch entry: a padded run's extra entries would join it
    case OpKind::kSdpaFp8Backward:
      return refuse(where + ": " + op_kind_name(n.op) +
                    "'s amax outputs span the whole batch, so a padded run's extra entries would enter them (not "
                    "served by the batch stopgaps)");
    case OpKind::kSdpa:
    case OpKind::kSdpaBackward: {
      const int q = n.inputs[0];
      if (n.sdpa.dropout > 0)  // the mask is drawn by position in the shape run: a part's entries are not the whole's
        return refuse(where + ": dropout is not served by the batch stopgaps (cuDNN draws the mask by position in "
                              "the shape it runs, so a padded or split run would drop other probabilities than the "
                              "exact shape's plan, which its backward pass must match)");
      if (n.sdpa.padding)  // the scratch's extra entries would carry whatever lengths it holds
        return refuse(where + ": a padding mask is not served by the batch stopgaps (a padded run's extra entries "
                              "would carry whatever lengths the scratch holds)");
      for (int t : n.inputs)
        if (v(t) > 0)
          return refuse(where + ": " + name(t) + " varies in " + dim_text(v(t)) + " (only the batch dim 0)");
      for (size_t i = 0; i < n.inputs.size(); ++i) {
        const int t = n.inputs[i];
        if (static_cast<int>(i) == sdpa_inputs(n).bias && v(t) < 0) continue;  // a bias broadcast over the batch
        if (v(t) != v(q)) return refuse(where + ": q, k, v (a bias of each batch, the lengths) do not vary alike");
      }
      for (int o : n.outputs)
        if (v(o) != v(q)) return refuse(where + ": " + name(q) + " and " + name(o) + " do not vary alike");
      return Status::ok();
    }
  }
  return refuse(where + ": no rule for this op");
}

}  // namespace

StatusOr<PaddingLayout> plan_padding(const Graph& real, const Graph& larger) {
  if (real.tensors.size() != larger.tensors.size() || real.nodes.size() != larger.nodes.size())
    return invalid_argument("plan_padding: graphs '" + real.name + "' and '" + larger.name +
                            "' are not one graph at two shapes");
  std::vector<int> vary(real.tensors.size(), -1);
  for (size_t i = 0; i < real.tensors.size(); ++i) {
    const TensorDesc& a = real.tensors[i];
    const TensorDesc& b = larger.tensors[i];
    if (a.name != b.name || a.dims.size() != b.dims.size())
      return invalid_argument("plan_padding: tensor '" + a.name + "' differs in name or rank between the shapes");
    for (size_t k = 0; k < a.dims.size(); ++k) {
      if (a.dims[k].value == b.dims[k].value) continue;
      if (a.dims[k].value > b.dims[k].value)
        return refuse("tensor '" + a.name + "' " + dim_text(static_cast<int>(k)) + " is " +
                      std::to_string(a.dims[k].value) + ", larger than the plan's " + std::to_string(b.dims[k].value));
      if (vary[i] >= 0)
        return refuse("tensor '" + a.name + "' varies in two dims (" + dim_text(vary[i]) + ": " +
                      std::to_string(a.dims[static_cast<size_t>(vary[i])].value) + " against " +
                      std::to_string(b.dims[static_cast<size_t>(vary[i])].value) + ", " +
                      dim_text(static_cast<int>(k)) + ": " + std::to_string(a.dims[k].value) + " against " +
                      std::to_string(b.dims[k].value) + "), so its rows are not a prefix");
      vary[i] = static_cast<int>(k);
    }
  }
  for (const Node& n : real.nodes) KILN_RETURN_IF_ERROR(check_node(real, larger, n, vary));

  PaddingLayout layout;
  const GraphRoles roles(real);
  std::vector<PaddedTensor> ins, outs;
  for (size_t i = 0; i < real.tensors.size(); ++i) {
    const int t = static_cast<int>(i);
    const int d = vary[i];
    if (d < 0 || real.tensors[i].by_value || roles.is_virtual(t)) continue;
    const TensorDesc& a = real.tensors[i];
    const TensorDesc& b = larger.tensors[i];
    // Explicit strides may leave gaps, which a copy of the span would fill with scratch (and reshape_graph
    // never gives a dynamic tensor explicit strides).
    if (a.layout == Layout::kExplicit || b.layout == Layout::kExplicit)
      return refuse("tensor '" + a.name + "' has explicit strides");
    // The varying dim outermost: the same strides elsewhere, and its stride past the other dims' span
    // (the sum of their reaches: the element the farthest from the start within one row).
    int64_t inner_span = 1;
    for (size_t k = 0; k < a.dims.size(); ++k) {
      if (static_cast<int>(k) == d || b.dims[k].value == 1) continue;
      if (a.strides[k] != b.strides[k])
        return refuse("tensor '" + a.name + "': the stride of " + dim_text(static_cast<int>(k)) +
                      " changes with the shape (its varying dim is not outermost)");
      inner_span += (b.dims[k].value - 1) * b.strides[k];  // validated footprints: no overflow
    }
    if (a.strides[static_cast<size_t>(d)] != b.strides[static_cast<size_t>(d)] ||
        a.strides[static_cast<size_t>(d)] < inner_span)
      return refuse("tensor '" + a.name + "': its varying " + dim_text(d) +
                    " is not its outermost dim, so its rows are not a prefix of the larger tensor's bytes");
    PaddedTensor p;
    p.tensor = t;
    p.name = a.name;
    p.output = roles.is_graph_output(t);
    KILN_ASSIGN_OR_RETURN(int64_t rb, HostTensor::checked_byte_size(roles.dtype_of(t), a.shape(), a.strides));
    KILN_ASSIGN_OR_RETURN(int64_t pb, HostTensor::checked_byte_size(roles.dtype_of(t), b.shape(), b.strides));
    p.real_bytes = static_cast<size_t>(rb);
    p.padded_bytes = static_cast<size_t>(pb);
    (p.output ? outs : ins).push_back(std::move(p));
  }
  if (ins.empty() && outs.empty()) return refuse("no input or output varies");
  for (auto* list : {&ins, &outs})
    for (PaddedTensor& p : *list) {
      p.scratch_offset = layout.scratch_bytes;
      size_t padded = 0, next = 0;
      if (__builtin_add_overflow(p.padded_bytes, kPaddingAlignment - 1, &padded) ||
          __builtin_add_overflow(layout.scratch_bytes, padded / kPaddingAlignment * kPaddingAlignment, &next) ||
          next > (size_t{1} << 62))
        return refuse("the scratch for tensor '" + p.name + "' would pass 2^62 bytes");
      layout.scratch_bytes = next;
      layout.tensors.push_back(std::move(p));
    }
  return layout;
}

std::vector<int64_t> split_extents(int64_t n, std::vector<int64_t> available, int max_parts) {
  std::sort(available.begin(), available.end(), std::greater<int64_t>());
  std::vector<int64_t> parts;
  int64_t left = n;
  for (int64_t v : available) {
    if (v < 1) continue;
    while (v <= left && static_cast<int>(parts.size()) < max_parts) {
      parts.push_back(v);
      left -= v;
    }
  }
  if (left != 0) parts.clear();
  return parts;
}

std::vector<int64_t> cover_extents(int64_t n, std::vector<int64_t> available, int max_parts) {
  // The extents that can be a part (at most n rows), largest first, each once.
  std::vector<int64_t> ext;
  for (int64_t v : available)
    if (v >= 1 && v <= n) ext.push_back(v);
  std::sort(ext.begin(), ext.end(), std::greater<int64_t>());
  ext.erase(std::unique(ext.begin(), ext.end()), ext.end());
  if (ext.empty() || max_parts < 1) return {};
  // The fewest parts: every part the largest extent reaches n in this many, and fewer never do.
  const int64_t parts_needed = (n + ext[0] - 1) / ext[0];
  if (parts_needed > max_parts) return {};
  const size_t k = static_cast<size_t>(parts_needed);
  // A first answer: the largest extent for every part but the last, the smallest that reaches n for the last.
  std::vector<int64_t> best(k - 1, ext[0]);
  const int64_t rest = n - static_cast<int64_t>(k - 1) * ext[0];  // in (0, ext[0]]
  int64_t last = ext[0];
  for (int64_t v : ext)
    if (v >= rest) last = v;  // ext is descending: the last one that reaches is the smallest
  best.push_back(last);
  int64_t best_sum = static_cast<int64_t>(k - 1) * ext[0] + last;
  // Then the multiset of k extents (in descending order) with the least sum that reaches n: the fewest rows
  // computed twice, for any set of tuned extents (13 with 7 and 10 tuned is 7 + 7, not 10 + 7). Depth-first with
  // bounds, and at most kMaxVisits steps (k is at most 64, the extents a structure's tuned shapes, so this is
  // seldom reached; past it the best found so far stands).
  constexpr int kMaxVisits = 20000;
  int visits = 0;
  std::vector<int64_t> cur;
  cur.reserve(k);
  std::function<void(size_t, int64_t)> search = [&](size_t from, int64_t sum) {
    if (++visits > kMaxVisits) return;
    const size_t left = k - cur.size();
    if (left == 0) {
      if (sum >= n && sum < best_sum) {
        best_sum = sum;
        best = cur;
      }
      return;
    }
    for (size_t i = from; i < ext.size(); ++i) {
      // ext[i] for every part left is the most this branch reaches: smaller extents reach even less.
      if (sum + static_cast<int64_t>(left) * ext[i] < n) break;
      // ext[i] here and the smallest extent for the parts after it is the least it adds.
      if (sum + ext[i] + static_cast<int64_t>(left - 1) * ext.back() >= best_sum) continue;
      cur.push_back(ext[i]);
      search(i, sum + ext[i]);
      cur.pop_back();
    }
  };
  search(0, 0);
  return best;
}

StatusOr<std::vector<SplitTensor>> split_rows(const Graph& real, const Graph& part) {
  StatusOr<PaddingLayout> pl = plan_padding(part, real);
  if (!pl.is_ok()) {
    std::string m = pl.status().message();
    const std::string prefix = "no padded plan: ";
    if (m.rfind(prefix, 0) == 0) m = m.substr(prefix.size());
    return Status(pl.status().code(), "no split plan: " + m);
  }
  const PaddingLayout& layout = *pl;
  const GraphRoles roles(real);
  std::vector<SplitTensor> out;
  for (const PaddedTensor& p : layout.tensors) {
    const TensorDesc& a = real.tensors[static_cast<size_t>(p.tensor)];
    const TensorDesc& b = part.tensors[static_cast<size_t>(p.tensor)];
    for (size_t k = 0; k < a.dims.size(); ++k) {
      if (a.dims[k].value == b.dims[k].value) continue;
      SplitTensor st;
      st.tensor = p.tensor;
      st.name = p.name;
      st.row_bytes = static_cast<size_t>(a.strides[k]) * dtype_size(roles.dtype_of(p.tensor));
      out.push_back(std::move(st));
      break;  // plan_padding allows one varying dim
    }
  }
  return out;
}

}  // namespace kiln
