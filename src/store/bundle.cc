// Plan bundles: one SQLite file holding a JSON manifest and the records (docs/store.md "Bundles").
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

#include "kiln/core/read_file.h"
#include "kiln/core/atomic_file.h"
#include "kiln/core/hash.h"
#include "kiln/core/log.h"
#include "store/sqlite_plan_store.h"
#include "store/extra_tables.h"
#include "store/record_codec.h"
#include "store/schema_check.h"
#include "store/sqlite_util.h"

namespace kiln {

using store::DbPtr;
using store::exec;
using store::RowRead;
using store::Stmt;
using store::Txn;

namespace {

constexpr const char* kBundleFormat = "kiln-plan-bundle";
constexpr int kBundleVersion = 1;

struct ManifestEntry {
  std::string structure_sig, shape_key, fingerprint_key, checksum;
};

std::string entry_key(const std::string& sig, const std::string& shape, const std::string& fp) {
  return sig + '\x1f' + shape + '\x1f' + fp;
}

// Covers every record through its checksum, in manifest order.
std::string bundle_checksum(const std::vector<ManifestEntry>& entries) {
  std::string canon = "kiln-plan-bundle/v1\n";
  for (const auto& e : entries)
    canon += e.structure_sig + '\t' + e.shape_key + '\t' + e.fingerprint_key + '\t' + e.checksum + '\n';
  return stable_hash128_hex(canon);
}

std::string insert_sql(const char* table, const char* verb) { return store::plans_table().insert_sql(verb, table); }

}  // namespace

StatusOr<ExportReport> SqlitePlanStore::export_bundle(const std::string& bundle_path, const ExportOptions& options) {
  FileWriteOptions fo;
  fo.overwrite = options.overwrite;
  fo.what = "bundle";
  fo.protected_paths = database_files();
  fo.protected_what = "the plan store this export reads (" + path_ + ")";
  KILN_RETURN_IF_ERROR(check_destination(bundle_path, fo));

  ExportReport out;
  auto write = [&](const std::string& tmp) -> Status {
    sqlite3* raw = nullptr;
    int rc = sqlite3_open_v2(tmp.c_str(), &raw, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr);
    DbPtr bundle(raw);
    if (rc != SQLITE_OK) return store::sqlite_status(raw, rc, "cannot create bundle " + tmp);
    KILN_RETURN_IF_ERROR(exec(raw, "PRAGMA journal_mode=DELETE"));
    KILN_RETURN_IF_ERROR(exec(raw, "BEGIN"));
    KILN_RETURN_IF_ERROR(exec(raw, "CREATE TABLE bundle_manifest(json TEXT NOT NULL)"));
    KILN_RETURN_IF_ERROR(exec(raw, store::plans_table_sql("plans").c_str()));
    KILN_RETURN_IF_ERROR(exec(raw, store::graph_spec_codec().table.create_sql().c_str()));
    KILN_RETURN_IF_ERROR(exec(raw, store::fusion_record_codec().table.create_sql().c_str()));
    KILN_ASSIGN_OR_RETURN(Stmt ins, Stmt::prepare(raw, insert_sql("plans", "INSERT")));

    std::vector<ManifestEntry> entries;
    std::vector<ManifestEntry> graph_specs;  // fingerprint_key unused
    std::vector<ManifestEntry> fusion_records;
    std::map<std::string, EnvFingerprint> fingerprints;
    {
      std::lock_guard<std::mutex> lock(mu_);
      KILN_ASSIGN_OR_RETURN(
          Stmt st, Stmt::prepare(db_, "SELECT " + store::record_columns() + " FROM plans" + store::kFilterWhere +
                                          " ORDER BY structure_sig, shape_key, fingerprint_key"));
      store::bind_filter(st, options.filter);
      while (true) {
        KILN_ASSIGN_OR_RETURN(bool row, st.step());
        if (!row) break;
        RowRead r = store::read_record(st, 0);
        std::string problem = store::record_problem(r);
        if (!problem.empty())
          return corruption("cannot export corrupt record " +
                            store::record_name(r.record.structure_sig, r.record.shape_key, r.stored_fingerprint_key) +
                            ": " + problem + " (run `kiln plans verify --quarantine`)");
        store::bind_record(ins, 1, r.record);
        KILN_RETURN_IF_ERROR(ins.run());
        KILN_RETURN_IF_ERROR(ins.reset());
        entries.push_back({r.record.structure_sig, r.record.shape_key, r.stored_fingerprint_key, r.record.checksum});
        fingerprints.emplace(r.stored_fingerprint_key, r.record.fingerprint);
      }
      // The graph specs of the exported (structure, shape) keys travel with them; a damaged one stays behind.
      KILN_ASSIGN_OR_RETURN(Stmt gs,
                            Stmt::prepare(db_, std::string("SELECT ") + store::graph_spec_codec().table.column_list() +
                                                   " FROM graph_specs WHERE structure_sig=?1 AND shape_key=?2"));
      KILN_ASSIGN_OR_RETURN(Stmt gins, Stmt::prepare(raw, std::string("INSERT OR IGNORE INTO graph_specs(") +
                                                              store::graph_spec_codec().table.column_list() +
                                                              ") VALUES (?1,?2,?3,?4,?5,?6)"));
      std::set<std::pair<std::string, std::string>> done;
      for (const auto& e : entries) {
        if (!done.insert({e.structure_sig, e.shape_key}).second) continue;
        gs.bind(1, e.structure_sig).bind(2, e.shape_key);
        KILN_ASSIGN_OR_RETURN(bool row, gs.step());
        GraphSpecEntry spec;
        std::string problem = row ? store::graph_spec_codec().read(gs, 0, &spec) : std::string();
        KILN_RETURN_IF_ERROR(gs.reset());
        if (!row) continue;
        if (!problem.empty()) {
          KILN_LOG(kWarn, "export: graph spec " << e.structure_sig.substr(0, 12) << "/" << e.shape_key
                                                << " left out: " << problem);
          continue;
        }
        store::graph_spec_codec().bind(gins, 1, spec);
        KILN_RETURN_IF_ERROR(gins.run());
        KILN_RETURN_IF_ERROR(gins.reset());
        graph_specs.push_back({spec.structure_sig, spec.shape_key, "", spec.checksum});
      }
      // The fusion decisions of the exported records travel with them, and so do their parts' records (same
      // environment), so that the service that imports the bundle runs the chain the tuning chose. A damaged
      // decision stays behind (the fused plan then serves).
      KILN_ASSIGN_OR_RETURN(bool has_fusion, store::table_exists(db_, "fusion_decisions"));
      if (has_fusion) {
        KILN_ASSIGN_OR_RETURN(
            Stmt fs, Stmt::prepare(db_, std::string("SELECT ") + store::fusion_record_codec().table.column_list() +
                                            " FROM fusion_decisions WHERE structure_sig=?1 AND "
                                            "shape_key=?2 AND fingerprint_key=?3"));
        KILN_ASSIGN_OR_RETURN(Stmt fins, Stmt::prepare(raw, std::string("INSERT OR IGNORE INTO fusion_decisions(") +
                                                                store::fusion_record_codec().table.column_list() +
                                                                ") VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12)"));
        KILN_ASSIGN_OR_RETURN(Stmt part_st,
                              Stmt::prepare(db_, "SELECT " + store::record_columns() +
                                                     " FROM plans WHERE structure_sig=?1 AND shape_key=?2 AND "
                                                     "fingerprint_key=?3"));
        std::set<std::string> exported;
        for (const auto& e : entries) exported.insert(entry_key(e.structure_sig, e.shape_key, e.fingerprint_key));
        const size_t fused_count = entries.size();  // parts appended below are not asked for decisions
        for (size_t i = 0; i < fused_count; ++i) {
          const ManifestEntry e = entries[i];
          fs.bind(1, e.structure_sig).bind(2, e.shape_key).bind(3, e.fingerprint_key);
          KILN_ASSIGN_OR_RETURN(bool row, fs.step());
          FusionRecord fr;
          std::string problem = row ? store::fusion_record_codec().read(fs, 0, &fr) : std::string();
          KILN_RETURN_IF_ERROR(fs.reset());
          if (!row) continue;
          if (!problem.empty()) {
            KILN_LOG(kWarn, "export: fusion decision "
                                << store::record_name(e.structure_sig, e.shape_key, e.fingerprint_key)
                                << " left out: " << problem);
            continue;
          }
          for (const FusionPartRef& p : fr.parts) {
            if (!exported.insert(entry_key(p.structure_sig, p.shape_key, e.fingerprint_key)).second) continue;
            part_st.bind(1, p.structure_sig).bind(2, p.shape_key).bind(3, e.fingerprint_key);
            KILN_ASSIGN_OR_RETURN(bool prow, part_st.step());
            if (prow) {
              RowRead r = store::read_record(part_st, 0);
              std::string pp = store::record_problem(r);
              if (!pp.empty())
                return corruption("cannot export corrupt record " +
                                  store::record_name(p.structure_sig, p.shape_key, e.fingerprint_key) + " (part '" +
                                  p.name + "' of an unfused chain): " + pp + " (run `kiln plans verify --quarantine`)");
              store::bind_record(ins, 1, r.record);
              KILN_RETURN_IF_ERROR(ins.run());
              KILN_RETURN_IF_ERROR(ins.reset());
              entries.push_back(
                  {r.record.structure_sig, r.record.shape_key, r.stored_fingerprint_key, r.record.checksum});
            }
            KILN_RETURN_IF_ERROR(part_st.reset());
          }
          store::fusion_record_codec().bind(fins, 1, fr);
          KILN_RETURN_IF_ERROR(fins.run());
          KILN_RETURN_IF_ERROR(fins.reset());
          fusion_records.push_back({fr.structure_sig, fr.shape_key, fr.fingerprint_key(), fr.checksum});
        }
      }
    }

    nlohmann::ordered_json m;
    m["format"] = kBundleFormat;
    m["bundle_version"] = kBundleVersion;
    m["schema_version"] = kStoreSchemaVersion;
    m["created_at"] = store::unix_now();
    m["created_by"] = store::user_at_host();
    m["record_count"] = entries.size();
    nlohmann::ordered_json fps = nlohmann::ordered_json::array();
    for (const auto& [key, f] : fingerprints) {
      nlohmann::ordered_json e;
      e["key"] = key;
      e["fingerprint"] = nlohmann::ordered_json::parse(fingerprint_to_json(f), nullptr, false);
      fps.push_back(e);
      out.fingerprint_keys.push_back(key);
    }
    m["fingerprints"] = fps;
    nlohmann::ordered_json recs = nlohmann::ordered_json::array();
    for (const auto& e : entries)
      recs.push_back({{"structure_sig", e.structure_sig},
                      {"shape_key", e.shape_key},
                      {"fingerprint_key", e.fingerprint_key},
                      {"checksum", e.checksum}});
    m["records"] = recs;
    m["bundle_checksum"] = bundle_checksum(entries);
    // Graph specs carry their own checksums (each covers its key and text); listed here so that a missing or
    // extra one is caught. Not part of bundle_checksum: bundles without them stay valid.
    nlohmann::ordered_json specs = nlohmann::ordered_json::array();
    for (const auto& g : graph_specs)
      specs.push_back({{"structure_sig", g.structure_sig}, {"shape_key", g.shape_key}, {"checksum", g.checksum}});
    m["graph_specs"] = specs;
    out.graph_specs = static_cast<int64_t>(graph_specs.size());
    // Fusion decisions, likewise (each has its checksum), outside bundle_checksum.
    nlohmann::ordered_json fusions = nlohmann::ordered_json::array();
    for (const auto& f : fusion_records)
      fusions.push_back({{"structure_sig", f.structure_sig},
                         {"shape_key", f.shape_key},
                         {"fingerprint_key", f.fingerprint_key},
                         {"checksum", f.checksum}});
    m["fusion_records"] = fusions;
    out.fusion_records = static_cast<int64_t>(fusion_records.size());
    KILN_ASSIGN_OR_RETURN(Stmt man, Stmt::prepare(raw, "INSERT INTO bundle_manifest(json) VALUES (?1)"));
    man.bind(1, m.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
    KILN_RETURN_IF_ERROR(man.run());
    KILN_RETURN_IF_ERROR(exec(raw, "COMMIT"));
    out.records = static_cast<int64_t>(entries.size());
    return Status::ok();
  };
  Status s = write_file_atomically(bundle_path, fo, write);
  if (!s.is_ok()) return s.with_context("exporting to " + bundle_path);
  return out;
}

namespace {

struct BundleContents {
  std::vector<PlanRecord> records;
  std::vector<GraphSpecEntry> graph_specs;
  std::vector<FusionRecord> fusion_records;
};

// Reads and checks a whole bundle; Corruption naming the bundle and the first bad record.
StatusOr<BundleContents> read_bundle(const std::string& path, const PlanValidator& validator) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(path, ec)) return not_found("bundle " + path + " does not exist");
  if (fs::is_directory(path, ec)) return invalid_argument("bundle " + path + " is a folder, not a bundle file");
  // A FIFO would block SQLite's open until a writer comes, and a device (/dev/zero) is no bundle: refused as
  // every other reader of a named file refuses them (bad input, before anything is opened).
  ReadFileOptions kind;
  kind.what = "bundle";
  KILN_RETURN_IF_ERROR(check_readable_file(path, kind));
  sqlite3* raw = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &raw, SQLITE_OPEN_READONLY, nullptr);
  DbPtr db(raw);
  if (rc != SQLITE_OK) return store::sqlite_status(raw, rc, "cannot open bundle " + path);
  sqlite3_extended_result_codes(raw, 1);
  const std::string what = "bundle " + path;

  StatusOr<Stmt> mst = Stmt::prepare(raw, "SELECT json FROM bundle_manifest");
  if (!mst.is_ok()) {
    if (mst.status().message().find("not a database") != std::string::npos ||
        mst.status().code() == StatusCode::kCorruption)
      return corruption(what + " is not a Kiln plan bundle (not a SQLite file, or damaged)");
    return corruption(what + " has no manifest (not a Kiln plan bundle): " + mst.status().message());
  }
  KILN_ASSIGN_OR_RETURN(bool has_row, mst->step());
  if (!has_row) return corruption(what + ": the manifest is empty");
  nlohmann::json m = nlohmann::json::parse(mst->text(0), nullptr, /*allow_exceptions=*/false);
  if (m.is_discarded() || !m.is_object()) return corruption(what + ": the manifest is not valid JSON");

  std::vector<ManifestEntry> entries;
  std::map<std::string, std::string> listed_specs;    // entry_key(sig, shape, "") -> checksum
  std::map<std::string, std::string> listed_fusions;  // entry_key(sig, shape, fp) -> checksum
  std::string declared_sum;
  int64_t declared_count = -1;
  try {
    if (m.value("format", std::string()) != kBundleFormat)
      return corruption(what + ": not a Kiln plan bundle manifest");
    int bv = m.at("bundle_version").get<int>();
    if (bv > kBundleVersion)
      return newer_version(what + " has bundle version " + std::to_string(bv) + ", newer than this Kiln understands (" +
                           std::to_string(kBundleVersion) +
                           "): it was made by a newer Kiln; upgrade Kiln to import it");
    int sv = m.at("schema_version").get<int>();
    if (sv > kStoreSchemaVersion)
      return newer_version(what + " has store schema version " + std::to_string(sv) +
                           ", newer than this Kiln understands (" + std::to_string(kStoreSchemaVersion) +
                           "): it was made by a newer Kiln; upgrade Kiln to import it");
    declared_count = m.at("record_count").get<int64_t>();
    declared_sum = m.at("bundle_checksum").get<std::string>();
    for (const auto& e : m.at("records"))
      entries.push_back({e.at("structure_sig").get<std::string>(), e.at("shape_key").get<std::string>(),
                         e.at("fingerprint_key").get<std::string>(), e.at("checksum").get<std::string>()});
    if (m.contains("graph_specs"))
      for (const auto& e : m.at("graph_specs"))
        listed_specs[entry_key(e.at("structure_sig").get<std::string>(), e.at("shape_key").get<std::string>(), "")] =
            e.at("checksum").get<std::string>();
    if (m.contains("fusion_records"))
      for (const auto& e : m.at("fusion_records"))
        listed_fusions[entry_key(e.at("structure_sig").get<std::string>(), e.at("shape_key").get<std::string>(),
                                 e.at("fingerprint_key").get<std::string>())] = e.at("checksum").get<std::string>();
  } catch (const std::exception& e) {
    return corruption(what + ": malformed manifest: " + e.what());
  }
  if (declared_count != static_cast<int64_t>(entries.size()))
    return corruption(what + ": the manifest says " + std::to_string(declared_count) + " records but lists " +
                      std::to_string(entries.size()));
  if (bundle_checksum(entries) != declared_sum)
    return corruption(what + ": the manifest's bundle checksum does not match");
  std::map<std::string, std::string> listed;
  for (const auto& e : entries) listed[entry_key(e.structure_sig, e.shape_key, e.fingerprint_key)] = e.checksum;

  // The tables are the ones Kiln writes (not views, no column missing); graph_specs may be absent (older
  // bundles), plans may not.
  for (const auto& [table, sql, required] :
       {std::tuple<const char*, std::string, bool>{"plans", store::plans_table_sql("plans"), true},
        std::tuple<const char*, std::string, bool>{"graph_specs", store::graph_spec_codec().table.create_sql(), false},
        std::tuple<const char*, std::string, bool>{"fusion_decisions", store::fusion_record_codec().table.create_sql(),
                                                   false}}) {
    Status t = store::check_table_schema(raw, table, sql, required);
    if (!t.is_ok()) return Status(t.code(), what + ": " + t.message());
  }

  BundleContents out;
  std::set<std::string> seen;
  KILN_ASSIGN_OR_RETURN(Stmt st, Stmt::prepare(raw, "SELECT " + store::record_columns() + " FROM plans"));
  while (true) {
    StatusOr<bool> row = st.step();
    if (!row.is_ok()) return corruption(what + ": cannot read its records: " + row.status().message());
    if (!*row) break;
    RowRead r = store::read_record(st, 0);
    std::string name = store::record_name(r.record.structure_sig, r.record.shape_key, r.stored_fingerprint_key);
    std::string problem = store::record_problem(r);
    if (!problem.empty()) return corruption(what + ": record " + name + ": " + problem);
    std::string key = entry_key(r.record.structure_sig, r.record.shape_key, r.stored_fingerprint_key);
    auto it = listed.find(key);
    if (it == listed.end()) return corruption(what + ": record " + name + " is not in the manifest");
    if (it->second != r.record.checksum)
      return corruption(what + ": record " + name + ": checksum differs from the manifest's");
    Status v = store::run_validator(validator, r.record);
    if (!v.is_ok()) return corruption(what + ": record " + name + ": validator refused the plan: " + v.message());
    seen.insert(key);
    out.records.push_back(std::move(r.record));
  }
  for (const auto& e : entries)
    if (!seen.count(entry_key(e.structure_sig, e.shape_key, e.fingerprint_key)))
      return corruption(what + ": record " + store::record_name(e.structure_sig, e.shape_key, e.fingerprint_key) +
                        " is listed in the manifest but missing");

  // Graph specs (bundles written before they existed have no table and list none).
  KILN_ASSIGN_OR_RETURN(bool has_specs, store::table_exists(raw, "graph_specs"));
  std::set<std::string> seen_specs;
  if (has_specs) {
    KILN_ASSIGN_OR_RETURN(Stmt gs,
                          Stmt::prepare(raw, std::string("SELECT ") + store::graph_spec_codec().table.column_list() +
                                                 " FROM graph_specs"));
    while (true) {
      StatusOr<bool> row = gs.step();
      if (!row.is_ok()) return corruption(what + ": cannot read its graph specs: " + row.status().message());
      if (!*row) break;
      GraphSpecEntry spec;
      std::string problem = store::graph_spec_codec().read(gs, 0, &spec);
      std::string name = gs.text(0).substr(0, 12) + "/" + gs.text(1);
      if (!problem.empty()) return corruption(what + ": graph spec " + name + ": " + problem);
      std::string key = entry_key(spec.structure_sig, spec.shape_key, "");
      auto it = listed_specs.find(key);
      if (it == listed_specs.end()) return corruption(what + ": graph spec " + name + " is not in the manifest");
      if (it->second != spec.checksum)
        return corruption(what + ": graph spec " + name + ": checksum differs from the manifest's");
      seen_specs.insert(key);
      out.graph_specs.push_back(std::move(spec));
    }
  }
  for (const auto& [key, sum] : listed_specs)
    if (!seen_specs.count(key)) {
      std::string sig = key.substr(0, key.find('\x1f'));
      return corruption(what + ": graph spec " + sig.substr(0, 12) + " is listed in the manifest but missing");
    }

  // Fusion decisions (bundles written before they existed have no table and list none).
  KILN_ASSIGN_OR_RETURN(bool has_fusions, store::table_exists(raw, "fusion_decisions"));
  std::set<std::string> seen_fusions;
  if (has_fusions) {
    KILN_ASSIGN_OR_RETURN(Stmt fs,
                          Stmt::prepare(raw, std::string("SELECT ") + store::fusion_record_codec().table.column_list() +
                                                 " FROM fusion_decisions"));
    while (true) {
      StatusOr<bool> row = fs.step();
      if (!row.is_ok()) return corruption(what + ": cannot read its fusion decisions: " + row.status().message());
      if (!*row) break;
      FusionRecord fr;
      std::string problem = store::fusion_record_codec().read(fs, 0, &fr);
      std::string name = store::record_name(fs.text(0), fs.text(1), fs.text(2));
      if (!problem.empty()) return corruption(what + ": fusion decision " + name + ": " + problem);
      std::string key = entry_key(fr.structure_sig, fr.shape_key, fr.fingerprint_key());
      auto it = listed_fusions.find(key);
      if (it == listed_fusions.end()) return corruption(what + ": fusion decision " + name + " is not in the manifest");
      if (it->second != fr.checksum)
        return corruption(what + ": fusion decision " + name + ": checksum differs from the manifest's");
      seen_fusions.insert(key);
      out.fusion_records.push_back(std::move(fr));
    }
  }
  for (const auto& [key, sum] : listed_fusions)
    if (!seen_fusions.count(key)) {
      std::string sig = key.substr(0, key.find('\x1f'));
      return corruption(what + ": fusion decision " + sig.substr(0, 12) + " is listed in the manifest but missing");
    }
  return out;
}

}  // namespace

StatusOr<ImportReport> SqlitePlanStore::import_bundle(const std::string& bundle_path, const ImportOptions& options) {
  if (read_only_) return failed_precondition("plan store " + path_ + " was opened read-only");
  KILN_ASSIGN_OR_RETURN(BundleContents bundle, read_bundle(bundle_path, options.validator));
  ImportReport out;
  std::lock_guard<std::mutex> lock(mu_);
  Txn txn(db_);
  KILN_RETURN_IF_ERROR(txn.begin());
  KILN_ASSIGN_OR_RETURN(Stmt find, Stmt::prepare(db_, "SELECT created_at, checksum FROM plans WHERE structure_sig=?1 "
                                                      "AND shape_key=?2 AND fingerprint_key=?3"));
  KILN_ASSIGN_OR_RETURN(Stmt ins, Stmt::prepare(db_, insert_sql("plans", "INSERT OR REPLACE")));
  for (const PlanRecord& r : bundle.records) {
    if (options.current && !check_fingerprint(r.fingerprint, *options.current, options.policy).pass) {
      ++out.skipped_stale;
      continue;
    }
    find.bind(1, r.structure_sig).bind(2, r.shape_key).bind(3, r.fingerprint_key());
    KILN_ASSIGN_OR_RETURN(bool exists, find.step());
    int64_t existing_created = exists ? find.int64(0) : 0;
    std::string existing_sum = exists ? find.text(1) : std::string();
    KILN_RETURN_IF_ERROR(find.reset());
    if (exists && existing_sum == r.checksum) {
      ++out.unchanged;
      continue;
    }
    if (exists && existing_created >= r.created_at) {
      ++out.kept_newer;
      continue;
    }
    store::bind_record(ins, 1, r);
    KILN_RETURN_IF_ERROR(ins.run());
    KILN_RETURN_IF_ERROR(ins.reset());
    ++(exists ? out.replaced : out.imported);
  }
  // A spec already stored for a key is kept: both give the same signature, so they describe the same graph.
  KILN_ASSIGN_OR_RETURN(Stmt gins, Stmt::prepare(db_, std::string("INSERT OR IGNORE INTO graph_specs(") +
                                                          store::graph_spec_codec().table.column_list() +
                                                          ") VALUES (?1,?2,?3,?4,?5,?6)"));
  for (const GraphSpecEntry& spec : bundle.graph_specs) {
    store::graph_spec_codec().bind(gins, 1, spec);
    KILN_RETURN_IF_ERROR(gins.run());
    out.graph_specs += sqlite3_changes(db_);
    KILN_RETURN_IF_ERROR(gins.reset());
  }
  // A fusion decision replaces an older one for its key and environment; one at least as new is kept.
  KILN_ASSIGN_OR_RETURN(Stmt ffind, Stmt::prepare(db_, "SELECT created_at FROM fusion_decisions WHERE structure_sig=?1 "
                                                       "AND shape_key=?2 AND fingerprint_key=?3"));
  KILN_ASSIGN_OR_RETURN(Stmt fins, Stmt::prepare(db_, std::string("INSERT OR REPLACE INTO fusion_decisions(") +
                                                          store::fusion_record_codec().table.column_list() +
                                                          ") VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12)"));
  for (const FusionRecord& fr : bundle.fusion_records) {
    if (options.current && !check_fingerprint(fr.fingerprint, *options.current, options.policy).pass) continue;
    ffind.bind(1, fr.structure_sig).bind(2, fr.shape_key).bind(3, fr.fingerprint_key());
    KILN_ASSIGN_OR_RETURN(bool exists, ffind.step());
    const int64_t existing_created = exists ? ffind.int64(0) : 0;
    KILN_RETURN_IF_ERROR(ffind.reset());
    if (exists && existing_created >= fr.created_at) continue;
    store::fusion_record_codec().bind(fins, 1, fr);
    KILN_RETURN_IF_ERROR(fins.run());
    KILN_RETURN_IF_ERROR(fins.reset());
    ++out.fusion_records;
  }
  KILN_RETURN_IF_ERROR(txn.commit());
  return out;
}

}  // namespace kiln
