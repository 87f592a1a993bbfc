// kiln plans queue add (docs/fleet.md "The queue"): queues graphs for `kiln worker` (or `kiln plans retune`) by
// hand: each spec as it is, or at the shapes a service recorded (`kiln replay --record-shapes`, a Planner's
// recorder), each shape's served count added to the row's request count so that the counts of several hosts
// add up. The environment is this machine's GPU, or one the store already holds plans or jobs for (--for KEY).
#include <cinttypes>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.h"
#include "kiln/core/read_file.h"
#include "kiln/graph/graph.h"
#include "kiln/lower/environment.h"
#include "kiln/runtime/bucket_policy.h"
#include "kiln/runtime/reshape_graph.h"
#include "kiln/runtime/retune.h"
#include "kiln/runtime/shape_recorder.h"
#include "kiln/spec/spec.h"
#include "plans.h"

namespace kiln::cli::plans {

namespace {

// The environment whose key is `given` (a key or a prefix of one, as ls shows it), from what the store holds
// for it: a plan, a queued job or a kept kernel cache.
StatusOr<EnvFingerprint> environment_in_store(const std::string& given, PlanStore& store) {
  KILN_ASSIGN_OR_RETURN(std::string key, resolve_fingerprint_key(given, store));
  ListFilter f;
  f.fingerprint_key = key;
  KILN_ASSIGN_OR_RETURN(std::vector<PlanSummary> plans, store.list(f));
  for (const PlanSummary& p : plans)
    if (p.problem.empty() && p.record.fingerprint_key() == key) return p.record.fingerprint;
  KILN_ASSIGN_OR_RETURN(std::vector<RetuneQueueEntry> queued, store.list_retune_queue(key));
  for (const RetuneQueueEntry& e : queued)
    if (e.problem.empty() && fingerprint_key(e.fingerprint) == key) return e.fingerprint;
  KILN_ASSIGN_OR_RETURN(std::vector<KernelCacheInfo> caches, store.list_kernel_caches());
  for (const KernelCacheInfo& c : caches)
    if (c.problem.empty() && c.fingerprint_key == key) return c.fingerprint;
  return not_found("--for " + printable(given) + ": " + printable(store.path()) +
                   " holds no plan, queued job or kernel cache of that environment (kiln plans ls shows the keys)");
}

StatusOr<EnvFingerprint> environment_for(const PlansOptions& o, PlanStore& store) {
  if (!o.environment_json.empty()) {
    KILN_ASSIGN_OR_RETURN(std::string text, read_file(o.environment_json));
    StatusOr<EnvFingerprint> fp = fingerprint_from_json(text);
    if (!fp.is_ok()) return invalid_argument("--environment-json " + o.environment_json + ": " + fp.status().message());
    return *fp;
  }
  if (!o.fingerprint.empty()) return environment_in_store(o.fingerprint, store);
  EnvReport env = collect_environment(0);
  if (!env.device_status.is_ok())
    return unavailable("a re-tune is queued for one environment, and this machine has no GPU to say which (" +
                       env.device_status.message() +
                       "): name an environment the store knows with --for KEY (kiln plans ls shows the keys)");
  return env.fingerprint;
}

struct Queued {
  std::string spec;
  RetuneQueueEntry entry;
  int64_t added = 1;
};

// The requests for one spec: the graph as it is, or one per recorded shape of its structure (hottest first, at
// most `hottest`), each with its served count.
StatusOr<std::vector<RetuneRequest>> requests_for(const std::string& spec, const PlansOptions& o,
                                                  const std::vector<RecordedShape>& recorded,
                                                  const EnvFingerprint& env) {
  KILN_ASSIGN_OR_RETURN(Graph g, parse_spec_file(spec));
  KILN_ASSIGN_OR_RETURN(GraphSignature sig, compute_signature(g));
  std::vector<std::pair<Graph, int64_t>> graphs;  // (graph at a shape, its served count)
  if (o.shapes_file.empty()) {
    graphs.emplace_back(std::move(g), 1);
  } else {
    for (const RecordedShape& r : recorded) {
      if (r.structure != sig.structure) continue;
      if (o.hottest > 0 && static_cast<int>(graphs.size()) >= o.hottest) break;
      StatusOr<std::map<std::string, int64_t>> shape = parse_shape_key(r.shape_key);
      if (!shape.is_ok())
        return shape.status().with_context("--shapes " + o.shapes_file + ", shape '" + r.shape_key + "'");
      StatusOr<Graph> at = reshape_graph(g, *shape);
      if (!at.is_ok()) return at.status().with_context(spec + " at recorded shape " + r.shape_key);
      graphs.emplace_back(std::move(at).value(), r.count);
    }
    if (graphs.empty())
      std::fprintf(stderr, "%s: no shape of its structure (%s) in %s: nothing queued for it\n", spec.c_str(),
                   sig.structure.substr(0, 12).c_str(), o.shapes_file.c_str());
  }
  std::vector<RetuneRequest> out;
  for (auto& [graph, count] : graphs) {
    KILN_ASSIGN_OR_RETURN(GraphSignature s, compute_signature(graph));
    KILN_ASSIGN_OR_RETURN(std::string spec_json, graph_to_spec_json(graph));
    RetuneRequest req;
    req.structure_sig = s.structure;
    req.shape_key = s.shape_key;
    req.fingerprint = env;
    req.graph_name = graph.name;
    req.spec_json = std::move(spec_json);
    req.count = count;
    req.reason = !o.reason.empty() ? o.reason
                 : o.shapes_file.empty()
                     ? std::string("queued by hand (kiln plans queue add)")
                     : "hot shape: served " + std::to_string(count) + " times (" + o.shapes_file + ")";
    out.push_back(std::move(req));
  }
  return out;
}

}  // namespace

Status run_queue_add(const PlansOptions& o) {
  if (o.specs.empty()) return invalid_argument("kiln plans queue add: give one or more spec files");
  if (o.hottest < 0)
    return invalid_argument("--hottest must be >= 0 (0: every recorded shape), got " + std::to_string(o.hottest));
  if (o.hottest > 0 && o.shapes_file.empty())
    return invalid_argument("--hottest chooses among the shapes of --shapes FILE: give --shapes");
  std::vector<RecordedShape> recorded;
  if (!o.shapes_file.empty()) {
    KILN_ASSIGN_OR_RETURN(recorded, read_shapes_file(o.shapes_file));
  }
  // Every spec is read before anything is queued: a bad one queues nothing.
  KILN_ASSIGN_OR_RETURN(auto store, open_store(o, false));
  KILN_ASSIGN_OR_RETURN(EnvFingerprint env, environment_for(o, *store));
  std::vector<std::pair<std::string, RetuneRequest>> requests;
  for (const std::string& spec : o.specs) {
    KILN_ASSIGN_OR_RETURN(std::vector<RetuneRequest> rs, requests_for(spec, o, recorded, env));
    for (auto& r : rs) requests.emplace_back(spec, std::move(r));
  }
  std::vector<Queued> done;
  for (auto& [spec, req] : requests) {
    StatusOr<RetuneQueueEntry> e = store->enqueue_retune(req);
    if (!e.is_ok())
      return e.status().with_context(spec + (req.shape_key.empty() ? "" : " at " + req.shape_key) + " (" +
                                     std::to_string(done.size()) + " of " + std::to_string(requests.size()) +
                                     " queued before it)");
    done.push_back({spec, std::move(e).value(), req.count});
  }
  const std::string key = fingerprint_key(env);
  if (o.json) {
    nlohmann::ordered_json arr = nlohmann::ordered_json::array();
    for (const Queued& q : done)
      arr.push_back({{"spec", q.spec},
                     {"structure_sig", q.entry.structure_sig},
                     {"shape_key", q.entry.shape_key},
                     {"fingerprint_key", q.entry.fingerprint_key},
                     {"graph_name", q.entry.graph_name},
                     {"added", q.added},
                     {"request_count", q.entry.request_count}});
    std::printf("%s\n", arr.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace).c_str());
    return Status::ok();
  }
  for (const Queued& q : done)
    std::printf("queued %s %s ('%s'): %" PRId64 " request%s\n", q.entry.structure_sig.substr(0, 12).c_str(),
                q.entry.shape_key.empty() ? "(static)" : q.entry.shape_key.c_str(), q.entry.graph_name.c_str(),
                q.entry.request_count, q.entry.request_count == 1 ? "" : "s");
  std::printf("%zu re-tune%s queued for environment %s (%s, cuDNN %s) in %s\n", done.size(),
              done.size() == 1 ? "" : "s", key.substr(0, 12).c_str(), env.gpu_name.c_str(),
              EnvFingerprint::cudnn_version_string(env.cudnn_version).c_str(), printable(shown_store(o)).c_str());
  return Status::ok();
}

}  // namespace kiln::cli::plans
