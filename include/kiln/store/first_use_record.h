// kiln/store/first_use_record.h: a stored first-use verdict (docs/store.md "First-use verdicts"). Before a
// kiln::Planner serves a plan that no tune checked in this environment, it runs the plan once against the
// device reference (PlannerOptions::first_use, docs/runtime.md "First-use verification"); the verdict is kept
// in the store per (structure, shape, engine configuration, environment), so every Planner sharing the store
// checks a configuration once, and one that failed is never served again in that environment.
#pragma once

#include <cstdint>
#include <string>
#include <optional>
#include <vector>
#include "kiln/core/status.h"

namespace kiln {

struct FirstUseRecord {
  std::string structure_sig;
  std::string shape_key;        // may be empty (a graph with no dynamic dim)
  std::string config;           // the plan's identity: its engine configuration ("eng1_k24=35") or chain
  std::string fingerprint_key;  // the environment it was checked in: fingerprint_key() and the Kiln build
                                //   ("<key>/kiln <version> <revision>": a new Kiln may lower it differently)
  bool passed = false;
  std::string summary;  // the numerics gate's summary of the check
  // put_first_use_verdict() fills these.
  int64_t created_at = 0;
  std::string checksum;  // XXH3-128 hex over every other field (docs/store.md)
};

std::string compute_first_use_checksum(const FirstUseRecord& r);

// The first-use verdicts a store keeps (PlanStore implements it).
class FirstUseTable {
 public:
  // Keeps a verdict and returns what is held afterwards: a failed verdict is never replaced, a passing one is.
  virtual StatusOr<FirstUseRecord> put_first_use_verdict(const FirstUseRecord& record) = 0;
  // The verdict for exactly this key, or nullopt; a damaged row is logged, counted corrupt, dropped, absent.
  virtual StatusOr<std::optional<FirstUseRecord>> get_first_use_verdict(const std::string& structure_sig,
                                                                        const std::string& shape_key,
                                                                        const std::string& config,
                                                                        const std::string& fingerprint_key) = 0;
  virtual StatusOr<std::vector<FirstUseRecord>> list_first_use_verdicts() = 0;  // sound ones, by key

 protected:
  FirstUseTable() = default;
  ~FirstUseTable() = default;
};

}  // namespace kiln
