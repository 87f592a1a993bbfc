// kiln tune SPEC...: measure every engine configuration cuDNN offers, reject wrong ones, pick the winner,
// optionally store it. --list enumerates candidates without timing them; --pin builds exactly one.

#include <chrono>
#include <csignal>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "tune_cli.h"
#include "tune_report.h"
#include "kiln/cuda/cuda_handles.h"
#include "kiln/runtime/planner.h"
#include "kiln/runtime/workshop.h"
#include "kiln/store/store_path.h"
#include "kiln/runtime/shape_recorder.h"
#include "kiln/spec/spec.h"
#include "kiln/validate/device_io.h"

namespace kiln::cli {
namespace {

std::atomic<bool> g_tune_interrupted{false};
extern "C" void on_interrupt(int sig) {
  g_tune_interrupted = true;
  std::signal(sig, SIG_DFL);  // a second Ctrl-C (or TERM) ends the process at once
}

// What to tune: each spec's graph, or, where cuDNN cannot fuse it whole, each of its fused segments, as the
// Planner's workshop decides it (the decision the segments source makes when `kiln run` serves the graph); `kiln
// run` finds the segments' plans in the store under their own signatures.
StatusOr<std::vector<std::pair<std::string, Graph>>> tune_work_items(std::vector<std::pair<std::string, Graph>> specs,
                                                                     Workshop& workshop) {
  std::vector<std::pair<std::string, Graph>> work;
  for (auto& [spec, g] : specs) {
    KILN_ASSIGN_OR_RETURN(TuneWork w, workshop.work_for(g));
    if (!w.segmented.empty())
      std::fprintf(
          stderr,
          "%s: cannot be fused whole (%s); tuning its %zu fused segments, each stored under its own signature\n",
          g.name.c_str(), w.segmented.c_str(), w.graphs.size());
    for (Graph& part : w.graphs) work.emplace_back(spec, std::move(part));
  }
  return work;
}

}  // namespace

Status tune_cmd(const TuneCliOptions& o) {
  // --shapes: the shapes a service recorded (kiln::Planner's recorder, docs/runtime.md), read and checked
  // before anything else (no store is created for a bad file, no GPU is touched); each spec is tuned at its
  // recorded shapes, the hottest first, instead of its own.
  const bool have_shapes = !o.shapes_file.empty();
  std::vector<RecordedShape> recorded;
  BucketPolicy buckets;
  if (have_shapes) {
    KILN_ASSIGN_OR_RETURN(recorded, read_shapes_file(o.shapes_file));
    auto b = BucketPolicy::parse(o.buckets);
    if (!b.is_ok()) return b.status().with_context("--buckets");
    buckets = *b;
  } else if (o.hottest > 0 || !o.buckets.empty()) {
    return invalid_argument("--hottest and --buckets choose among the shapes of --shapes FILE: give --shapes");
  }
  KILN_ASSIGN_OR_RETURN(TuneJob job, tune_job_from(o, &g_tune_interrupted));
  TuneOptions& to = job.tune;
  // The store is opened (and, when new, created) by the Planner, once every input is checked and the GPU
  // is there: a run refused for bad input or a missing GPU leaves no store behind.
  std::string store_path = o.use_store && o.store_path.empty() ? default_store_path() : o.store_path;
  if (store_path.empty() && o.untuned_only) return invalid_argument("--untuned needs --store");
  // Whatever exists at the path is checked now, before the GPU (a folder, a pipe or device, corrupt, newer, not
  // a store, a path that cannot be reached, a folder this user cannot write); a new store, or an empty file made
  // one, is created by the Planner. Opened writable: its close leaves no -wal behind.
  if (!store_path.empty()) KILN_RETURN_IF_ERROR(check_store_destination(store_path));
  job.store = !store_path.empty();
  g_tune_interrupted = false;
  std::signal(SIGINT, on_interrupt);
  std::signal(SIGTERM, on_interrupt);
  // --budget bounds the whole command: every graph, its builds, inputs, reference and unfused alternative.
  if (o.budget_s > 0)
    job.deadline = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                          std::chrono::duration<double>(o.budget_s));

  KILN_ASSIGN_OR_RETURN(auto specs_read, graphs_to_tune(o, recorded, buckets));
  if (o.list) {
    for (auto& [spec, g] : specs_read) KILN_RETURN_IF_ERROR(list_candidates(g, o.json));
    return Status::ok();
  }
  // Recorded inputs are checked before the GPU is touched (bad input is exit 2, not a late failure).
  if (!o.inputs_dir.empty())
    for (auto& [spec, g] : specs_read)
      KILN_RETURN_IF_ERROR(check_graph_input_files(g, o.inputs_dir).with_context("--inputs"));
  // The GPU first, in plain words (a missing one is exit 3, and no store is created): the CUDA context the Planner
  // uses is made here. Then the Planner opens the store, and its workshop decides what to tune.
  KILN_RETURN_IF_ERROR(cuda_status(cudaFree(nullptr), "cudaFree(nullptr)"));
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<Planner> planner, Planner::create(PlannerOptions::offline(store_path)));
  Workshop& workshop = planner->workshop();
  KILN_ASSIGN_OR_RETURN(auto work, tune_work_items(std::move(specs_read), workshop));

  nlohmann::json all = nlohmann::json::array();
  Status overall;
  for (auto& [spec, g] : work) {
    // Progress always goes to stderr (with --json too): a bar with the time left on a terminal, lines otherwise.
    ProgressReporter progress("tune " + g.name, 0, stderr);
    // Test hook KILN_TEST_TERM_AFTER=N: the process sends itself SIGTERM once N candidates are settled, so a
    // test interrupts a tune at a known point however fast the candidates are (tune_gpu_test's TuneCli).
    const char* term_after = std::getenv("KILN_TEST_TERM_AFTER");
    const size_t term_at = term_after ? static_cast<size_t>(std::strtoull(term_after, nullptr, 10)) : 0;
    to.progress = [&](size_t done, size_t total, const std::string& id) {
      progress.update(done, total, id);
      if (term_at > 0 && done == term_at) std::raise(SIGTERM);
    };
    const std::string name = g.name;
    job.on_note = [&](const std::string& note) { std::fprintf(stderr, "tune %s: %s\n", name.c_str(), note.c_str()); };
    KILN_ASSIGN_OR_RETURN(TunedGraph t, workshop.tune(g, job));
    if (t.skipped) {
      std::printf("%s: already tuned in the store, skipped\n", g.name.c_str());
      continue;
    }
    if (t.budget_spent) {
      std::fprintf(stderr, "tune %s: skipped, the time budget (%.1f s) is spent\n", g.name.c_str(), o.budget_s);
      overall = overall.is_ok() ? check_failed("time budget spent before '" + g.name + "' was tuned") : overall;
      continue;
    }
    const TuneResult& tr = t.result;
    progress.finish(tr.cancelled ? "interrupted" : tr.budget_exhausted ? "time budget reached" : "");
    print_tuned(spec, g, t, job, o.json, &all);
    if (t.kept) {
      for (const std::string& w : t.kept->warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
      const char* partial = t.kept->record.tuned ? "" : " (partial: marked untuned)";
      // Held back by --rollout: stored beside the active plan, not served until promoted (docs/rollout.md).
      const std::string held = t.kept->state == PlanState::kActive
                                   ? ""
                                   : std::string(" as a ") + plan_state_name(t.kept->state) +
                                         " (the active plan serves until 'kiln plans promote' or the shadow rule)";
      if (!o.json) std::printf("stored in %s%s%s\n", shown_location(store_path).c_str(), partial, held.c_str());
      else if (!t.kept->record.tuned)
        std::fprintf(stderr, "tune %s: partial winner stored in %s, marked untuned\n", g.name.c_str(),
                     shown_location(store_path).c_str());
    }
    if (!t.store_status.is_ok()) return t.store_status.with_context("the winner of '" + g.name + "' was not stored");
    if (!tr.winner) {
      if (tr.cancelled) {
        overall = cancelled("interrupted: finished candidates were reported, none was correct");
        break;
      }
      overall = check_failed("no correct candidate for '" + g.name + "'");
      continue;
    }
    if (tr.cancelled) {
      overall = cancelled("interrupted: finished candidates were reported");
      break;
    }
  }
  if (o.json) std::printf("%s\n", all.dump(2).c_str());
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
  return overall;
}

}  // namespace kiln::cli
