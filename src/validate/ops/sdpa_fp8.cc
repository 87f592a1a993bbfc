// The host reference of FP8 attention (sdpa_fp8): the plain sdpa reference on the descaled operands
// (sdpa_math.h sdpa_fp8_factors), o scaled by scale_o, amax_o the largest |o| before it.
#include <algorithm>
#include <cmath>

#include "validate/ops/reference_ops.h"
#include "validate/ops/sdpa_math.h"

namespace kiln::validate_internal {

// The plain sdpa an sdpa_fp8 node computes on its scaled q, k, v: its band and scale, a padding mask's lengths
// where it has them, o and (where asked for) the statistics.
Node sdpa_fp8_plain(const Node& node) {
  Node plain = node;
  plain.op = OpKind::kSdpa;
  plain.inputs = {node.inputs[0], node.inputs[1], node.inputs[2]};
  const SdpaInputs r = sdpa_inputs(node);
  if (r.seq_len_q >= 0)
    plain.inputs.insert(plain.inputs.end(), {node.inputs[static_cast<size_t>(r.seq_len_q)],
                                             node.inputs[static_cast<size_t>(r.seq_len_kv)]});
  plain.outputs = {node.outputs[kFp8O]};
  if (node.outputs.size() > kFp8Stats) plain.outputs.push_back(node.outputs[kFp8Stats]);
  return plain;
}

NodePlan sdpa_fp8_plain_plan(const NodePlan& p) {
  NodePlan plain = p;
  plain.output = p.output == kFp8Stats ? 1 : 0;
  return plain;
}

namespace {

SdpaFp8Factors host_factors(const std::vector<const Values*>& in) {
  double s[6];
  for (size_t i = 0; i < 6; ++i) s[i] = (*in[kFp8DescaleQ + i]).at(0);
  return sdpa_fp8_factors(s);
}

}  // namespace

HostNodeResult sdpa_fp8_host(const NodePlan& p, const Node& node, const std::vector<const Values*>& in,
                             const std::vector<Operand>* op, const std::vector<Operand>* sop) {
  const SdpaFp8Factors f = host_factors(in);
  const double factor[3] = {f.q, f.k, f.v};
  Values x[3], xm[3], xs[3];
  std::vector<const Values*> plain_in(3);
  std::vector<Operand> pop(3), psop(3);
  for (size_t i = 0; i < 3; ++i) {
    x[i] = scaled(*in[i], factor[i]);
    plain_in[i] = &x[i];
    if (op) {  // a magnitude (or scale) scales as its value does
      xm[i] = scaled(*(*op)[i].mag, factor[i]);
      xs[i] = scaled(*(*sop)[i].mag, factor[i]);
      pop[i] = Operand{&x[i], &xm[i], (*op)[i].carries};
      psop[i] = Operand{&x[i], &xs[i], (*sop)[i].carries};
    }
  }
  const Node plain = sdpa_fp8_plain(node);
  if (const SdpaInputs roles = sdpa_inputs(node); roles.seq_len_q >= 0)  // the lengths, as they are
    for (int i : {roles.seq_len_q, roles.seq_len_kv}) {
      plain_in.push_back(in[static_cast<size_t>(i)]);
      if (op) {
        pop.push_back((*op)[static_cast<size_t>(i)]);
        psop.push_back((*sop)[static_cast<size_t>(i)]);
      }
    }
  HostNodeResult r = sdpa_host(sdpa_fp8_plain_plan(p), plain, plain_in, op ? &pop : nullptr, op ? &psop : nullptr);
  if (p.output == kFp8O) {
    r.y = scaled(std::move(r.y), f.o);
    if (op) {
      r.m = scaled(std::move(r.m), f.o);
      r.sc = scaled(std::move(r.sc), f.o);
    }
  } else if (p.output == kFp8AmaxO) {  // within the largest error of any element of o (before scale_o)
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
