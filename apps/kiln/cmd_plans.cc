// kiln plans: look after the plan store (ls, show, rm, verify, gc, export, import, queue, retune), one
// file per subcommand (cmd_plans_<name>.cc, plans.h); this one registers them. docs/store.md.
#include <memory>
#include <tuple>
#include <string>

#include "commands.h"
#include "plans.h"

namespace kiln::cli {
namespace {

using namespace plans;

// `kiln plans queue add` (cmd_plans_queue_add.cc): queue graphs by hand. CLI11 runs a parent's callback after its
// subcommand's, so `queue`'s own callback leaves the command to `add` when it was given.
CLI::App* add_queue_add(CLI::App* queue, const std::shared_ptr<PlansOptions>& o, Runner* run) {
  CLI::App* queue_add = queue->add_subcommand(
      "add", "Queue graphs for re-tuning by `kiln worker`: each spec as it is, or at the shapes a service recorded");
  queue_add->add_option("spec", o->specs, "Spec files")->required()->check(non_empty_path());
  queue_add->add_option("--store", o->store, "Plan store (as for `kiln plans queue`)")->check(non_empty_path());
  queue_add
      ->add_option("--shapes", o->shapes_file,
                   "A recorded-shapes file (kiln replay --record-shapes): queue each spec at its recorded shapes, "
                   "each with its served count")
      ->check(non_empty_path());
  queue_add
      ->add_option("--hottest", o->hottest,
                   "With --shapes: at most this many shapes per spec, hottest first (0: every one)")
      ->check(whole_number_at_least(0));
  queue_add->add_option("--for", o->fingerprint,
                        "The environment to tune for: a fingerprint key (or a prefix of one) that the store holds "
                        "plans or jobs of (default: this machine's GPU)");
  queue_add->add_option("--reason", o->reason,
                        "Why (kept with the job; default: 'queued by hand' or the hot shape's count)");
  queue_add->add_flag("--json", o->json, "Machine-readable output");
  queue_add
      ->add_option("--environment-json", o->environment_json,
                   "Testing: queue for the environment of this fingerprint JSON")
      ->group("");
  queue_add->callback([run, o] { *run = [o] { return run_queue_add(*o); }; });
  return queue_add;
}

void add_plans(CLI::App& app, Runner* run) {
  auto o = std::make_shared<PlansOptions>();
  o->store = default_store_path();
  CLI::App* plans = app.add_subcommand("plans", "Look after the plan store (" + shown_location(o->store) + ")");
  plans->require_subcommand(1);

  auto add = [&](const char* name, const char* help, Status (*fn)(const PlansOptions&)) {
    CLI::App* sub = plans->add_subcommand(name, help);
    sub->add_option("--store", o->store,
                    "Plan store: a file, or a PostgreSQL server's (postgresql://... or 'host=... dbname=...') "
                    "(default: $KILN_STORE, $XDG_CACHE_HOME/kiln/plans.db or ~/.cache/kiln/plans.db)")
        ->check(non_empty_path());
    sub->callback([run, o, fn] { *run = [o, fn] { return fn(*o); }; });
    return sub;
  };
  auto add_filter = [&](CLI::App* sub, const char* fingerprint_help = "Environment fingerprint key") {
    sub->add_option("--structure", o->structure, "Structure signature (or a prefix of it)");
    sub->add_option("--shape", o->shape, "Shape key");
    sub->add_option("--fingerprint", o->fingerprint, fingerprint_help);
    sub->add_flag("--tuned", o->tuned_only, "Only tuned plans");
  };

  CLI::App* ls = add("ls", "List stored plans, each current or stale for this environment", run_ls);
  add_filter(ls, "Environment fingerprint key, or a prefix of it that begins only one key in the store (at least 6 hex "
                 "digits, e.g. the 12 ls shows); an ambiguous prefix is refused, naming the keys it begins");
  ls->add_flag("--json", o->json, "Machine-readable output");
  ls->add_option("--target", o->target, "Judge staleness against this device profile (default: this GPU)")
      ->check(non_empty_path());
  ls->add_flag("--kernel-caches", o->kernel_caches,
               "List the kept kernel caches alone (with --json, as a JSON array; plain ls lists them under the plans)");

  CLI::App* show = add("show", "Show every field of the plans matching a structure signature prefix", run_show);
  show->add_option("structure", o->structure, "Structure signature (or a prefix of it)")->required();
  show->add_option("--shape", o->shape, "Shape key");
  show->add_option("--fingerprint", o->fingerprint, "Environment fingerprint key");

  CLI::App* rm = add("rm", "Remove plans", run_rm);
  add_filter(rm);
  rm->add_flag("--all", o->all, "Remove every plan");

  CLI::App* verify =
      add("verify", "Re-check every record's checksum, every kept kernel cache and the database (exit 4 if corrupt)",
          run_verify);
  verify->add_flag("--quarantine", o->quarantine,
                   "Move corrupt records (and with --deep, failing plans) to the quarantine table; drop corrupt "
                   "kernel caches");
  verify->add_flag("--deep", o->deep,
                   "Also run each plan on this GPU and check its outputs against a reference (exit 1 if one fails)");
  verify->add_option("--spec", o->specs, "Spec files giving the graphs of the records to deep-check (with --deep)");
  add_seed_option(verify, &o->seed, "Seed of the random inputs of --deep")->each([o](const std::string&) {
    o->seed_given = true;
  });
  verify->add_flag("--json", o->json, "Machine-readable output");

  CLI::App* gc = add("gc", "Drop corrupt, quarantined, stale or old plans and kernel caches", run_gc);
  gc->add_flag("--stale", o->stale,
               "Drop plans whose environment does not pass the default policy on this GPU, and kernel caches kept "
               "for any other environment");
  gc->add_option("--target", o->target, "With --stale: judge against this device profile instead of this GPU")
      ->check(non_empty_path());
  gc->add_option("--older-than", o->older_than_days,
                 "Drop plans and kernel caches created more than this many days ago")
      ->check(CLI::Validator(
          [](const std::string& v) {
            // Decimal days only: CLI11 alone reads 0x10 as 16 and answers "abc" with a 300-digit range.
            size_t i = 0, digits = 0;
            while (i < v.size() && v[i] >= '0' && v[i] <= '9') ++i, ++digits;
            if (i < v.size() && v[i] == '.')
              for (++i; i < v.size() && v[i] >= '0' && v[i] <= '9'; ++i) ++digits;
            return digits > 0 && i == v.size() ? std::string()
                                               : "must be a number of days (decimal, >= 0), got '" + v + "'";
          },
          ""));
  gc->add_flag("--keep-quarantine", o->keep_quarantine, "Keep the quarantine table");
  gc->add_flag("--dry-run", o->dry_run, "Say what would be removed, and remove nothing");

  CLI::App* ex = add("export", "Write plans to a bundle file", run_export);
  ex->add_option("file", o->file, "Bundle file to write (never the store itself)")->required();
  ex->add_flag("--force", o->force, "Write over an existing bundle file");
  add_filter(ex);

  CLI::App* im = add("import", "Merge a bundle file into the store (newer existing plans are kept)", run_import);
  im->add_option("file", o->file, "Bundle file to read")->required();
  im->add_flag("--check-env", o->check_env, "Skip plans whose environment does not pass the policy on this GPU");
  im->add_flag("--deep", o->deep, "Also run each plan whose graph is known on this GPU and check its outputs");
  im->add_option("--spec", o->specs, "Spec files giving the graphs of the records to deep-check (with --deep)");

  CLI::App* queue =
      add("queue", "List the graphs queued for re-tuning (by runs that could not use a tuned plan)", run_queue);
  queue->add_flag("--json", o->json, "Machine-readable output (with each graph's spec)");
  queue->add_option("--structure", o->structure, "Only this structure signature (or a prefix of it)");
  queue->add_option("--fingerprint", o->fingerprint, "Only this environment fingerprint key");
  queue->add_flag("--clear", o->clear, "Remove the listed rows instead of printing them");
  CLI::App* queue_add = add_queue_add(queue, o, run);
  queue->callback([run, o, queue_add] {
    if (!queue_add->parsed()) *run = [o] { return run_queue(*o); };
  });

  add_rollout(add, add_filter, o);  // history, candidates, promote, reject, rollback (cmd_plans_rollout.cc)

  CLI::App* retune =
      add("retune", "Tune the queued graphs of this environment on this GPU and store the winners", run_retune);
  retune->add_option("--budget", o->budget_s, "Time budget for the whole run, seconds (0: none)")
      ->check(number_at_least(0));
  retune->add_option("--candidate-budget-ms", o->candidate_budget_ms, "Sampling budget per candidate, ms")
      ->check(positive_number())
      ->capture_default_str();
  retune->add_option("--top-k", o->top_k, "Only the heuristic's first k configurations (quick tuning)")
      ->check(whole_number_at_least(0));
  add_candidate_budget_flags(retune, &o->exhaustive, &o->compile_first, &o->compile_patience);
  add_build_helpers_flag(retune, &o->build_helpers);
  retune
      ->add_option("--rollout", o->rollout,
                   "How a winner replaces an active plan of another configuration: immediate, verify or shadow "
                   "(docs/rollout.md)")
      ->capture_default_str();
  retune->add_flag("--json", o->json, "Machine-readable report");
}

}  // namespace

KILN_REGISTER_COMMAND("plans", add_plans);

}  // namespace kiln::cli
