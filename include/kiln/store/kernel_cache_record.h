// kiln/store/kernel_cache_record.h: a structure's cuDNN kernel cache, kept in the plan store (docs/store.md
// "Kernel caches"). kiln::Planner builds a new shape of a graph with dynamic dims in cuDNN's dynamic-shape
// mode with one kernel cache per structure, so a runtime-compiled kernel is compiled once per structure
// (about 1 s on the H200 for a matmul epilogue) and not once per shape. Kept here, a new process loads the
// compiled kernels with the structure's first dynamic build instead of compiling them again.
//
// A kernel cache holds machine code for one GPU, built by one cuDNN and driver: it is only ever read back
// in exactly the environment that wrote it (kernel_cache_environment_matches, whatever the caller's EnvPolicy), and
// a row whose checksum, fingerprint or size fails is a logged miss, dropped (unless read-only).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kiln/core/fingerprint.h"
#include "kiln/core/status.h"

namespace kiln {

// The most cache text one row may hold: a larger cache is not stored (it is compiled again instead).
constexpr int64_t kMaxKernelCacheBytes = int64_t{256} << 20;

struct KernelCacheRecord {
  std::string structure_sig;
  EnvFingerprint fingerprint;  // the environment that compiled it
  std::string cache_json;      // cuDNN's JSON representation (kiln/lower/lower.h DynamicKernelCache::to_json)
  std::string graph_name;      // for people
  // put_kernel_cache() fills these.
  int64_t created_at = 0;
  std::string checksum;  // XXH3-128 hex over every other field

  std::string fingerprint_key() const { return kiln::fingerprint_key(fingerprint); }
};

std::string compute_kernel_cache_checksum(const KernelCacheRecord& r);
// Whether a cache compiled in `kept` may serve `current`: the same GPU name and SM version, and exactly the
// same driver, CUDA runtime, cuDNN and cuDNN Frontend versions (not only their majors, as the key has).
bool kernel_cache_environment_matches(const EnvFingerprint& kept, const EnvFingerprint& current);

// Which of those fields a judgement of a kept cache can look at (`kiln plans ls`, `kiln plans gc --stale`):
// all of them against this machine's GPU; all but the driver against a recorded device profile (it records
// none); the libraries alone (CUDA runtime, cuDNN, cuDNN Frontend) on a machine without a GPU.
enum class KernelCacheJudged { kEverything, kWithoutDriver, kLibrariesOnly };

// One line per field, of those `judged` covers, that keeps a cache compiled in `kept` from serving
// `current` ("cudnn_version: kept 9.19.0, current 9.20.0 (must match exactly)"); empty when none does.
// With kEverything, empty exactly when kernel_cache_environment_matches.
// How messages name a kept cache: "<structure_sig, 12>/<fingerprint_key, 12>"; a row whose structure or key
// column is NULL (or empty), shown "?", is named by its rowid as well: "?/? (rowid 77)".
std::string kernel_cache_display_name(const std::string& structure_sig, const std::string& fingerprint_key,
                                      int64_t rowid);

std::vector<std::string> kernel_cache_mismatches(const EnvFingerprint& kept, const EnvFingerprint& current,
                                                 KernelCacheJudged judged = KernelCacheJudged::kEverything);

// What `kiln plans ls`-like listings show of a kept cache (the text itself is not read, nor its checksum:
// PlanStore::verify checks those).
struct KernelCacheInfo {
  int64_t rowid = 0;  // the row's SQLite rowid: names a row whose key columns are NULL
  std::string structure_sig;
  std::string fingerprint_key;  // as stored
  std::string graph_name;
  int64_t bytes = 0;
  std::optional<int64_t> created_at;  // unix seconds; none when the column holds no integer (NULL, damaged)
  EnvFingerprint fingerprint;         // the environment that compiled it, when `problem` is empty
  // "" when the row's fingerprint reads back and gives its stored key; else what is wrong (the row is
  // damaged: PlanStore::verify reports it, and get_kernel_cache drops it).
  std::string problem;
};

// The kernel caches a store keeps (PlanStore implements it).
class KernelCacheTable {
 public:
  // Replaces a structure's cache for its environment. InvalidArgument: empty or over kMaxKernelCacheBytes.
  virtual StatusOr<KernelCacheRecord> put_kernel_cache(const KernelCacheRecord& record) = 0;
  // The cache for exactly `current`'s environment (no policy relaxes it), or nullopt; a damaged row is logged,
  // counted corrupt, dropped (unless read-only) and absent.
  virtual StatusOr<std::optional<KernelCacheRecord>> get_kernel_cache(const std::string& structure_sig,
                                                                      const EnvFingerprint& current) = 0;
  virtual StatusOr<int64_t> remove_kernel_cache(const std::string& structure_sig,
                                                const std::string& fingerprint_key) = 0;  // rows gone (0 or 1)
  virtual StatusOr<std::vector<KernelCacheInfo>> list_kernel_caches() = 0;                // without the texts, by key

 protected:
  KernelCacheTable() = default;
  ~KernelCacheTable() = default;
};

}  // namespace kiln
