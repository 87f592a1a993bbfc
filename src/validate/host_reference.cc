// The host reference: every op in double precision over packed row-major arrays, and optionally the
// magnitude pass of the accumulation bound (reference_math.h).
#include <cmath>
#include <limits>
#include <sstream>

#include "kiln/validate/reference.h"
#include "validate/reference_common.h"
#include "validate/reference_math.h"

namespace kiln {
namespace {

using namespace validate_internal;
using Values = std::vector<double>;

// Calls f(x_index, w_index, y_index) for every multiply-accumulate of a convolution (packed NCDHW
// x and y, KCDHW w). fprop, dgrad and wgrad are the same loop with a different accumulation target.
template <typename F>
void for_each_conv_mac(const ConvGeom& c, F&& f) {
  const int64_t cg = c.c / c.groups, kg = c.k / c.groups;
  for (int64_t n = 0; n < c.n; ++n)
    for (int64_t k = 0; k < c.k; ++k) {
      const int64_t grp = k / kg;
      for (int64_t o0 = 0; o0 < c.out[0]; ++o0)
        for (int64_t o1 = 0; o1 < c.out[1]; ++o1)
          for (int64_t o2 = 0; o2 < c.out[2]; ++o2) {
            const int64_t yi = (((n * c.k + k) * c.out[0] + o0) * c.out[1] + o1) * c.out[2] + o2;
            for (int64_t ci = 0; ci < cg; ++ci) {
              const int64_t ch = grp * cg + ci;
              for (int64_t f0 = 0; f0 < c.filt[0]; ++f0) {
                const int64_t i0 = o0 * c.stride[0] - c.pad[0] + f0 * c.dil[0];
                if (i0 < 0 || i0 >= c.in[0]) continue;
                for (int64_t f1 = 0; f1 < c.filt[1]; ++f1) {
                  const int64_t i1 = o1 * c.stride[1] - c.pad[1] + f1 * c.dil[1];
                  if (i1 < 0 || i1 >= c.in[1]) continue;
                  for (int64_t f2 = 0; f2 < c.filt[2]; ++f2) {
                    const int64_t i2 = o2 * c.stride[2] - c.pad[2] + f2 * c.dil[2];
                    if (i2 < 0 || i2 >= c.in[2]) continue;
                    const int64_t xi = (((n * c.c + ch) * c.in[0] + i0) * c.in[1] + i1) * c.in[2] + i2;
                    const int64_t wi = (((k * cg + ci) * c.filt[0] + f0) * c.filt[1] + f1) * c.filt[2] + f2;
                    f(xi, wi, yi);
                  }
                }
              }
            }
          }
    }
}

// Calls f(position, a_offset, b_offset) over `dims` in row-major order, with a and b read through
// broadcast strides (b may be empty).
template <typename F>
void for_each_broadcast(const std::vector<int64_t>& dims, const std::vector<int64_t>& sa,
                        const std::vector<int64_t>& sb, F&& f) {
  const int64_t total = product(dims);
  const size_t r = dims.size();
  std::vector<int64_t> idx(r, 0);
  int64_t oa = 0, ob = 0;
  const bool has_b = !sb.empty();
  for (int64_t pos = 0; pos < total; ++pos) {
    f(pos, oa, ob);
    for (size_t k = r; k-- > 0;) {
      if (++idx[k] < dims[k]) {
        oa += sa[k];
        if (has_b) ob += sb[k];
        break;
      }
      oa -= (dims[k] - 1) * sa[k];
      if (has_b) ob -= (dims[k] - 1) * sb[k];
      idx[k] = 0;
    }
  }
}

Values run_conv(const NodePlan& p, const Values& in0, const Values& in1) {
  const ConvGeom& c = p.conv;
  const int64_t cg = c.c / c.groups;
  switch (p.op) {
    case OpKind::kConvFprop: {
      Values y(static_cast<size_t>(c.n * c.k * c.out_size()), 0.0);
      for_each_conv_mac(c, [&](int64_t xi, int64_t wi, int64_t yi) { y[yi] += in0[xi] * in1[wi]; });
      return y;
    }
    case OpKind::kConvDgrad: {  // in0 = dy, in1 = w
      Values dx(static_cast<size_t>(c.n * c.c * c.in_size()), 0.0);
      for_each_conv_mac(c, [&](int64_t xi, int64_t wi, int64_t yi) { dx[xi] += in0[yi] * in1[wi]; });
      return dx;
    }
    default: {  // wgrad: in0 = x, in1 = dy
      Values dw(static_cast<size_t>(c.k * cg * c.filt_size()), 0.0);
      for_each_conv_mac(c, [&](int64_t xi, int64_t wi, int64_t yi) { dw[wi] += in0[xi] * in1[yi]; });
      return dw;
    }
  }
}

Values run_matmul(const MatmulGeom& m, const Values& a, const Values& b) {
  const int64_t batches = m.batch_count();
  Values c(static_cast<size_t>(batches * m.m * m.n), 0.0);
  std::vector<int64_t> idx(m.batch.size(), 0);
  for (int64_t bi = 0; bi < batches; ++bi) {
    int64_t ao = 0, bo = 0, rem = bi;
    for (size_t k = m.batch.size(); k-- > 0;) {
      const int64_t ik = rem % m.batch[k];
      rem /= m.batch[k];
      ao += ik * m.a_batch[k];
      bo += ik * m.b_batch[k];
    }
    double* cp = c.data() + bi * m.m * m.n;
    for (int64_t i = 0; i < m.m; ++i)
      for (int64_t kk = 0; kk < m.k; ++kk) {
        const double av = a[static_cast<size_t>(ao + i * m.k + kk)];
        const double* brow = b.data() + bo + kk * m.n;
        for (int64_t j = 0; j < m.n; ++j) cp[i * m.n + j] += av * brow[j];
      }
  }
  return c;
}

Values run_pointwise(const NodePlan& p, PointwiseMode mode, const Values& a, const Values* b) {
  const PointwiseGeom& g = p.pw;
  Values y(static_cast<size_t>(product(g.out_dims)));
  for_each_broadcast(g.out_dims, g.a_strides, g.b_strides, [&](int64_t pos, int64_t oa, int64_t ob) {
    y[pos] = pointwise_value(mode, a[oa], b ? (*b)[ob] : 0.0);
  });
  return y;
}

Values run_reduction(const ReduceGeom& r, ReductionMode mode, const Values& x) {
  std::vector<int64_t> out_dims = r.in_dims;
  for (size_t i = 0; i < out_dims.size(); ++i)
    if (r.reduced[i]) out_dims[i] = 1;
  std::vector<int64_t> so = row_major_strides(out_dims);
  for (size_t i = 0; i < so.size(); ++i)
    if (r.reduced[i]) so[i] = 0;
  double init = 0.0;
  if (mode == ReductionMode::kMax) init = -std::numeric_limits<double>::infinity();
  if (mode == ReductionMode::kMin) init = std::numeric_limits<double>::infinity();
  Values y(static_cast<size_t>(product(out_dims)), init);
  const std::vector<int64_t> none;
  for_each_broadcast(r.in_dims, so, none, [&](int64_t pos, int64_t oy, int64_t) {
    const double v = x[pos];
    double& acc = y[oy];
    switch (mode) {
      case ReductionMode::kSum: acc += v; break;
      case ReductionMode::kMax: acc = std::fmax(acc, v); break;
      case ReductionMode::kMin: acc = std::fmin(acc, v); break;
      case ReductionMode::kAmax: acc = std::fmax(acc, std::fabs(v)); break;
    }
  });
  return y;
}

struct NormStats {
  std::vector<double> mean, var, inv;  // per row; var is mean(x^2) for RMS norm
};

NormStats norm_stats(const NodePlan& p, double eps, const Values& x) {
  const NormGeom& n = p.norm;
  NormStats st;
  st.mean.assign(static_cast<size_t>(n.rows), 0.0);
  st.var.assign(static_cast<size_t>(n.rows), 0.0);
  st.inv.assign(static_cast<size_t>(n.rows), 0.0);
  const bool layer = p.op == OpKind::kLayerNorm;
  for (int64_t r = 0; r < n.rows; ++r) {
    const double* xr = x.data() + r * n.inner;
    if (layer) {
      double s = 0.0;
      for (int64_t i = 0; i < n.inner; ++i) s += xr[i];
      st.mean[r] = s / static_cast<double>(n.inner);
    }
    double ss = 0.0;
    for (int64_t i = 0; i < n.inner; ++i) {
      const double d = xr[i] - st.mean[r];
      ss += d * d;
    }
    st.var[r] = ss / static_cast<double>(n.inner);
    st.inv[r] = 1.0 / std::sqrt(st.var[r] + eps);
  }
  return st;
}

Values run_norm(const NodePlan& p, const NormStats& st, const Values& x, const Values& scale, const Values* bias) {
  const NormGeom& n = p.norm;
  Values y(x.size());
  for_each_broadcast(n.x_dims, n.scale_strides, bias ? n.bias_strides : std::vector<int64_t>{},
                     [&](int64_t pos, int64_t os, int64_t ob) {
                       const int64_t r = pos / n.inner;
                       double v = (x[pos] - st.mean[r]) * st.inv[r] * scale[os];
                       if (bias) v += (*bias)[ob];
                       y[pos] = v;
                     });
  return y;
}

// Shared by the value and the magnitude pass: per query row, the probabilities p_j (causal keys only)
// and the row's output.
template <typename RowFn>
void for_each_sdpa_row(const SdpaGeom& s, const Values& q, const Values& k, RowFn&& row_fn) {
  std::vector<double> score(static_cast<size_t>(s.skv));
  const int64_t group = s.h / s.hk;
  for (int64_t b = 0; b < s.b; ++b)
    for (int64_t h = 0; h < s.h; ++h) {
      const int64_t hk = h / group;
      const double* kb = k.data() + (b * s.hk + hk) * s.skv * s.d;
      for (int64_t i = 0; i < s.sq; ++i) {
        const int64_t row = (b * s.h + h) * s.sq + i;
        const double* qi = q.data() + row * s.d;
        const int64_t last = s.causal ? std::min(i + 1, s.skv) : s.skv;  // keys [0, last)
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < last; ++j) {
          double dot = 0.0;
          for (int64_t d = 0; d < s.d; ++d) dot += qi[d] * kb[j * s.d + d];
          score[j] = dot * s.scale;
          mx = std::max(mx, score[j]);
        }
        double sum = 0.0;
        for (int64_t j = 0; j < last; ++j) {
          score[j] = std::exp(score[j] - mx);
          sum += score[j];
        }
        for (int64_t j = 0; j < last; ++j) score[j] /= sum;
        row_fn(row, b * s.hk + hk, last, score.data());
      }
    }
}

Values run_sdpa(const SdpaGeom& s, const Values& q, const Values& k, const Values& v) {
  Values o(static_cast<size_t>(s.b * s.h * s.sq * s.dv), 0.0);
  for_each_sdpa_row(s, q, k, [&](int64_t row, int64_t kv_head, int64_t last, const double* p) {
    const double* vb = v.data() + kv_head * s.skv * s.dv;
    double* oi = o.data() + row * s.dv;
    for (int64_t j = 0; j < last; ++j)
      for (int64_t d = 0; d < s.dv; ++d) oi[d] += p[j] * vb[j * s.dv + d];
  });
  return o;
}

// ---- the magnitude pass (reference_math.h) ---------------------------------------------------------

struct Operand {
  const Values* value = nullptr;
  const Values* mag = nullptr;
  bool carries = false;  // written by a node (carries accumulation error)
};

Values scaled(Values v, double f) {
  if (f != 1.0)
    for (double& x : v) x *= f;
  return v;
}

Values squared(const Values& v) {
  Values s(v.size());
  for (size_t i = 0; i < v.size(); ++i) s[i] = v[i] * v[i];
  return s;
}

// The scale of a contraction or sum (reference_math.h): f * sqrt(sum of squared terms + y^2).
Values root_with(Values sum_sq, const Values& y, double f) {
  for (size_t i = 0; i < sum_sq.size(); ++i) sum_sq[i] = f * std::sqrt(sum_sq[i] + y[i] * y[i]);
  return sum_sq;
}

Values pointwise_magnitude_of(const NodePlan& p, PointwiseMode mode, const Operand& a, const Operand* b,
                              const Values& y) {
  const PointwiseGeom& g = p.pw;
  Values m(y.size());
  for_each_broadcast(g.out_dims, g.a_strides, g.b_strides, [&](int64_t pos, int64_t oa, int64_t ob) {
    m[pos] = pointwise_magnitude(mode, (*a.value)[oa], b ? (*b->value)[ob] : 0.0, y[pos], (*a.mag)[oa],
                                 b ? (*b->mag)[ob] : 0.0, a.carries, b && b->carries);
  });
  return m;
}

Values norm_magnitude_of(const NodePlan& p, double eps, const NormStats& st, const Operand& x, const Operand& scale,
                         const Operand* bias, const Values& y) {
  const NormGeom& n = p.norm;
  const bool layer = p.op == OpKind::kLayerNorm;
  std::vector<double> bm(static_cast<size_t>(n.rows), 0.0), dterm(static_cast<size_t>(n.rows), 0.0);
  for (int64_t r = 0; r < n.rows; ++r) {
    const double* br = x.mag->data() + r * n.inner;
    double s = 0.0;
    for (int64_t i = 0; i < n.inner; ++i) s += br[i];
    bm[r] = s / static_cast<double>(n.inner);
    const double* xr = x.value->data() + r * n.inner;
    double d = 0.0;
    for (int64_t i = 0; i < n.inner; ++i) d += norm_dterm_part(layer, xr[i], st.mean[r], br[i], x.carries, bm[r]);
    dterm[r] = d / static_cast<double>(n.inner);
  }
  Values m(y.size());
  for_each_broadcast(n.x_dims, n.scale_strides, bias ? n.bias_strides : std::vector<int64_t>{},
                     [&](int64_t pos, int64_t os, int64_t ob) {
                       const int64_t r = pos / n.inner;
                       const double xhat = ((*x.value)[pos] - st.mean[r]) * st.inv[r];
                       m[pos] = norm_magnitude(layer, y[pos], xhat, (*scale.value)[os], (*x.mag)[pos], (*scale.mag)[os],
                                               bias ? (*bias->mag)[ob] : 0.0, x.carries, scale.carries,
                                               bias && bias->carries, st.inv[r], st.var[r], eps, bm[r], dterm[r]);
                     });
  return m;
}

Values sdpa_magnitude_of(const SdpaGeom& s, const Operand& q, const Operand& k, const Operand& v, const Values& o) {
  Values m(o.size(), 0.0);
  const double qk_factor = contraction_factor(q.carries, k.carries) * std::fabs(s.scale);
  for_each_sdpa_row(s, *q.value, *k.value, [&](int64_t row, int64_t kv_head, int64_t last, const double* p) {
    const double* bq = q.mag->data() + row * s.d;
    const double* bk = k.mag->data() + kv_head * s.skv * s.d;
    const double* bv = v.mag->data() + kv_head * s.skv * s.dv;
    const double* oi = o.data() + row * s.dv;
    double* mi = m.data() + row * s.dv;
    for (int64_t j = 0; j < last; ++j) {
      double s_mag = 0.0;
      for (int64_t d = 0; d < s.d; ++d) s_mag += bq[d] * bk[j * s.d + d];
      s_mag *= qk_factor;
      for (int64_t d = 0; d < s.dv; ++d) mi[d] += sdpa_magnitude_term(p[j], bv[j * s.dv + d], oi[d], s_mag, v.carries);
    }
    for (int64_t d = 0; d < s.dv; ++d) mi[d] = std::max(mi[d], std::fabs(oi[d]));
  });
  return m;
}

StatusOr<ReferenceOutputs> evaluate(const Graph& g, const std::map<int, HostTensor>& inputs,
                                    const HostReferenceOptions& options, bool with_magnitudes) {
  KILN_ASSIGN_OR_RETURN(PreparedGraph prep, prepare_graph(g));
  if (prep.macs > options.max_macs) {
    std::ostringstream os;
    os.precision(3);
    os << "graph '" << g.name << "' needs " << prep.macs << " multiply-accumulates, over the host reference cap of "
       << options.max_macs << "; use the device reference";
    return invalid_argument(os.str());
  }
  KILN_ASSIGN_OR_RETURN(auto values, load_inputs(g, inputs));
  // Magnitudes (M) and scales (S) start as |x| at the graph inputs.
  std::map<int, Values> mags, scales;
  if (with_magnitudes)
    for (const auto& [t, v] : values) {
      Values m(v.size());
      for (size_t i = 0; i < v.size(); ++i) m[i] = std::fabs(v[i]);
      mags.emplace(t, m);
      scales.emplace(t, std::move(m));
    }
  const auto prod = producers(g);
  for (const NodePlan& p : prep.plans) {
    const Node& node = g.nodes[static_cast<size_t>(p.node)];
    std::vector<const Values*> in;
    std::vector<Operand> op, sop;  // the operands with their magnitudes, and with their scales
    for (int t : node.inputs) {
      auto it = values.find(t);
      if (it == values.end()) return internal_error(node_label(g, p.node) + ": input not computed");
      in.push_back(&it->second);
      if (with_magnitudes) {
        const bool carries = prod[static_cast<size_t>(t)] >= 0;
        op.push_back(Operand{&it->second, &mags.at(t), carries});
        sop.push_back(Operand{&it->second, &scales.at(t), carries});
      }
    }
    Values y, m, sc;
    double root_factor = 0;  // > 0: sc holds a sum of squares whose scale is f sqrt(sc + y^2), y rounded
    switch (p.op) {
      case OpKind::kConvFprop:
      case OpKind::kConvDgrad:
      case OpKind::kConvWgrad:
        y = run_conv(p, *in[0], *in[1]);
        if (with_magnitudes) {
          const double f = contraction_factor(op[0].carries, op[1].carries);
          m = scaled(run_conv(p, *op[0].mag, *op[1].mag), f);
          sc = run_conv(p, squared(*sop[0].mag), squared(*sop[1].mag));
          root_factor = f;
        }
        break;
      case OpKind::kMatmul:
        y = run_matmul(p.mm, *in[0], *in[1]);
        if (with_magnitudes) {
          const double f = contraction_factor(op[0].carries, op[1].carries);
          m = scaled(run_matmul(p.mm, *op[0].mag, *op[1].mag), f);
          sc = run_matmul(p.mm, squared(*sop[0].mag), squared(*sop[1].mag));
          root_factor = f;
        }
        break;
      case OpKind::kPointwise:
        y = run_pointwise(p, node.pointwise.mode, *in[0], in.size() > 1 ? in[1] : nullptr);
        if (with_magnitudes) {
          m = pointwise_magnitude_of(p, node.pointwise.mode, op[0], op.size() > 1 ? &op[1] : nullptr, y);
          sc = pointwise_magnitude_of(p, node.pointwise.mode, sop[0], sop.size() > 1 ? &sop[1] : nullptr, y);
        }
        break;
      case OpKind::kReduction:
        y = run_reduction(p.red, node.reduction.mode, *in[0]);
        if (with_magnitudes) {
          // A sum accumulates (its own error and the operand's); max, min and amax pick one element.
          if (node.reduction.mode == ReductionMode::kSum) {
            const double f = contraction_factor(op[0].carries, false);
            m = scaled(run_reduction(p.red, ReductionMode::kSum, *op[0].mag), f);
            sc = run_reduction(p.red, ReductionMode::kSum, squared(*sop[0].mag));
            root_factor = f;
          } else {
            m = run_reduction(p.red, ReductionMode::kAmax, *op[0].mag);
            sc = run_reduction(p.red, ReductionMode::kAmax, *sop[0].mag);
          }
        }
        break;
      case OpKind::kLayerNorm:
      case OpKind::kRmsNorm: {
        const NormStats st = norm_stats(p, node.norm.epsilon, *in[0]);
        y = run_norm(p, st, *in[0], *in[1], in.size() > 2 ? in[2] : nullptr);
        if (with_magnitudes) {
          m = norm_magnitude_of(p, node.norm.epsilon, st, op[0], op[1], op.size() > 2 ? &op[2] : nullptr, y);
          sc = norm_magnitude_of(p, node.norm.epsilon, st, sop[0], sop[1], sop.size() > 2 ? &sop[2] : nullptr, y);
        }
        break;
      }
      case OpKind::kSdpa:
        y = run_sdpa(p.sdpa, *in[0], *in[1], *in[2]);
        if (with_magnitudes) {
          m = sdpa_magnitude_of(p.sdpa, op[0], op[1], op[2], y);
          sc = sdpa_magnitude_of(p.sdpa, sop[0], sop[1], sop[2], y);
        }
        break;
    }
    const int out = node.outputs[0];
    const DataType dt = dtype_of(g, out);
    for (double& v : y) v = round_to_dtype(v, dt);
    if (with_magnitudes && root_factor > 0) sc = root_with(std::move(sc), y, root_factor);
    values[out] = std::move(y);
    if (with_magnitudes) {
      mags[out] = std::move(m);
      scales[out] = std::move(sc);
    }
  }
  ReferenceOutputs r;
  r.kind = ReferenceKind::kHost;
  KILN_ASSIGN_OR_RETURN(r.values, make_outputs(g, values));
  if (with_magnitudes) {
    KILN_ASSIGN_OR_RETURN(r.magnitudes, make_magnitude_outputs(g, mags));
    KILN_ASSIGN_OR_RETURN(r.scales, make_magnitude_outputs(g, scales));
  }
  return r;
}

}  // namespace

StatusOr<std::vector<HostTensor>> run_host_reference(const Graph& g, const std::map<int, HostTensor>& inputs,
                                                     const HostReferenceOptions& options) {
  return catch_exceptions("graph '" + g.name + "': host reference", [&]() -> StatusOr<std::vector<HostTensor>> {
    KILN_ASSIGN_OR_RETURN(ReferenceOutputs r, evaluate(g, inputs, options, false));
    return std::move(r.values);
  });
}

StatusOr<ReferenceOutputs> run_host_reference_with_magnitudes(const Graph& g, const std::map<int, HostTensor>& inputs,
                                                              const HostReferenceOptions& options) {
  return catch_exceptions("graph '" + g.name + "': host reference", [&] { return evaluate(g, inputs, options, true); });
}

}  // namespace kiln
