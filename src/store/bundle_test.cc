#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "kiln/store/plan_store.h"
#include "store/store_test_util.h"

namespace kiln {
namespace {

using store_test::h200;
using store_test::make_record;
using store_test::raw_sql;
using store_test::TempDir;

std::unique_ptr<PlanStore> open_store(const std::string& path) {
  StatusOr<std::unique_ptr<PlanStore>> s = PlanStore::open(path);
  EXPECT_TRUE(s.is_ok()) << s.status().to_string();
  return s.is_ok() ? std::move(s).value() : nullptr;
}

std::map<std::string, std::string> checksums(PlanStore& store) {
  std::map<std::string, std::string> out;
  StatusOr<std::vector<PlanSummary>> all = store.list();
  EXPECT_TRUE(all.is_ok());
  for (const PlanSummary& p : *all)
    out[p.record.structure_sig + "|" + p.record.shape_key + "|" + p.record.fingerprint_key()] = p.record.checksum;
  return out;
}

class BundleContract : public store_test::StoreContract {};

TEST_P(BundleContract, ExportImportRoundTripsExactly) {
  TempDir dir;
  auto src = open_store(dir.file("src.db"));
  for (int i = 0; i < 12; ++i) ASSERT_TRUE(src->put(make_record(i)).is_ok());
  EnvFingerprint other = h200();
  other.cudnn_version = 91800;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(src->put(make_record(i, other)).is_ok());
  PlanRecord empty_plan = make_record(99);
  empty_plan.plan_bytes.clear();
  empty_plan.stats.median_ms = -0.0;
  ASSERT_TRUE(src->put(empty_plan).is_ok());

  std::string bundle = dir.file("out/plans.kilnbundle");
  StatusOr<ExportReport> ex = src->export_bundle(bundle);
  ASSERT_TRUE(ex.is_ok()) << ex.status().to_string();
  EXPECT_EQ(ex->records, 16);
  EXPECT_EQ(ex->fingerprint_keys.size(), 2u);
  EXPECT_TRUE(std::filesystem::exists(bundle));
  EXPECT_FALSE(std::filesystem::exists(bundle + "-journal"));

  auto dst = open_store(dir.file("dst.db"));
  StatusOr<ImportReport> im = dst->import_bundle(bundle);
  ASSERT_TRUE(im.is_ok()) << im.status().to_string();
  EXPECT_EQ(im->imported, 16);
  EXPECT_EQ(checksums(*dst), checksums(*src));
  EXPECT_TRUE(dst->verify()->problems.empty());
  PlanRecord r = make_record(5);
  StatusOr<LookupResult> got = dst->get(r.structure_sig, r.shape_key, h200());
  ASSERT_TRUE(got.is_ok());
  ASSERT_EQ(got->outcome, LookupOutcome::kHit);
  EXPECT_EQ(got->record->plan_bytes, r.plan_bytes);

  // Importing again changes nothing.
  im = dst->import_bundle(bundle);
  ASSERT_TRUE(im.is_ok());
  EXPECT_EQ(im->unchanged, 16);
  EXPECT_EQ(im->imported, 0);
}

TEST_P(BundleContract, ImportKeepsNewerRecordsAndSkipsStaleOnRequest) {
  TempDir dir;
  auto src = open_store(dir.file("src.db"));
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(src->put(make_record(i)).is_ok());
  EnvFingerprint other = h200();
  other.gpu_name = "NVIDIA B200";
  ASSERT_TRUE(src->put(make_record(10, other)).is_ok());
  std::string bundle = dir.file("b.kilnbundle");
  ASSERT_TRUE(src->export_bundle(bundle).is_ok());

  auto dst = open_store(dir.file("dst.db"));
  PlanRecord newer = make_record(0);
  newer.engine_id = 77;
  newer.created_at += 1000;
  ASSERT_TRUE(dst->put(newer).is_ok());
  PlanRecord older = make_record(1);
  older.engine_id = 66;
  older.created_at -= 1000;
  ASSERT_TRUE(dst->put(older).is_ok());

  ImportOptions o;
  o.current = h200();
  StatusOr<ImportReport> im = dst->import_bundle(bundle, o);
  ASSERT_TRUE(im.is_ok()) << im.status().to_string();
  EXPECT_EQ(im->kept_newer, 1);
  EXPECT_EQ(im->replaced, 1);
  EXPECT_EQ(im->imported, 2);
  EXPECT_EQ(im->skipped_stale, 1);
  PlanRecord r0 = make_record(0), r1 = make_record(1);
  EXPECT_EQ(dst->get(r0.structure_sig, r0.shape_key, h200())->record->engine_id, 77);
  EXPECT_EQ(dst->get(r1.structure_sig, r1.shape_key, h200())->record->engine_id, r1.engine_id);
}

TEST_P(BundleContract, ExportWithFilter) {
  TempDir dir;
  auto src = open_store(dir.file("src.db"));
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(src->put(make_record(i)).is_ok());
  ExportOptions o;
  o.filter.structure_prefix = "sig2";
  StatusOr<ExportReport> ex = src->export_bundle(dir.file("b"), o);
  ASSERT_TRUE(ex.is_ok());
  EXPECT_EQ(ex->records, 1);
}

TEST(Bundle, FlippedByteInABundleRecordIsRejectedByName) {
  TempDir dir;
  auto src = open_store(dir.file("src.db"));
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(src->put(make_record(i)).is_ok());
  std::string bundle = dir.file("b.kilnbundle");
  ASSERT_TRUE(src->export_bundle(bundle).is_ok());
  PlanRecord victim = make_record(3);
  store_test::flip_blob_byte(bundle, victim.structure_sig, 5);
  auto dst = open_store(dir.file("dst.db"));
  StatusOr<ImportReport> im = dst->import_bundle(bundle);
  ASSERT_FALSE(im.is_ok());
  EXPECT_EQ(im.status().code(), StatusCode::kCorruption);
  EXPECT_NE(im.status().message().find("record " + victim.structure_sig.substr(0, 12) + "/" + victim.shape_key),
            std::string::npos)
      << im.status().message();
  EXPECT_NE(im.status().message().find("checksum mismatch"), std::string::npos) << im.status().message();
  EXPECT_TRUE(dst->list()->empty());  // all or nothing
}

TEST_P(BundleContract, RecordAndChecksumRewrittenTogetherIsCaughtByTheManifest) {
  TempDir dir;
  auto src = open_store(dir.file("src.db"));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(src->put(make_record(i)).is_ok());
  std::string bundle = dir.file("b.kilnbundle");
  ASSERT_TRUE(src->export_bundle(bundle).is_ok());
  // Forge a consistent record: change the engine and recompute its checksum.
  PlanRecord forged = make_record(1);
  forged.engine_id = 1234;
  forged.kiln_schema_version = kStoreSchemaVersion;
  std::string sum = compute_record_checksum(forged);
  raw_sql(bundle, "UPDATE plans SET engine_id = 1234, checksum = '" + sum + "' WHERE structure_sig = '" +
                      forged.structure_sig + "'");
  auto dst = open_store(dir.file("dst.db"));
  StatusOr<ImportReport> im = dst->import_bundle(bundle);
  ASSERT_FALSE(im.is_ok());
  EXPECT_EQ(im.status().code(), StatusCode::kCorruption);
  EXPECT_NE(im.status().message().find("differs from the manifest"), std::string::npos) << im.status().message();
}

TEST_P(BundleContract, MissingRecordOrBadManifestIsCorruption) {
  TempDir dir;
  auto src = open_store(dir.file("src.db"));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(src->put(make_record(i)).is_ok());
  std::string bundle = dir.file("b.kilnbundle");
  ASSERT_TRUE(src->export_bundle(bundle).is_ok());
  std::filesystem::copy_file(bundle, dir.file("b2.kilnbundle"));
  raw_sql(bundle, "DELETE FROM plans WHERE structure_sig LIKE 'sig2_%'");
  auto dst = open_store(dir.file("dst.db"));
  StatusOr<ImportReport> im = dst->import_bundle(bundle);
  ASSERT_FALSE(im.is_ok());
  EXPECT_NE(im.status().message().find("listed in the manifest but missing"), std::string::npos)
      << im.status().message();

  raw_sql(dir.file("b2.kilnbundle"), "UPDATE bundle_manifest SET json = replace(json, '\"record_count\": 3', "
                                     "'\"record_count\": 4')");
  im = dst->import_bundle(dir.file("b2.kilnbundle"));
  ASSERT_FALSE(im.is_ok());
  EXPECT_EQ(im.status().code(), StatusCode::kCorruption);
  EXPECT_NE(im.status().message().find("manifest says 4 records"), std::string::npos) << im.status().message();
}

TEST_P(BundleContract, GarbageFileIsNotABundle) {
  TempDir dir;
  std::string bundle = dir.file("junk.kilnbundle");
  {
    std::ofstream f(bundle, std::ios::binary);
    for (int i = 0; i < 1000; ++i) f << "garbage " << i;
  }
  auto dst = open_store(dir.file("dst.db"));
  StatusOr<ImportReport> im = dst->import_bundle(bundle);
  ASSERT_FALSE(im.is_ok());
  EXPECT_EQ(im.status().code(), StatusCode::kCorruption);
  EXPECT_NE(im.status().message().find("not a Kiln plan bundle"), std::string::npos) << im.status().message();
  // A plan store is not a bundle either.
  if (file_case()) {
    im = dst->import_bundle(dir.file("dst.db"));
    ASSERT_FALSE(im.is_ok());
    EXPECT_EQ(im.status().code(), StatusCode::kCorruption);
  }
  EXPECT_EQ(dst->import_bundle(dir.file("nope")).status().code(), StatusCode::kNotFound);
}

TEST_P(BundleContract, ValidatorCanRefuseAnImport) {
  TempDir dir;
  auto src = open_store(dir.file("src.db"));
  ASSERT_TRUE(src->put(make_record(1)).is_ok());
  std::string bundle = dir.file("b.kilnbundle");
  ASSERT_TRUE(src->export_bundle(bundle).is_ok());
  auto dst = open_store(dir.file("dst.db"));
  ImportOptions o;
  o.validator = [](const PlanRecord&) { return corruption("plan does not deserialize"); };
  StatusOr<ImportReport> im = dst->import_bundle(bundle, o);
  ASSERT_FALSE(im.is_ok());
  EXPECT_NE(im.status().message().find("plan does not deserialize"), std::string::npos);
}

TEST_P(BundleContract, ExportRefusesCorruptRecords) {
  TempDir dir;
  std::string path = dir.file("src.db");
  auto src = open_store(path);
  ASSERT_TRUE(src->put(make_record(1)).is_ok());
  raw_sql(path, "UPDATE plans SET workspace_bytes = 5");
  StatusOr<ExportReport> ex = src->export_bundle(dir.file("b"));
  ASSERT_FALSE(ex.is_ok());
  EXPECT_EQ(ex.status().code(), StatusCode::kCorruption);
  EXPECT_FALSE(std::filesystem::exists(dir.file("b")));
}

// Issue 10 case 4: an export wrote over any file, the store it read included.
TEST_P(BundleContract, ExportRefusesAnExistingFileAndNeverTheStoreItself) {
  TempDir dir;
  std::string path = dir.file("src.db");
  auto src = open_store(path);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(src->put(make_record(i)).is_ok());
  std::string taken = dir.file("taken.kilnbundle");
  std::ofstream(taken) << "not yours";
  StatusOr<ExportReport> ex = src->export_bundle(taken);
  ASSERT_FALSE(ex.is_ok());
  EXPECT_EQ(ex.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(ex.status().message().find("already exists"), std::string::npos) << ex.status().message();
  ExportOptions force;
  force.overwrite = true;
  ASSERT_TRUE(src->export_bundle(taken, force).is_ok());

  for (const std::string& own : src->database_files()) {
    ex = src->export_bundle(own, force);
    ASSERT_FALSE(ex.is_ok()) << own;
    EXPECT_EQ(ex.status().code(), StatusCode::kInvalidArgument) << own;
    EXPECT_NE(ex.status().message().find("the plan store this export reads"), std::string::npos)
        << ex.status().message();
  }
  // The store is whole and still the same file.
  StatusOr<VerifyReport> v = src->verify();
  ASSERT_TRUE(v.is_ok()) << v.status().to_string();
  EXPECT_EQ(v->ok, 3);
  EXPECT_EQ(v->integrity, "ok");
}

// Issue 10 case 5: a bundle without its plans table exited 10, a newer one 6, a folder 3.
TEST_P(BundleContract, DamagedNewerAndFolderBundlesHaveTheirOwnCodes) {
  TempDir dir;
  auto src = open_store(dir.file("src.db"));
  ASSERT_TRUE(src->put(make_record(1)).is_ok());
  std::string bundle = dir.file("b.kilnbundle");
  ASSERT_TRUE(src->export_bundle(bundle).is_ok());
  auto dst = open_store(dir.file("dst.db"));

  std::filesystem::copy_file(bundle, dir.file("view.kilnbundle"));
  raw_sql(dir.file("view.kilnbundle"), "ALTER TABLE plans RENAME TO p0; CREATE VIEW plans AS SELECT * FROM p0");
  StatusOr<ImportReport> im = dst->import_bundle(dir.file("view.kilnbundle"));
  EXPECT_EQ(im.status().code(), StatusCode::kCorruption) << im.status().to_string();
  EXPECT_NE(im.status().message().find("'plans' is a view, not a table (damaged schema)"), std::string::npos)
      << im.status().message();

  std::filesystem::copy_file(bundle, dir.file("specs.kilnbundle"));
  raw_sql(dir.file("specs.kilnbundle"), "ALTER TABLE graph_specs DROP COLUMN spec_json");
  im = dst->import_bundle(dir.file("specs.kilnbundle"));
  EXPECT_EQ(im.status().code(), StatusCode::kCorruption) << im.status().to_string();
  EXPECT_NE(im.status().message().find("table 'graph_specs' lacks column 'spec_json'"), std::string::npos)
      << im.status().message();

  std::filesystem::copy_file(bundle, dir.file("newer.kilnbundle"));
  raw_sql(dir.file("newer.kilnbundle"), "UPDATE bundle_manifest SET json = json_set(json, '$.schema_version', 3)");
  im = dst->import_bundle(dir.file("newer.kilnbundle"));
  EXPECT_EQ(im.status().code(), StatusCode::kNewerVersion) << im.status().to_string();
  EXPECT_NE(im.status().message().find("has store schema version 3, newer than this Kiln understands (2)"),
            std::string::npos)
      << im.status().message();

  // A version no Kiln writes (0, negative, past int64) is damage, not an older bundle (found by a hostile trial).
  for (const char* v : {"0", "-1", "1180591620717411303424"}) {
    const std::string b = dir.file(std::string("v") + v + ".kilnbundle");
    std::filesystem::copy_file(bundle, b);
    raw_sql(b, std::string("UPDATE bundle_manifest SET json = json_set(json, '$.bundle_version', ") + v + ")");
    im = dst->import_bundle(b);
    EXPECT_EQ(im.status().code(), StatusCode::kCorruption) << v << ": " << im.status().to_string();
  }

  std::filesystem::create_directories(dir.file("folder"));
  im = dst->import_bundle(dir.file("folder"));
  EXPECT_EQ(im.status().code(), StatusCode::kInvalidArgument) << im.status().to_string();
  // Nothing was imported by any of them.
  StatusOr<std::vector<PlanSummary>> all = dst->list();
  ASSERT_TRUE(all.is_ok());
  EXPECT_TRUE(all->empty());
}

KILN_STORE_CONTRACT_SUITE(BundleContract);

}  // namespace
}  // namespace kiln
