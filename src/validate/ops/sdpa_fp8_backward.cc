// The host reference of FP8 attention's backward pass (sdpa_fp8_backward): the plain sdpa_backward reference on the
// descaled q, k, v, o, do (sdpa_math.h sdpa_fp8_backward_factors), each gradient times its fp8 factor, the stored
// dq, dk, dv times their scales, the amax the largest of each before them, amax_dp the largest |dS|.
#include <algorithm>
#include <cmath>

#include "validate/ops/reference_ops.h"
#include "validate/ops/sdpa_math.h"

namespace kiln::validate_internal {

// The plain sdpa_backward an sdpa_fp8_backward node computes on its descaled q, k, v, o, do: its band, scale and
// padding mask's lengths; dq, dk, dv.
Node sdpa_fp8_backward_plain(const Node& node) {
  Node plain = node;
  plain.op = OpKind::kSdpaBackward;
  plain.inputs.assign(node.inputs.begin(), node.inputs.begin() + 6);
  const SdpaInputs r = sdpa_inputs(node);
  if (r.seq_len_q >= 0)
    plain.inputs.insert(plain.inputs.end(), {node.inputs[static_cast<size_t>(r.seq_len_q)],
                                             node.inputs[static_cast<size_t>(r.seq_len_kv)]});
  plain.outputs.assign(node.outputs.begin(), node.outputs.begin() + 3);
  return plain;
}

NodePlan sdpa_fp8_backward_plain_plan(const NodePlan& p) {
  NodePlan plain = p;
  plain.op = OpKind::kSdpaBackward;
  plain.output = p.output == kFp8bAmaxDp ? kSdpaBackwardDsAmax : p.output % 3;  // amax_dq -> dq, ...
  return plain;
}

namespace {

SdpaFp8BackwardFactors host_factors(const std::vector<const Values*>& in) {
  double s[12];
  for (size_t i = 0; i < 12; ++i) s[i] = (*in[kFp8bDescaleQ + i]).at(0);
  return sdpa_fp8_backward_factors(s);
}

}  // namespace

HostNodeResult sdpa_fp8_backward_host(const NodePlan& p, const Node& node, const std::vector<const Values*>& in,
                                      const std::vector<Operand>* op, const std::vector<Operand>* sop) {
  const SdpaFp8BackwardFactors f = host_factors(in);
  Values x[5], xm[5], xs[5];
  std::vector<const Values*> plain_in(6);
  std::vector<Operand> pop(6), psop(6);
  for (size_t i = 0; i < 5; ++i) {
    x[i] = scaled(*in[i], f.in[i]);
    plain_in[i] = &x[i];
    if (op) {  // a magnitude (or scale) scales as its value does
      xm[i] = scaled(*(*op)[i].mag, std::fabs(f.in[i]));
      xs[i] = scaled(*(*sop)[i].mag, std::fabs(f.in[i]));
      pop[i] = Operand{&x[i], &xm[i], (*op)[i].carries};
      psop[i] = Operand{&x[i], &xs[i], (*sop)[i].carries};
    }
  }
  plain_in[5] = in[5];  // the statistics, as they are
  if (op) {
    pop[5] = (*op)[5];
    psop[5] = (*sop)[5];
  }
  if (const SdpaInputs roles = sdpa_inputs(node); roles.seq_len_q >= 0)  // the lengths, as they are
    for (int i : {roles.seq_len_q, roles.seq_len_kv}) {
      plain_in.push_back(in[static_cast<size_t>(i)]);
      if (op) {
        pop.push_back((*op)[static_cast<size_t>(i)]);
        psop.push_back((*sop)[static_cast<size_t>(i)]);
      }
    }
  const Node plain = sdpa_fp8_backward_plain(node);
  HostNodeResult r =
      sdpa_backward_host(sdpa_fp8_backward_plain_plan(p), plain, plain_in, op ? &pop : nullptr, op ? &psop : nullptr);
  if (p.output == kFp8bAmaxDp) {  // cuDNN's dS carries attn_scale before its amax and fp8 rounding (FE 1.32)
    const double a = std::fabs(p.sdpa.scale);
    r.y = scaled(std::move(r.y), a);
    if (op) {
      r.m = scaled(std::move(r.m), a);
      r.sc = scaled(std::move(r.sc), a);
    }
    return r;
  }
  const size_t g = static_cast<size_t>(p.output % 3);
  const double factor = f.grad[g] * (p.output <= kFp8bDv ? f.out[g] : 1.0);
  r.y = scaled(std::move(r.y), factor);
  if (op) {
    r.m = scaled(std::move(r.m), std::fabs(factor));
    r.sc = scaled(std::move(r.sc), std::fabs(factor));
  }
  if (p.output >= kFp8bAmaxDq) {  // within the largest error of any element (before its scale)
    for (double& v : r.y) v = std::fabs(v);
    r.y = {largest(r.y)};
    if (op) {
      r.m = {largest(r.m)};
      r.sc = {largest(r.sc)};
    }
  }
  return r;
}

}  // namespace kiln::validate_internal
