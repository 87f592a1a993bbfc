// The host side of the dropout probe (kiln/validate/dropout_probe.h): the references' form of a dropout graph, and
// the probe's own check of the share dropped. The probe itself runs on the device: dropout_probe.cu.
#include "kiln/validate/dropout_probe.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "kiln/core/strings.h"

namespace kiln {

bool has_dropout(const Graph& graph) {
  return std::any_of(graph.nodes.begin(), graph.nodes.end(), [](const Node& n) { return n.sdpa.dropout > 0; });
}

Graph dropout_reference_graph(const Graph& graph, std::map<int, int>* masks) {
  Graph g = graph;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& n = g.nodes[i];
    if (!(n.sdpa.dropout > 0) || n.sdpa.dropout_keep_input || (n.op != OpKind::kSdpa && n.op != OpKind::kSdpaBackward))
      continue;
    const TensorDesc& q = g.tensors[static_cast<size_t>(n.inputs[0])];
    const TensorDesc& k = g.tensors[static_cast<size_t>(n.inputs[1])];
    if (q.dims.size() != 4 || k.dims.size() != 4) continue;  // the reference names what is wrong
    TensorDesc m;
    m.name = n.name + ".dropout_keep";
    for (int64_t extent : {q.dims[0].value, q.dims[1].value, q.dims[2].value, k.dims[2].value}) {
      Dim d;
      d.value = extent;
      m.dims.push_back(d);
    }
    const int64_t skv = k.dims[2].value, sq = q.dims[2].value, h = q.dims[1].value;
    m.strides = {h * sq * skv, sq * skv, skv, 1};
    m.layout = Layout::kExplicit;
    m.dtype = DataType::kInt8;
    const int t = static_cast<int>(g.tensors.size());
    g.tensors.push_back(std::move(m));
    n.inputs.push_back(t);
    n.sdpa.dropout_keep_input = true;
    if (masks) (*masks)[static_cast<int>(i)] = t;
  }
  return g;
}

double DropoutNodeProbe::allowed_deviation() const {
  if (attended <= 0) return 0.0;
  return 6.0 * std::sqrt(dropout * (1.0 - dropout) / static_cast<double>(attended)) + 0.001;
}

Disposition DropoutNodeProbe::verdict() const {
  if (attended <= 0) return Disposition::kNotVerified;
  return std::fabs(dropped_share() - dropout) <= allowed_deviation() ? Disposition::kPassed : Disposition::kIncorrect;
}

std::string DropoutNodeProbe::summary(const std::string& node_name) const {
  char buf[160];
  std::snprintf(buf, sizeof buf, "dropped %lld of %lld attended probabilities (%.4f, allowed %.4f +- %.4f) in %d runs",
                static_cast<long long>(dropped), static_cast<long long>(attended), dropped_share(), dropout,
                allowed_deviation(), runs);
  const Disposition v = verdict();
  std::string s = node_name + " dropout mask: " + disposition_name(v) + " " + buf;
  if (v == Disposition::kIncorrect)
    s += ": the plan does not drop with probability " + shortest_number(dropout) + " (the spec's \"dropout\")";
  if (v == Disposition::kNotVerified) s += ": no row attends to a key, so the mask says nothing";
  return s;
}

std::map<int, void*> DropoutProbe::reference_inputs(const std::map<int, void*>& inputs) const {
  std::map<int, void*> all = inputs;
  for (const auto& [t, buffer] : masks) all[t] = buffer.data();
  return all;
}

void DropoutProbe::add_to(const Graph& graph, CheckReport& report) const {
  for (const DropoutNodeProbe& p : nodes) {
    const Node& n = graph.nodes[static_cast<size_t>(p.node)];
    OutputCheck c;
    c.tensor = n.outputs[0];
    c.name = graph.tensors[static_cast<size_t>(c.tensor)].name + " dropout mask";
    c.dtype = DataType::kInt8;
    c.verdict = p.verdict();
    c.summary = p.summary("node '" + n.name + "'");
    report.outputs.push_back(c);
    // The worse verdict: Incorrect over anything, NotVerified over Passed.
    if (c.verdict == Disposition::kIncorrect ||
        (c.verdict == Disposition::kNotVerified && report.verdict == Disposition::kPassed))
      report.verdict = c.verdict;
  }
}

StatusOr<DeviceReference> dropout_reference_on_device(const DropoutProbe& probe, const std::map<int, void*>& inputs) {
  return device_reference_on_device(probe.reference_graph, probe.reference_inputs(inputs));
}

StatusOr<CheckReport> check_dropout_plan(const Graph& graph, const std::map<int, void*>& buffers,
                                         const std::function<Status()>& run, DeviceChecker& checker,
                                         cudaStream_t stream, const std::function<Status()>& after_run) {
  KILN_ASSIGN_OR_RETURN(DropoutProbe probe, probe_dropout(graph, buffers, run, stream));
  KILN_RETURN_IF_ERROR(run());  // the outputs the probe wrote over, again: one seed and offset draw one mask
  KILN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  if (after_run) KILN_RETURN_IF_ERROR(after_run());
  std::map<int, void*> outputs;
  for (int t : graph.outputs) {
    auto it = buffers.find(t);
    if (it != buffers.end()) outputs.emplace(t, it->second);
  }
  KILN_ASSIGN_OR_RETURN(DeviceReference ref, dropout_reference_on_device(probe, buffers));
  KILN_ASSIGN_OR_RETURN(CheckReport report, checker.check(outputs, ref, stream));
  probe.add_to(graph, report);
  return report;
}

}  // namespace kiln
