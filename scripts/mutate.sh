#!/usr/bin/env bash
# Mutation check, run before each release (issue 14 item 6): each mutation below is a small, plausible bug,
# one exact text substitution in one file. Each is applied in turn to a copy of the tree at a commit, built
# and run against the host tier; the result per mutation is
#   KILLED       a host test failed (what we want; the report names it)
#   SURVIVED     every test run passed: a test is missing, add one that fails with the bug
#   NOT-APPLIED  the find text does not occur exactly once any more: the code moved, update the row (this is
#                how the script fails instead of rotting silently)
#   NO-BUILD     the mutant does not compile: make the row a plausible bug again
#
#   scripts/mutate.sh [--full] [--list] [--rev REV] [NAME...]
#     NAME...    only these mutations (default: every one)
#     --full     run the whole host tier (ctest -LE gpu) against each mutant; default: only the tests of the
#                layers named in its row (their test binaries are the only ones rebuilt), which is faster
#     --list     print the mutations and exit
#     --rev REV  the commit to mutate (default: HEAD; uncommitted changes are not in the copy)
#   KILN_MUTATE_DIR  where the copy lives between runs (default: build-mutate/, git-ignored): pristine/ (`git
#                    archive` of the commit), tree/ (the copy mutated, third_party/ linked to this checkout's),
#                    build/, and logs/ (the unmutated copy's, and one build and one test log per mutation)
#   KILN_BUILD_JOBS  parallel build jobs (default: the number of cores)
# The first run builds the copy from scratch (as long as scripts/build.sh); later runs are incremental: a
# mutation recompiles its one file and relinks the test binaries it runs. The unmutated copy is built with
# scripts/build.sh and its tests run first; if they fail nothing is mutated (exit 3).
# Exits 0 when every mutation is KILLED, 1 otherwise, 2 on a usage error, 3 when the copy cannot be made,
# built or does not pass unmutated.
set -euo pipefail
# The whole script is read before it runs (braces), so that editing or checking out a new version while
# it runs cannot change what it does halfway.
{
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="${KILN_MUTATE_DIR:-$root/build-mutate}"
tree="$dir/tree" build="$dir/build" logs="$dir/logs"
jobs="${KILN_BUILD_JOBS:-$(nproc)}"
elapsed() { local s=$((SECONDS - $1)); if ((s >= 60)); then echo "$((s / 60))m$((s % 60))s"; else echo "${s}s"; fi; }
log() { printf '[mutate] %s\n' "$*"; }

# ---- The mutations ---------------------------------------------------------------------------------------
# m NAME FILE LAYERS FIND REPLACE: in FILE (relative to the tree) the text FIND, which must occur exactly
# once, becomes REPLACE. LAYERS: whose host tests run without --full (the layer of FILE and those above it
# that exercise it). The comment above each row says which test kills it.
names=() files=() layers=() finds=() replaces=()
m() { names+=("$1"); files+=("$2"); layers+=("$3"); finds+=("$4"); replaces+=("$5"); }

# Issue 14 item 6, the six that went through every host test when it was written:
# tune.Incumbent.EachSideIsJudgedByItsOwnNoise
m incumbent-noise-from-incumbent src/tune/tune_policy.cc "tune" \
  'const double n_c = std::max(std::isfinite(challenger.rel_error) ? challenger.rel_error : 1.0, floor);' \
  'const double n_c = std::max(std::isfinite(incumbent.rel_error) ? incumbent.rel_error : 1.0, floor);'
# store.Store/PlanStoreContract.EmptyStoredChecksumIsCorrupt/sqlite
m store-skips-empty-checksum src/store/record_codec.cc "store runtime" \
  '  if (sum != r.checksum) return "checksum mismatch' \
  '  if (!r.checksum.empty() && sum != r.checksum) return "checksum mismatch'
# store.Store/PlanStoreContract.StoredKeyNotMatchingTheFingerprintIsCorrupt/sqlite
m store-ignores-stored-key src/store/record_codec.cc "store runtime" \
  '  if (row.stored_fingerprint_key != r.fingerprint_key())' \
  '  if (false && row.stored_fingerprint_key != r.fingerprint_key())'
# graph.Signature.OpAttributesThatChangeTheComputationChangeIt, graph.Signature.PinnedReductionAndSdpaNodeLines
m signature-without-causal src/graph/ops/sdpa.cc "graph spec" \
  '  return std::string(" causal=") + (n.sdpa.causal ? "1" : "0") + " attn_scale=" + canonical_number(scale);' \
  '  return std::string(" attn_scale=") + canonical_number(scale);'
# graph.Signature.PinnedReductionAndSdpaNodeLines (the axes are implied by the dims: only the text shows it)
m signature-without-axes src/graph/ops/reduction.cc "graph spec" \
  '  return " axes=" + ints_text(std::vector<int64_t>(n.reduction.axes.begin(), n.reduction.axes.end()));' \
  '  return "";'
# spec.SpecErrors.SdpaOperandShapes
m sdpa-batch-check-skips-v src/graph/ops/sdpa.cc "graph spec" \
  $'  for (size_t i = 1; i < 3; ++i)\n    if (c.in(i).dims[0].value != q[0].value)' \
  $'  for (size_t i = 1; i < 2; ++i)\n    if (c.in(i).dims[0].value != q[0].value)'

# More:
# tune.TunerDecisions.AnIncumbentIsKeptWithinNoiseOnlyWhenItPassesAgain
m tuner-keeps-a-wrong-incumbent src/tune/tuner.cc "tune" \
  'if (eligible[i].identity() == o.incumbent->identity && eligible[i].disposition == Disposition::kPassed)' \
  'if (eligible[i].identity() == o.incumbent->identity)'
# store.EnvPolicy.EachExactFieldFailsWithANamedReason, store.Store/PlanStoreContract.EachExactFieldMakesTheRecordStale/sqlite, ...
m store-accepts-a-stale-fingerprint src/store/env_policy.cc "store runtime" \
  'bool same = rule == FieldRule::kMustMatch ? a.exact == b.exact : a.major == b.major;' \
  'bool same = a.major == b.major;'
# store.Store/PlanStoreContract.PrefersTheExactEnvironmentThenTunedThenNewest/sqlite
m store-prefers-another-environment src/store/sql_plan_store.cc "store runtime" \
  '  if (ea != eb) return ea;' \
  '  if (ea != eb) return eb;'
# runtime.PlannerSplit.NoSumIsCoveredByOverlappingPartsUnlessOff (rows past the caller's, or rows unwritten)
m cover-last-part-not-moved-back src/runtime/source_split.cc "runtime" \
  'if (cover && k + 1 == extents.size()) row = n - e;' \
  'if (cover && k + 1 == extents.size()) row = row;'
# runtime.PlannerSplit.NoSumIsCoveredByOverlappingPartsUnlessOff (an output inside an input's memory runs)
m cover-alias-check-off src/runtime/stopgap_executors.h "runtime" \
  'if (o0 < i0 + in.bytes && i0 < o0 + out.bytes)' \
  'if (o0 < i0 + in.bytes && i0 < o0)'
# runtime.Split.CoversMatchAnExhaustiveSearch
m cover-search-prunes-too-much src/runtime/padding.cc "runtime" \
  'if (sum + ext[i] + static_cast<int64_t>(left - 1) * ext.back() >= best_sum) continue;' \
  'if (sum + ext[i] + static_cast<int64_t>(left - 1) * ext.back() >= best_sum) break;'
# runtime.BucketPolicy.PowersOfTwo
m bucket-pow2-lower-end-off-by-one src/runtime/bucket_policy.cc "runtime" \
  'b.lo = hi == 1 ? 1 : hi / 2 + 1;' \
  'b.lo = hi == 1 ? 1 : hi / 2;'
# runtime.BucketPolicy.RangeEndsAreInclusiveAndRangesMayNotShareOne
m bucket-range-excludes-its-end src/runtime/bucket_policy.cc "runtime" \
  'if (lo <= value && value <= hi) {' \
  'if (lo <= value && value < hi) {'
# runtime.BucketPolicy.RangeEndsAreInclusiveAndRangesMayNotShareOne
m bucket-ranges-may-share-an-end src/runtime/bucket_policy.cc "runtime" \
  'if (r.ranges[i].first <= r.ranges[i - 1].second)' \
  'if (r.ranges[i].first < r.ranges[i - 1].second)'
# validate.ErrorMeasures.TheBandIncludesItsEdge
m gate-band-excludes-its-edge src/validate/gate_math.h "validate tune" \
  '    mismatch = diff > allowed;' \
  '    mismatch = diff >= allowed;'

# store.Store/KernelCachesContract.OnlyTheExactEnvironmentReadsItBack/sqlite (another driver minor shares the key, not the code)
m kernel-cache-any-driver src/store/kernel_caches.cc "store runtime" \
  '  if (judged == KernelCacheJudged::kEverything)' \
  '  if (false && judged == KernelCacheJudged::kEverything)'

# Issue 31 item 5, the audit's four mutations of the gate that went through every host test:
# validate.Gate.LimitsOnKnownDataFollowTheFormulas
m gate-size-limit-doubled src/validate/numerics.cc "validate" \
  '    e.size_limit = kGateSizeFactor * g.sum_expected' \
  '    e.size_limit = 2 * kGateSizeFactor * g.sum_expected'
# validate.Gate.LimitsOnKnownDataFollowTheFormulas (fp16)
m grid-fp16-graded-as-bf16 src/validate/numerics.cc "validate" \
  $'    case DataType::kFloat16:\n      *bits = 10;' \
  $'    case DataType::kFloat16:\n      *bits = 7;'
# validate.Gate.ErrorModelCoefficientsArePinned
m gate-fp8-accumulation-unit src/validate/numerics.cc "validate" \
  'if (fp8) path.unit_roundoff = std::max(path.unit_roundoff, 0x1p-14);' \
  'if (fp8) path.unit_roundoff = std::max(path.unit_roundoff, 0x1p-8);'
# validate.Gate.ErrorModelCoefficientsArePinned
m gate-gelu-allowance-x4 src/validate/numerics.cc "validate" \
  '    case PointwiseMode::kGeluErf: return 0x1p-12;' \
  '    case PointwiseMode::kGeluErf: return 0x1p-10;'

# The audit's list: the gate's statistics (validate.Gate.LimitsOnKnownDataFollowTheFormulas unless named).
# Each factor is changed where numerics.cc uses it: a row that edits numerics.h recompiles half the tree.
m gate-bias-factor src/validate/numerics.cc "validate" \
  '    const double toward = kGateBiasFactor * (g.sum_directed + g.sum_directed_sym) + random;' \
  '    const double toward = 2 * kGateBiasFactor * (g.sum_directed + g.sum_directed_sym) + random;'
m gate-bias-sigmas src/validate/numerics.cc "validate" \
  '    const double random = kGateBiasSigmas * std::sqrt(g.sum_expected) + kGateQuanta * step;' \
  '    const double random = 2 * kGateBiasSigmas * std::sqrt(g.sum_expected) + kGateQuanta * step;'
m gate-quanta src/validate/numerics.cc "validate" \
  '    e.size_limit = kGateSizeFactor * g.sum_expected + kGateQuanta * step * step;' \
  '    e.size_limit = kGateSizeFactor * g.sum_expected + 2 * kGateQuanta * step * step;'
m gate-element-sigmas src/validate/numerics.cc "validate" \
  '  p.elem_sigmas = kGateElementSigmas;' \
  '  p.elem_sigmas = 2 * kGateElementSigmas;'
# validate.Gate.ErrorModelCoefficientsArePinned
m gate-truncation-block src/validate/numerics.cc "validate" \
  'std::ceil(k / static_cast<double>(kGateTruncationBlock))' \
  'std::ceil(k / static_cast<double>(kGateTruncationBlock / 2))'
# validate.Gate.ErrorModelCoefficientsArePinned (the old, wider directed part)
m gate-directed-part-old src/validate/numerics.cc "validate" \
  '  m.dir_coeff = u * blocks / 2.0;' \
  '  m.dir_coeff = u * blocks / std::sqrt(3.0);'
# validate.Gate.AuditUniformScalingAtK100352IsIncorrect, validate.Gate.LimitsOnKnownDataFollowTheFormulas
m gate-bias-two-sided src/validate/numerics.cc "validate" \
  '    const double away = kGateBiasFactor * g.sum_directed_sym + random;' \
  '    const double away = toward;'
# validate.Gate.AuditDroppedTermInOnePercentOfOutputsIsIncorrectAtK100352, validate.Gate.BiasAwayFromZero...
m gate-element-test-ignored src/validate/numerics.cc "validate" \
  '|| !bias_within(e) || !(e.element_ratio <= 1.0)))' \
  '|| !bias_within(e)))'
m gate-element-whole-steps src/validate/gate_math.h "validate" \
  '      const double elem_allowed = unrounded + 0.5 * (ulp + gate_ulp(p, ay + unrounded + 0.5 * ulp));' \
  '      const double elem_allowed = unrounded + ulp + gate_ulp(p, ay + unrounded + 0.5 * ulp);'
m gate-element-directed-dropped src/validate/gate_math.h "validate" \
  'p.elem_sigmas * sqrt(var) + (p.dir_coeff + p.dir_sym_coeff) * s + p.elem_rtol * ay;' \
  'p.elem_sigmas * sqrt(var) + p.elem_rtol * ay;'
m gate-quanta-step-largest src/validate/numerics.cc "validate" \
  'std::min(g.max_ulp, 2.0 * std::sqrt(g.sum_ulp_sq / g.finite_count))' \
  'g.max_ulp'
m gate-expected-without-crossings src/validate/gate_math.h "validate" \
  '      g.sum_expected += var + ulp * sqrt(var);' \
  '      g.sum_expected += var + ulp * ulp;'
# validate.Gate.BiasAwayFromZeroIsAllowedOnlyItsRandomPart
m gate-bias-sign-ignored src/validate/numerics.cc "validate" \
  '  return e.mean_signed_rel < 0 ? -e.mean_signed_rel <= e.bias_limit : e.mean_signed_rel <= e.bias_limit_away;' \
  '  return std::fabs(e.mean_signed_rel) <= e.bias_limit;'

# The audit's list: the dtype grids (validate.Gate.LimitsOnKnownDataFollowTheFormulas)
m grid-fp32-emin src/validate/numerics.cc "validate" \
  $'      *bits = 23;\n      *emin = -126;' \
  $'      *bits = 23;\n      *emin = -149;'
m grid-fp16-emin src/validate/numerics.cc "validate" \
  $'      *bits = 10;\n      *emin = -14;' \
  $'      *bits = 10;\n      *emin = -15;'
m grid-bf16-bits src/validate/numerics.cc "validate" \
  $'      *bits = 7;\n      *emin = -126;' \
  $'      *bits = 8;\n      *emin = -126;'
m grid-e4m3-emin src/validate/numerics.cc "validate" \
  $'      *bits = 3;\n      *emin = -6;' \
  $'      *bits = 3;\n      *emin = -7;'
m grid-e5m2-bits src/validate/numerics.cc "validate" \
  $'      *bits = 2;\n      *emin = -14;' \
  $'      *bits = 3;\n      *emin = -14;'

# The audit's list: the tuner's winner rule (tune.Winner.*, tune.TunerDecisions.*)
m winner-ties-by-workspace-first src/tune/tune_policy.cc "tune" \
  'return std::tie(x.median_ms, x.workspace_bytes, ids[a]) < std::tie(y.median_ms, y.workspace_bytes, ids[b]);' \
  'return std::tie(x.workspace_bytes, x.median_ms, ids[a]) < std::tie(y.workspace_bytes, y.median_ms, ids[b]);'
m winner-any-disposition src/tune/tune_policy.cc "tune" \
  '  return c.disposition == Disposition::kPassed && c.timed() && std::isfinite(c.median_ms);' \
  '  return c.timed() && std::isfinite(c.median_ms);'
m winner-workspace-window-wider src/tune/tune_policy.cc "tune" \
  '    if (c.median_ms > limit) continue;' \
  '    if (c.median_ms > 2 * limit) continue;'

# The audit's list: the Planner's order of sources (runtime.Planner*, runtime.*Source.*)
m planner-store-after-stopgap src/runtime/source_chain.cc "runtime" \
  '    store_after_stopgaps_ = t.is_ok() && std::none_of(' \
  '    store_after_stopgaps_ = true || std::none_of('
m planner-no-dynamic-stopgap src/runtime/source_dynamic.cc "runtime" \
  '  if (state_.static_is_cheap(r.sig.structure)) {' \
  '  if (true) {'
m planner-bucket-farthest src/runtime/source_bucket.cc "runtime" \
  'if (!best || d < best_d || (d == best_d && t.shape_key < best->shape_key)) {' \
  'if (!best || d > best_d || (d == best_d && t.shape_key < best->shape_key)) {'
m planner-segments-skipped src/runtime/source_segments.cc "runtime" \
  '  if (seg.segments.empty()) {' \
  '  if (true) {'

# The fleet's winner rule (docs/fleet.md "Winner changes"): runtime.PlannerJobs.AnotherEnvironmentsWinnerIsNoIncumbent,
# store.Store/PlanStoreContract.PutKeepsEachChangeOfTunedWinner/*
m incumbent-from-another-environment src/runtime/planner_jobs.cc "runtime" \
  '    if (prev && prev->tuned && prev->fingerprint_key() == fingerprint_key(env)) {' \
  '    if (prev && prev->tuned) {'
m winner-change-on-same-config src/store/winner_changes.cc "store" \
  '  if (from == to) return none;' \
  '  if (from != to) return none;'
# The segments the store lacks are queued, at the graph's own shape only: runtime.SegmentsSource.*,
# runtime.PlannerPolicy.ADynamicGraphsSegmentsAreStaticPlansAtEveryShapeAndQueuedAtItsOwnShapeOnly
m segments-queued-at-every-shape src/runtime/source_segments.cc "runtime" \
  '        !o.store_path.empty() && r.shape == r.pg.shape &&' \
  '        !o.store_path.empty() &&'

# The chain's order is data (kiln/runtime/source_chain.h kSourceChain) and the chain is built from it
# (runtime.SourceChain.TheOrderIsWrittenOnce, runtime.SourceChain.TheWalkAsksInTheChainsOrder, runtime.PlannerStopgap.*)
m chain-dynamic-entry-is-bucket include/kiln/runtime/source_chain.h "runtime" \
  '{SourceStep::kDynamic, PlanSource::kDynamic, "dynamic",' \
  '{SourceStep::kBucket, PlanSource::kDynamic, "dynamic",'
# runtime.PlannerStopgap.StoredShapesNeverGetAStopgap, runtime.StoreSource.ExactlyOneOfTheTwoStepsAsks
m chain-store-only-after-stopgaps src/runtime/source_chain.cc "runtime" \
  'steps_.push_back(std::make_unique<StoreSource>(state, tuned_, /*after_stopgaps=*/false));' \
  'steps_.push_back(std::make_unique<StoreSource>(state, tuned_, /*after_stopgaps=*/true));'
# runtime.Planner.SourcesInOrderMemoryStoreBucketHeuristics, runtime.SegmentsSource.*
m chain-heuristics-second src/runtime/source_chain.cc "runtime" \
  'steps_.push_back(std::make_unique<SegmentsSource>(state, *this));' \
  'steps_.push_back(std::make_unique<HeuristicsSource>(state));'
# runtime.SourceChain.TheWalkAsksInTheChainsOrder, runtime.PlannerPadded.*
m chain-padded-step-is-split src/runtime/source_chain.cc "runtime" \
  '        auto padded = std::make_unique<PaddedSource>(state);
        padded_ = padded.get();
        steps_.push_back(std::move(padded));' \
  '        auto padded = std::make_unique<PaddedSource>(state);
        padded_ = padded.get();
        steps_.push_back(std::make_unique<SplitSource>(state));'

# The audit's list: the padding rules (runtime.Padding.*)
m padding-matmul-k-varies src/runtime/padding.cc "runtime" \
  '      if (v(a) == rank(a) - 1) return refuse(' \
  '      if (false && v(a) == rank(a) - 1) return refuse('
m padding-conv-spatial-varies src/runtime/padding.cc "runtime" \
  $'      if (v(x) > 1)\n        return refuse(where + ": " + name(x) + " varies in spatial "' \
  $'      if (v(x) > 2)\n        return refuse(where + ": " + name(x) + " varies in spatial "'
m padding-norm-axis-varies src/runtime/padding.cc "runtime" \
  '      if (v(x) > 0) return refuse(where + ": " + name(x) + " varies in " + dim_text(v(x)) + ", a normalized axis");' \
  '      if (v(x) > 1) return refuse(where + ": " + name(x) + " varies in " + dim_text(v(x)) + ", a normalized axis");'
m padding-reduced-axis-varies src/runtime/padding.cc "runtime" \
  '      if (v(x) >= 0 && std::find(n.reduction.axes.begin()' \
  '      if (false && v(x) >= 0 && std::find(n.reduction.axes.begin()'
m padding-sdpa-sequence-varies src/runtime/padding.cc "runtime" \
  $'        if (v(t) > 0)\n          return refuse(where + ": " + name(t) + " varies in " + dim_text(v(t)) + " (only the batch dim 0)");' \
  $'        if (v(t) > 2)\n          return refuse(where + ": " + name(t) + " varies in " + dim_text(v(t)) + " (only the batch dim 0)");'
m padding-wgrad-batch-varies src/runtime/padding.cc "runtime" \
  '        if (v(t) >= 0) return refuse(where + ": the weight gradient sums over ' \
  '        if (v(t) > 0) return refuse(where + ": the weight gradient sums over '

# ---- Options -----------------------------------------------------------------------------------------------
full=0 list=0 rev=HEAD only=()
while (($#)); do
  case "$1" in
    --full) full=1; shift;;
    --list) list=1; shift;;
    --rev) rev="${2:?--rev needs a commit}"; shift 2;;
    -h|--help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0;;
    -*) echo "mutate.sh: unknown option '$1' (known: --full, --list, --rev REV)" >&2; exit 2;;
    *) only+=("$1"); shift;;
  esac
done
if ((list)); then
  for i in "${!names[@]}"; do printf '%-36s %-30s tests: %s\n' "${names[$i]}" "${files[$i]}" "${layers[$i]}"; done
  exit 0
fi
picked=()
if ((${#only[@]})); then
  for n in "${only[@]}"; do
    found=""
    for i in "${!names[@]}"; do [ "${names[$i]}" = "$n" ] && found=$i; done
    [ -n "$found" ] || { echo "mutate.sh: no mutation '$n' (--list shows them)" >&2; exit 2; }
    picked+=("$found")
  done
else
  picked=("${!names[@]}")
fi

# ---- The copy ----------------------------------------------------------------------------------------------
# pristine/ is `git archive` of the commit, made afresh; tree/ is made equal to it, rewriting only the files
# that differ (the others keep their times, so the build stays incremental; a mutation left behind by an
# interrupted run is undone too). No git worktree: the repository is not touched.
commit="$(git -C "$root" rev-parse --verify "$rev^{commit}")" || { echo "mutate.sh: '$rev' is not a commit" >&2; exit 2; }
short="$(git -C "$root" rev-parse --short=12 "$commit")"
mkdir -p "$dir/tree" "$logs"
rm -rf "$dir/pristine"; mkdir -p "$dir/pristine"
git -C "$root" archive "$commit" | tar -x -C "$dir/pristine" || { log "cannot unpack $rev"; exit 3; }
python3 - "$dir/pristine" "$tree" <<'EOF' || { log "cannot update the copy $tree"; exit 3; }
import filecmp, os, shutil, sys
src, dst = sys.argv[1], sys.argv[2]
want, changed = set(), 0
for base, dirs, files in os.walk(src):
    rel = os.path.relpath(base, src)
    os.makedirs(os.path.join(dst, rel), exist_ok=True)
    for f in files:
        r = os.path.normpath(os.path.join(rel, f))
        want.add(r)
        a, b = os.path.join(src, r), os.path.join(dst, r)
        if not os.path.isfile(b) or os.path.islink(b) or not filecmp.cmp(a, b, shallow=False):
            if os.path.lexists(b): os.remove(b)
            if os.path.islink(a):
                os.symlink(os.readlink(a), b)
            else:  # the time now, not the archive's (the commit's): ninja must see it as newer
                shutil.copyfile(a, b); shutil.copymode(a, b)
            changed += 1
removed = 0
for base, dirs, files in os.walk(dst):
    rel = os.path.relpath(base, dst)
    if rel == ".": dirs[:] = [d for d in dirs if d != "third_party"]
    for f in files:
        r = os.path.normpath(os.path.join(rel, f))
        if r not in want and r != "third_party":
            os.remove(os.path.join(dst, r)); removed += 1
print(f"[mutate] copy of {len(want)} files: {changed} written, {removed} removed")
EOF
[ -e "$tree/third_party" ] || ln -s "$root/third_party" "$tree/third_party"
log "copy at $short $(git -C "$root" log -1 --format=%s "$commit" | cut -c1-90)"

# Host test binaries: one per layer with a *_test.cc that is not a *_gpu_test.cc (tests/CMakeLists.txt).
all_layers=()
for d in "$tree"/src/*/; do
  l="$(basename "$d")"
  compgen -G "$d*_test.cc" >/dev/null || continue
  for f in "$d"*_test.cc; do [[ "$f" == *_gpu_test.cc ]] || { all_layers+=("$l"); break; }; done
done
targets_of() { local l; printf '%s\n' kiln; for l in "$@"; do printf '%s_test\n' "$l"; done; }
# run_tests LOG LAYER...: the host tests of those layers (all of them with --full); 0 when all pass.
run_tests() {
  local out="$1"; shift
  local sel=()
  if ((full == 0)); then sel=(-R "^($(IFS='|'; echo "$*"))\."); fi
  ctest --test-dir "$build" -LE gpu "${sel[@]}" --no-tests=error -j"$jobs" --timeout 600 >"$out" 2>&1
}

t=$SECONDS
log "building the unmutated copy ($build)"
# build.sh's own compact progress, indented (a first build takes as long as scripts/build.sh's).
if ! KILN_GIT_REVISION="$short" KILN_BUILD_DIR="$build" KILN_BUILD_JOBS="$jobs" "$tree/scripts/build.sh" \
    -DKILN_BUILD_BENCHMARKS=OFF 2>&1 | tee "$logs/baseline.build.log" | sed 's/^/  /'; then
  log "the unmutated copy does not build (log: $logs/baseline.build.log)"; exit 3
fi
used=()
for i in "${picked[@]}"; do used+=(${layers[$i]}); done
mapfile -t used < <(printf '%s\n' "${used[@]}" | sort -u)
((full)) && used=("${all_layers[@]}")
if ! run_tests "$logs/baseline.test.log" "${used[@]}"; then
  tail -30 "$logs/baseline.test.log"; log "the unmutated copy fails its tests (log: $logs/baseline.test.log)"; exit 3
fi
log "unmutated copy built and passing ($(grep -Eo '[0-9]+% tests passed, .*' "$logs/baseline.test.log" | tail -1); $(elapsed $t))"

# ---- The mutations -----------------------------------------------------------------------------------------
current=""
restore() { [ -z "$current" ] || cp "$dir/pristine/$current" "$tree/$current"; current=""; }
trap restore EXIT

# apply FILE: FIND -> REPLACE (from the environment), exactly once; prints the count otherwise.
apply() {
  python3 - "$tree/$1" <<'EOF'
import os, sys
path = sys.argv[1]
text = open(path, encoding="utf-8").read()
n = text.count(os.environ["MUTATE_FIND"])
if n != 1:
    print(f"the find text occurs {n} times")
    sys.exit(1)
open(path, "w", encoding="utf-8").write(text.replace(os.environ["MUTATE_FIND"], os.environ["MUTATE_REPLACE"]))
EOF
}

results=() bad=0
for i in "${picked[@]}"; do
  name="${names[$i]}" file="${files[$i]}"
  t=$SECONDS
  if [ ! -f "$tree/$file" ]; then
    why="$file does not exist"; status=NOT-APPLIED
  elif ! why="$(MUTATE_FIND="${finds[$i]}" MUTATE_REPLACE="${replaces[$i]}" apply "$file")"; then
    status=NOT-APPLIED
  else
    current="$file"
    if ((full)); then mapfile -t targets < <(targets_of "${all_layers[@]}"); else
      mapfile -t targets < <(targets_of ${layers[$i]}); fi
    if ! ninja -C "$build" -j"$jobs" "${targets[@]}" >"$logs/$name.build.log" 2>&1; then
      status=NO-BUILD why="log: $logs/$name.build.log"
    elif run_tests "$logs/$name.test.log" ${layers[$i]}; then
      status=SURVIVED why="$(grep -Eo '[0-9]+% tests passed, .*' "$logs/$name.test.log" | tail -1)"
    else
      status=KILLED
      # CTest's closing list: "  123 - layer.Suite.Test (Failed)".
      mapfile -t failed < <(sed -n '/The following tests FAILED:/,$p' "$logs/$name.test.log" |
                            sed -nE 's/^[[:space:]]*[0-9]+ - ([^ ]+) .*/\1/p')
      why="by ${failed[0]:-(see $logs/$name.test.log)}"
      ((${#failed[@]} <= 1)) || why+=" (+$((${#failed[@]} - 1)) more)"
    fi
    restore
  fi
  [ "$status" = KILLED ] || bad=1
  line="$(printf '%-11s %-36s %s' "$status" "$name" "$why")"
  log "$line ($(elapsed $t))"
  results+=("$line")
done

log "summary (${#picked[@]} mutations of $short, $( ((full)) && echo "the whole host tier" || echo "their layers' host tests")):"
printf '  %s\n' "${results[@]}"
if ((bad)); then log "not every mutation was killed"; exit 1; fi
log "every mutation was killed"
exit 0
}
