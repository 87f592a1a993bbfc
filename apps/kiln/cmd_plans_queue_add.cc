// kiln plans queue add (docs/fleet.md "The queue"): queues graphs for `kiln worker` (or `kiln plans retune`) by
// hand: each spec as it is, or at the shapes a service recorded (`kiln replay --record-shapes`, a Planner's
// recorder), each shape's served count added to the row's request count so that the counts of several hosts
// add up. The environment is this machine's GPU, or one the store already holds plans or jobs for (--for KEY).
#include <cinttypes>
#include <cstdio>
#include <algorithm>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "commands.h"
#include "kiln/core/strings.h"
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

// The environment whose key is `given` (a key or a prefix of at least 6 hex digits, as `kiln plans ls --json` and
// `kiln plans queue --json` show them), from what the store holds for it: a plan, a queued job or a kept kernel
// cache. A prefix that begins several keys is refused, naming them.
StatusOr<EnvFingerprint> environment_in_store(const std::string& given, PlanStore& store) {
  KILN_ASSIGN_OR_RETURN(std::string prefix, fingerprint_prefix_text(given, "--for"));
  std::map<std::string, EnvFingerprint> known;  // key -> its environment, from whatever holds it
  KILN_ASSIGN_OR_RETURN(std::vector<PlanSummary> plans, store.list());
  for (const PlanSummary& p : plans)
    if (p.problem.empty()) known.emplace(p.record.fingerprint_key(), p.record.fingerprint);
  KILN_ASSIGN_OR_RETURN(std::vector<RetuneQueueEntry> queued, store.list_retune_queue());
  for (const RetuneQueueEntry& e : queued)
    if (e.problem.empty()) known.emplace(fingerprint_key(e.fingerprint), e.fingerprint);
  KILN_ASSIGN_OR_RETURN(std::vector<KernelCacheInfo> caches, store.list_kernel_caches());
  for (const KernelCacheInfo& c : caches)
    if (c.problem.empty()) known.emplace(c.fingerprint_key, c.fingerprint);
  std::vector<std::string> begun;
  for (const auto& [key, fp] : known)
    if (key.compare(0, prefix.size(), prefix) == 0) begun.push_back(key);
  if (begun.size() > 1)
    return invalid_argument("--for " + prefix + " is ambiguous: it begins " + std::to_string(begun.size()) +
                            " environment keys in " + printable(store.path()) + ": " + printable(join(begun, ", ")) +
                            " (give more of it)");
  if (begun.empty())
    return not_found("--for " + printable(given) + ": " + printable(store.path()) +
                     " holds no plan, queued job or kernel cache of an environment whose key begins so (kiln plans "
                     "ls --json and kiln plans queue --json show the keys)");
  return known.at(begun[0]);
}

// The environment to queue for; --for reads the store (read-only: nothing is written before everything checks).
StatusOr<EnvFingerprint> environment_for(const PlansOptions& o) {
  if (!o.environment_json.empty()) return read_environment_json(o.environment_json);
  if (!o.fingerprint.empty()) {
    StatusOr<std::unique_ptr<PlanStore>> store = open_store(o, false, /*read_only=*/true);
    if (!store.is_ok() && is_server_location(o.store))  // an empty schema (no store yet) knows no environment
      return store.status().with_context("--for " + printable(o.fingerprint));
    if (!store.is_ok()) return store.status();
    return environment_in_store(o.fingerprint, **store);
  }
  EnvReport env = collect_environment(0);
  if (!env.device_status.is_ok())
    return unavailable("a re-tune is queued for one environment, and this machine has no GPU to say which (" +
                       env.device_status.message() +
                       "): name an environment the store knows with --for KEY (kiln plans ls --json shows the keys)");
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
    std::vector<RecordedShape> mine;  // this structure's shapes, hottest first (ties keep the file's order)
    for (const RecordedShape& r : recorded)
      if (r.structure == sig.structure && r.count > 0) mine.push_back(r);
    std::stable_sort(mine.begin(), mine.end(),
                     [](const RecordedShape& a, const RecordedShape& b) { return a.count > b.count; });
    for (const RecordedShape& r : mine) {
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
    const std::string reason = !o.reason.empty() ? o.reason
                               : o.shapes_file.empty()
                                   ? std::string("queued by hand (kiln plans queue add)")
                                   : "hot shape: served " + std::to_string(count) + " times (" + o.shapes_file + ")";
    KILN_ASSIGN_OR_RETURN(RetuneRequest req, retune_request_for(graph, env, reason));
    req.count = count;
    req.revive = true;  // by hand: a dead-lettered job of this key is queued again
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
  // Every spec, the shapes and the environment are read before the store is opened to write: bad input queues
  // nothing and leaves no store behind. A key asked for twice (a spec given twice, a shape recorded twice) is one
  // request with the counts added.
  KILN_ASSIGN_OR_RETURN(EnvFingerprint env, environment_for(o));
  std::vector<std::pair<std::string, RetuneRequest>> requests;
  std::map<std::pair<std::string, std::string>, size_t> index;
  for (const std::string& spec : o.specs) {
    KILN_ASSIGN_OR_RETURN(std::vector<RetuneRequest> rs, requests_for(spec, o, recorded, env));
    for (auto& r : rs) {
      auto [it, fresh] = index.emplace(std::make_pair(r.structure_sig, r.shape_key), requests.size());
      if (fresh) requests.emplace_back(spec, std::move(r));
      else requests[it->second].second.count += r.count;
    }
  }
  if (requests.empty())
    return invalid_argument("--shapes " + o.shapes_file + ": no recorded shape has the structure of any spec given");
  KILN_ASSIGN_OR_RETURN(auto store, open_store(o, false));
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
                q.entry.shape_key.empty() ? "(static)" : printable(q.entry.shape_key).c_str(),
                printable(q.entry.graph_name).c_str(), q.entry.request_count, q.entry.request_count == 1 ? "" : "s");
  std::printf("%zu re-tune%s queued for environment %s (%s, cuDNN %s) in %s\n", done.size(),
              done.size() == 1 ? "" : "s", key.substr(0, 12).c_str(), printable(env.gpu_name).c_str(),
              EnvFingerprint::cudnn_version_string(env.cudnn_version).c_str(), printable(shown_store(o)).c_str());
  return Status::ok();
}

}  // namespace kiln::cli::plans
