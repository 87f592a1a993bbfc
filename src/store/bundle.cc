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
#include "kiln/core/engine_config.h"
#include "store/sql_plan_store.h"
#include "store/tables.h"
#include "store/record_codec.h"
#include "store/schema_check.h"
#include "store/sql_table.h"
#include "store/sql.h"

namespace kiln {

using store::DbPtr;
using store::exec;
using store::RowRead;
using store::Stmt;
using store::Conn;
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

namespace {

// What an export has written to the bundle so far: the manifest's lists.
struct Exported {
  std::vector<ManifestEntry> entries;
  std::vector<ManifestEntry> graph_specs;  // fingerprint_key unused
  std::vector<ManifestEntry> fusion_records;
  std::map<std::string, EnvFingerprint> fingerprints;
};

// Copies one sound plan row (read by `st`) into the bundle; Corruption naming it (and `role`) when damaged.
Status export_record(const Stmt& st, Stmt& ins, const std::string& role, Exported* ex) {
  RowRead r = store::read_record(st, 0);
  std::string problem = store::record_problem(r);
  if (!problem.empty())
    return corruption("cannot export corrupt record " +
                      store::record_name(r.record.structure_sig, r.record.shape_key, r.stored_fingerprint_key) + role +
                      ": " + problem + " (run `kiln plans verify --quarantine`)");
  store::bind_record(ins, 1, r.record);
  KILN_RETURN_IF_ERROR(ins.run());
  KILN_RETURN_IF_ERROR(ins.reset());
  ex->entries.push_back({r.record.structure_sig, r.record.shape_key, r.stored_fingerprint_key, r.record.checksum});
  ex->fingerprints.emplace(r.stored_fingerprint_key, r.record.fingerprint);
  return Status::ok();
}

Status export_plans(Conn* db, Stmt& ins, const ListFilter& filter, Exported* ex) {
  KILN_ASSIGN_OR_RETURN(
      Stmt st,
      Stmt::prepare(db, store::plans_table().select_sql(std::string(store::kFilterWhere) +
                                                        " ORDER BY structure_sig, shape_key, fingerprint_key")));
  store::bind_filter(st, filter);
  while (true) {
    KILN_ASSIGN_OR_RETURN(bool row, st.step());
    if (!row) return Status::ok();
    KILN_RETURN_IF_ERROR(export_record(st, ins, "", ex));
  }
}

// The graph specs of the exported (structure, shape) keys travel with them; a damaged one stays behind.
Status export_graph_specs(Conn* db, Conn* bundle, Exported* ex) {
  const auto& codec = store::graph_spec_codec();
  KILN_ASSIGN_OR_RETURN(Stmt gins, Stmt::prepare(bundle, codec.table.insert_sql("INSERT OR IGNORE")));
  std::set<std::pair<std::string, std::string>> done;
  for (const auto& e : ex->entries) {
    if (!done.insert({e.structure_sig, e.shape_key}).second) continue;
    KILN_ASSIGN_OR_RETURN(auto rows,
                          store::select_records(db, codec, codec.table.where_key(), {e.structure_sig, e.shape_key}));
    if (rows.empty()) continue;
    if (!rows[0].problem.empty()) {
      KILN_LOG(kWarn, "export: graph spec " << e.structure_sig.substr(0, 12) << "/" << e.shape_key
                                            << " left out: " << rows[0].problem);
      continue;
    }
    const GraphSpecEntry& spec = rows[0].record;
    codec.bind(gins, 1, spec);
    KILN_RETURN_IF_ERROR(gins.run());
    KILN_RETURN_IF_ERROR(gins.reset());
    ex->graph_specs.push_back({spec.structure_sig, spec.shape_key, "", spec.checksum});
  }
  return Status::ok();
}

// The fusion decisions of the exported records travel with them, and so do their parts' records (same
// environment), so that the service that imports the bundle runs the chain the tuning chose. A damaged
// decision stays behind (the fused plan then serves).
Status export_fusion_records(Conn* db, Conn* bundle, Stmt& ins, Exported* ex) {
  KILN_ASSIGN_OR_RETURN(bool has_fusion, store::table_exists(db, "fusion_decisions"));
  if (!has_fusion) return Status::ok();
  const auto& codec = store::fusion_record_codec();
  KILN_ASSIGN_OR_RETURN(Stmt fins, Stmt::prepare(bundle, codec.table.insert_sql("INSERT OR IGNORE")));
  KILN_ASSIGN_OR_RETURN(Stmt part_st,
                        Stmt::prepare(db, store::plans_table().select_sql(store::plans_table().where_key())));
  std::set<std::string> exported;
  for (const auto& e : ex->entries) exported.insert(entry_key(e.structure_sig, e.shape_key, e.fingerprint_key));
  const size_t fused_count = ex->entries.size();  // parts appended below are not asked for decisions
  for (size_t i = 0; i < fused_count; ++i) {
    const ManifestEntry e = ex->entries[i];
    KILN_ASSIGN_OR_RETURN(auto rows, store::select_records(db, codec, codec.table.where_key(),
                                                           {e.structure_sig, e.shape_key, e.fingerprint_key}));
    if (rows.empty()) continue;
    if (!rows[0].problem.empty()) {
      KILN_LOG(kWarn, "export: fusion decision " << store::record_name(e.structure_sig, e.shape_key, e.fingerprint_key)
                                                 << " left out: " << rows[0].problem);
      continue;
    }
    const FusionRecord& fr = rows[0].record;
    for (const FusionPartRef& p : fr.parts) {
      if (!exported.insert(entry_key(p.structure_sig, p.shape_key, e.fingerprint_key)).second) continue;
      store::bind_texts(part_st, {p.structure_sig, p.shape_key, e.fingerprint_key});
      KILN_ASSIGN_OR_RETURN(bool prow, part_st.step());
      if (prow) KILN_RETURN_IF_ERROR(export_record(part_st, ins, " (part '" + p.name + "' of an unfused chain)", ex));
      KILN_RETURN_IF_ERROR(part_st.reset());
    }
    codec.bind(fins, 1, fr);
    KILN_RETURN_IF_ERROR(fins.run());
    KILN_RETURN_IF_ERROR(fins.reset());
    ex->fusion_records.push_back({fr.structure_sig, fr.shape_key, fr.fingerprint_key(), fr.checksum});
  }
  return Status::ok();
}

// Keys and checksums as the manifest lists them (`with_fingerprint_key`: records and fusion decisions).
nlohmann::ordered_json manifest_list(const std::vector<ManifestEntry>& entries, bool with_fingerprint_key) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const auto& e : entries) {
    nlohmann::ordered_json j;
    j["structure_sig"] = e.structure_sig;
    j["shape_key"] = e.shape_key;
    if (with_fingerprint_key) j["fingerprint_key"] = e.fingerprint_key;
    j["checksum"] = e.checksum;
    out.push_back(std::move(j));
  }
  return out;
}

// The bundle's manifest (docs/store.md "Bundles"); fills the report's counts and fingerprint keys.
std::string manifest_text(const Exported& ex, ExportReport* out) {
  nlohmann::ordered_json m;
  m["format"] = kBundleFormat;
  m["bundle_version"] = kBundleVersion;
  m["schema_version"] = kStoreSchemaVersion;
  m["created_at"] = store::unix_now();
  m["created_by"] = store::user_at_host();
  m["record_count"] = ex.entries.size();
  nlohmann::ordered_json fps = nlohmann::ordered_json::array();
  for (const auto& [key, f] : ex.fingerprints) {
    nlohmann::ordered_json e;
    e["key"] = key;
    e["fingerprint"] = nlohmann::ordered_json::parse(fingerprint_to_json(f), nullptr, false);
    fps.push_back(e);
    out->fingerprint_keys.push_back(key);
  }
  m["fingerprints"] = fps;
  m["records"] = manifest_list(ex.entries, true);
  m["bundle_checksum"] = bundle_checksum(ex.entries);
  // Graph specs carry their own checksums (each covers its key and text); listed here so that a missing or
  // extra one is caught. Not part of bundle_checksum: bundles without them stay valid.
  m["graph_specs"] = manifest_list(ex.graph_specs, false);
  // Fusion decisions, likewise (each has its checksum), outside bundle_checksum.
  m["fusion_records"] = manifest_list(ex.fusion_records, true);
  out->records = static_cast<int64_t>(ex.entries.size());
  out->graph_specs = static_cast<int64_t>(ex.graph_specs.size());
  out->fusion_records = static_cast<int64_t>(ex.fusion_records.size());
  return m.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace

StatusOr<ExportReport> SqlPlanStore::export_bundle(const std::string& bundle_path, const ExportOptions& options) {
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
    store::SqliteConn bundle{DbPtr(raw)};
    if (rc != SQLITE_OK) return store::sqlite_status(raw, rc, "cannot create bundle " + tmp);
    KILN_RETURN_IF_ERROR(bundle.exec("PRAGMA journal_mode=DELETE"));
    KILN_RETURN_IF_ERROR(exec(&bundle, "BEGIN"));
    KILN_RETURN_IF_ERROR(exec(&bundle, "CREATE TABLE bundle_manifest(json TEXT NOT NULL)"));
    for (const store::TableCodec* t :
         {&store::plans_table(), &store::graph_spec_codec().table, &store::fusion_record_codec().table})
      KILN_RETURN_IF_ERROR(exec(&bundle, t->create_sql().c_str()));
    KILN_ASSIGN_OR_RETURN(Stmt ins, Stmt::prepare(&bundle, insert_sql("plans", "INSERT")));
    Exported ex;
    {
      std::lock_guard<std::mutex> lock(mu_);
      KILN_RETURN_IF_ERROR(export_plans(db_, ins, options.filter, &ex));
      KILN_RETURN_IF_ERROR(export_graph_specs(db_, &bundle, &ex));
      KILN_RETURN_IF_ERROR(export_fusion_records(db_, &bundle, ins, &ex));
    }
    KILN_ASSIGN_OR_RETURN(Stmt man, Stmt::prepare(&bundle, "INSERT INTO bundle_manifest(json) VALUES (?1)"));
    man.bind(1, manifest_text(ex, &out));
    KILN_RETURN_IF_ERROR(man.run());
    return exec(&bundle, "COMMIT");
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

// What a bundle's manifest lists: its records, and the checksums of its graph specs and fusion decisions by
// entry_key (a graph spec's with an empty fingerprint key).
struct Manifest {
  std::vector<ManifestEntry> entries;
  std::map<std::string, std::string> specs;
  std::map<std::string, std::string> fusions;
};

// Parses and checks the manifest's JSON (format, versions, record count, bundle checksum).
StatusOr<Manifest> parse_manifest(const std::string& what, const std::string& text) {
  nlohmann::json m = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (m.is_discarded() || !m.is_object()) return corruption(what + ": the manifest is not valid JSON");
  Manifest out;
  std::string declared_sum;
  int64_t declared_count = -1;
  try {
    if (m.value("format", std::string()) != kBundleFormat)
      return corruption(what + ": not a Kiln plan bundle manifest");
    for (const auto& [field, mine, words] :
         {std::tuple<const char*, int, const char*>{"bundle_version", kBundleVersion, " has bundle version "},
          std::tuple<const char*, int, const char*>{"schema_version", kStoreSchemaVersion,
                                                    " has store schema version "}}) {
      const int64_t v = m.at(field).get<int64_t>();
      if (v < 1) return corruption(what + words + std::to_string(v) + ": not a version any Kiln writes");
      if (v > mine)
        return newer_version(what + words + std::to_string(v) + ", newer than this Kiln understands (" +
                             std::to_string(mine) + "): it was made by a newer Kiln; upgrade Kiln to import it");
    }
    declared_count = m.at("record_count").get<int64_t>();
    declared_sum = m.at("bundle_checksum").get<std::string>();
    auto key_of = [](const nlohmann::json& e, bool with_fp) {
      return entry_key(e.at("structure_sig").get<std::string>(), e.at("shape_key").get<std::string>(),
                       with_fp ? e.at("fingerprint_key").get<std::string>() : std::string());
    };
    for (const auto& e : m.at("records"))
      out.entries.push_back({e.at("structure_sig").get<std::string>(), e.at("shape_key").get<std::string>(),
                             e.at("fingerprint_key").get<std::string>(), e.at("checksum").get<std::string>()});
    if (m.contains("graph_specs"))
      for (const auto& e : m.at("graph_specs")) out.specs[key_of(e, false)] = e.at("checksum").get<std::string>();
    if (m.contains("fusion_records"))
      for (const auto& e : m.at("fusion_records")) out.fusions[key_of(e, true)] = e.at("checksum").get<std::string>();
  } catch (const std::exception& e) {
    return corruption(what + ": malformed manifest: " + e.what());
  }
  if (declared_count != static_cast<int64_t>(out.entries.size()))
    return corruption(what + ": the manifest says " + std::to_string(declared_count) + " records but lists " +
                      std::to_string(out.entries.size()));
  if (bundle_checksum(out.entries) != declared_sum)
    return corruption(what + ": the manifest's bundle checksum does not match");
  return out;
}

// Opens a bundle file read-only, after refusing what is not a regular file.
StatusOr<DbPtr> open_bundle(const std::string& path) {
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
  return db;
}

// Reads the manifest row and checks the tables are the ones Kiln writes (not views, no column missing):
// graph_specs and fusion_decisions may be absent (older bundles), plans may not.
StatusOr<Manifest> read_manifest(Conn* db, const std::string& what) {
  StatusOr<Stmt> mst = Stmt::prepare(db, "SELECT json FROM bundle_manifest");
  if (!mst.is_ok()) {
    if (mst.status().message().find("not a database") != std::string::npos ||
        mst.status().code() == StatusCode::kCorruption)
      return corruption(what + " is not a Kiln plan bundle (not a SQLite file, or damaged)");
    return corruption(what + " has no manifest (not a Kiln plan bundle): " + mst.status().message());
  }
  KILN_ASSIGN_OR_RETURN(bool has_row, mst->step());
  if (!has_row) return corruption(what + ": the manifest is empty");
  KILN_ASSIGN_OR_RETURN(Manifest m, parse_manifest(what, mst->text(0)));
  for (const store::TableCodec* t :
       {&store::plans_table(), &store::graph_spec_codec().table, &store::fusion_record_codec().table}) {
    Status c = store::check_table_schema(db, t->table, t->create_sql(), t == &store::plans_table());
    if (!c.is_ok()) return Status(c.code(), what + ": " + c.message());
  }
  return m;
}

// The bundle's plan records, each sound, listed with its checksum and passing the validator; every listed one
// present.
Status read_bundle_records(Conn* db, const std::string& what, const Manifest& m, const PlanValidator& validator,
                           std::vector<PlanRecord>* out) {
  std::map<std::string, std::string> listed;
  for (const auto& e : m.entries) listed[entry_key(e.structure_sig, e.shape_key, e.fingerprint_key)] = e.checksum;
  std::set<std::string> seen;
  KILN_ASSIGN_OR_RETURN(Stmt st, Stmt::prepare(db, store::plans_table().select_sql()));
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
    out->push_back(std::move(r.record));
  }
  for (const auto& e : m.entries)
    if (!seen.count(entry_key(e.structure_sig, e.shape_key, e.fingerprint_key)))
      return corruption(what + ": record " + store::record_name(e.structure_sig, e.shape_key, e.fingerprint_key) +
                        " is listed in the manifest but missing");
  return Status::ok();
}

// How a bundle's side table (graph specs, fusion decisions) is named in messages and matched to its manifest.
template <class Record>
struct SideTable {
  const store::RecordCodec<Record>& codec;
  const char* one;   // "graph spec"
  const char* many;  // "graph specs"
  std::string (*key)(const Record&);
  std::string (*name)(const store::Row&);
};

// Every row of a side table, each sound and listed with its checksum; every listed one present. Bundles written
// before the table existed have none and list none.
template <class Record>
Status read_side_table(Conn* db, const std::string& what, const SideTable<Record>& t,
                       const std::map<std::string, std::string>& listed, std::vector<Record>* out) {
  KILN_ASSIGN_OR_RETURN(bool exists, store::table_exists(db, t.codec.table.table));
  std::set<std::string> seen;
  if (exists) {
    KILN_ASSIGN_OR_RETURN(Stmt st, Stmt::prepare(db, t.codec.table.select_sql()));
    while (true) {
      StatusOr<bool> row = st.step();
      if (!row.is_ok()) return corruption(what + ": cannot read its " + t.many + ": " + row.status().message());
      if (!*row) break;
      std::string problem;
      Record r;
      const store::Row values = t.codec.table.read(st, 0, &problem);
      if (problem.empty()) problem = t.codec.decode(values, &r);
      const std::string name = std::string(t.one) + " " + t.name(values);
      if (!problem.empty()) return corruption(what + ": " + name + ": " + problem);
      const std::string key = t.key(r);
      auto it = listed.find(key);
      if (it == listed.end()) return corruption(what + ": " + name + " is not in the manifest");
      if (it->second != r.checksum) return corruption(what + ": " + name + ": checksum differs from the manifest's");
      seen.insert(key);
      out->push_back(std::move(r));
    }
  }
  for (const auto& [key, sum] : listed)
    if (!seen.count(key)) {
      std::string sig = key.substr(0, key.find('\x1f'));
      return corruption(what + ": " + t.one + " " + sig.substr(0, 12) + " is listed in the manifest but missing");
    }
  return Status::ok();
}

std::string spec_key(const GraphSpecEntry& e) { return entry_key(e.structure_sig, e.shape_key, ""); }
std::string spec_row_name(const store::Row& row) { return row[0].text.substr(0, 12) + "/" + row[1].text; }
std::string fusion_key(const FusionRecord& r) { return entry_key(r.structure_sig, r.shape_key, r.fingerprint_key()); }
std::string fusion_row_name(const store::Row& row) { return store::record_name(row[0].text, row[1].text, row[2].text); }

// Reads and checks a whole bundle; Corruption naming the bundle and the first bad record.
StatusOr<BundleContents> read_bundle(const std::string& path, const PlanValidator& validator) {
  KILN_ASSIGN_OR_RETURN(DbPtr file, open_bundle(path));
  store::SqliteConn conn{std::move(file)};
  store::Conn* db = &conn;
  const std::string what = "bundle " + path;
  KILN_ASSIGN_OR_RETURN(Manifest m, read_manifest(db, what));
  BundleContents out;
  KILN_RETURN_IF_ERROR(read_bundle_records(db, what, m, validator, &out.records));
  const SideTable<GraphSpecEntry> specs{store::graph_spec_codec(), "graph spec", "graph specs", spec_key,
                                        spec_row_name};
  KILN_RETURN_IF_ERROR(read_side_table(db, what, specs, m.specs, &out.graph_specs));
  const SideTable<FusionRecord> fusions{store::fusion_record_codec(), "fusion decision", "fusion decisions", fusion_key,
                                        fusion_row_name};
  KILN_RETURN_IF_ERROR(read_side_table(db, what, fusions, m.fusions, &out.fusion_records));
  return out;
}

}  // namespace

StatusOr<ImportReport> SqlPlanStore::import_bundle(const std::string& bundle_path, const ImportOptions& options) {
  if (read_only_) return failed_precondition("plan store " + path_ + " was opened read-only");
  KILN_ASSIGN_OR_RETURN(BundleContents bundle, read_bundle(bundle_path, options.validator));
  ImportReport out;
  std::lock_guard<std::mutex> lock(mu_);
  Txn txn(db_);
  KILN_RETURN_IF_ERROR(txn.begin());
  KILN_ASSIGN_OR_RETURN(Stmt find, Stmt::prepare(db_, "SELECT created_at, checksum FROM plans WHERE structure_sig=?1 "
                                                      "AND shape_key=?2 AND fingerprint_key=?3"));
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
    // A plan this store rejected or retired for the key (a rollback, a promotion of another) is not brought back by
    // an import of the same plan (found by a hostile trial: an import re-activated a rolled-back plan).
    KILN_ASSIGN_OR_RETURN(
        std::optional<RolloutEntry> decided,
        rollout_row_locked({r.structure_sig, r.shape_key, r.fingerprint_key()}, plan_identity(r.engine_id, r.knobs)));
    if (decided && decided->problem.empty() && decided->record.checksum == r.checksum &&
        (decided->state == PlanState::kRejected || decided->state == PlanState::kRetired)) {
      ++out.skipped_decided;
      continue;
    }
    // As put() stores it: a winner change where a tuned winner is replaced, the replaced plan retired (a rollback
    // can restore it), the history rows.
    Activation how;
    how.reason = "imported from bundle " + bundle_path;
    how.notify = false;
    KILN_RETURN_IF_ERROR(activate_locked(r, how));
    ++(exists ? out.replaced : out.imported);
  }
  // A spec already stored for a key is kept: both give the same signature, so they describe the same graph.
  KILN_ASSIGN_OR_RETURN(Stmt gins, Stmt::prepare(db_, std::string("INSERT OR IGNORE INTO graph_specs(") +
                                                          store::graph_spec_codec().table.column_list() +
                                                          ") VALUES (?1,?2,?3,?4,?5,?6)"));
  for (const GraphSpecEntry& spec : bundle.graph_specs) {
    store::graph_spec_codec().bind(gins, 1, spec);
    KILN_RETURN_IF_ERROR(gins.run());
    out.graph_specs += db_->changes();
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
