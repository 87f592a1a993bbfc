// Every enum-name table of the library, across the layers (so it lives in the top one, tools).
// Every enum's name table (kiln/core/enum_names.h) read both ways: each value has one name and each name one
// value, the enum's name function prints the table's name, and its parser (where it has one) reads that name
// back to the value. One case per table; the tables live beside their enums in the layers above core.
#include <gtest/gtest.h>

#include <functional>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/capture/capture.h"
#include "kiln/core/disposition.h"
#include "kiln/core/enum_names.h"
#include "kiln/graph/graph.h"
#include "kiln/graph/ops/families.h"
#include "kiln/lower/lower.h"
#include "kiln/measure/measure_stats.h"
#include "kiln/runtime/planner.h"
#include "kiln/runtime/planner_jobs.h"
#include "kiln/tools/replay.h"
#include "kiln/runtime/retune.h"
#include "kiln/tools/runner.h"
#include "kiln/tune/tune_policy.h"
#include "kiln/validate/reference.h"

namespace kiln {
namespace {

// A parser of E's names (E is deduced from the table alone).
template <typename E>
using Parser = std::function<StatusOr<typename std::common_type<E>::type>(const std::string&)>;

// Checks `table` against itself and against the enum's name function; with a parser, that too.
template <typename E, size_t N, typename NameFn>
void check_table(const EnumName<E> (&table)[N], NameFn name_of, Parser<E> parse = nullptr) {
  std::set<std::string> names;
  for (const EnumName<E>& row : table) {
    SCOPED_TRACE(row.name);
    EXPECT_TRUE(names.insert(row.name).second) << "a name written twice";
    EXPECT_STREQ(enum_name(table, row.value), row.name) << "a value written twice";
    EXPECT_STREQ(name_of(row.value), row.name);
    StatusOr<E> back = parse_enum(table, name_of(row.value), "value");
    ASSERT_TRUE(back.is_ok()) << back.status().to_string();
    EXPECT_TRUE(*back == row.value);
    if (parse) {
      StatusOr<E> parsed = parse(name_of(row.value));
      ASSERT_TRUE(parsed.is_ok()) << parsed.status().to_string();
      EXPECT_TRUE(*parsed == row.value);
    }
  }
  if (parse) {
    EXPECT_FALSE(parse("no such name").is_ok());
  }
}

struct TableCase {
  const char* name;
  std::function<void()> check;
};

std::ostream& operator<<(std::ostream& os, const TableCase& c) { return os << c.name; }

const std::vector<TableCase>& table_cases() {
  static const std::vector<TableCase> cases = {
      {"disposition", [] { check_table(kDispositionNames, disposition_name, parse_disposition); }},
      {"dtype", [] { check_table(kDataTypeNames, dtype_name, parse_dtype); }},
      {"layout", [] { check_table(kLayoutNames, layout_name, parse_layout); }},
      {"op_kind", [] { check_table(kOpKindNames, op_kind_name); }},
      {"pointwise_mode", [] { check_table(kPointwiseModeNames, pointwise_mode_name); }},
      {"reduction_mode", [] { check_table(kReductionModeNames, reduction_mode_name); }},
      {"op_family", [] { check_table(kOpFamilyNames, op_family_name); }},
      {"stop_reason", [] { check_table(kStopReasonNames, stop_reason_name); }},
      {"heuristic_mode", [] { check_table(kHeuristicModeNames, heuristic_mode_name, parse_heuristic_mode); }},
      {"reference_kind", [] { check_table(kReferenceKindNames, reference_kind_name, parse_reference_kind); }},
      {"objective", [] { check_table(kObjectiveNames, objective_name, parse_objective); }},
      {"fusion_policy", [] { check_table(kFusionPolicyNames, fusion_policy_name, parse_fusion_policy); }},
      {"plan_source", [] { check_table(kPlanSourceNames, plan_source_name, parse_plan_source); }},
      {"new_shapes", [] { check_table(kNewShapesNames, new_shapes_name, parse_new_shapes); }},
      {"promote_by", [] { check_table(kPromoteByNames, promote_by_name, parse_promote_by); }},
      {"reference_choice", [] { check_table(kReferenceChoiceNames, reference_choice_name, parse_reference_choice); }},
      {"compile_outcome", [] { check_table(kCompileOutcomeNames, compile_outcome_name); }},
      {"retune_outcome", [] { check_table(kRetuneOutcomeNames, retune_outcome_name); }},
      {"capture_mode", [] { check_table(kCaptureModeNames, capture_mode_name); }},
  };
  return cases;
}

class EnumNameTables : public ::testing::TestWithParam<TableCase> {};

TEST_P(EnumNameTables, EachNameReadsBackToItsValue) { GetParam().check(); }

INSTANTIATE_TEST_SUITE_P(AllTables, EnumNameTables, ::testing::ValuesIn(table_cases()),
                         [](const ::testing::TestParamInfo<TableCase>& info) { return std::string(info.param.name); });

// The tables kept private to their file, through the functions that use them.
TEST(EnumNameTables, StatusCodesHaveDistinctNames) {
  std::set<std::string> names;
  for (int c = 0; c <= static_cast<int>(StatusCode::kInternal); ++c)
    EXPECT_TRUE(names.insert(status_code_name(static_cast<StatusCode>(c))).second) << c;
  EXPECT_STREQ(status_code_name(StatusCode::kFailedPrecondition), "FailedPrecondition");
  EXPECT_STREQ(status_code_name(static_cast<StatusCode>(99)), "Unknown");
}

TEST(EnumNameTables, AValueOutsideTheTableGetsTheFallback) {
  EXPECT_STREQ(dtype_name(static_cast<DataType>(99)), "?");
  EXPECT_STREQ(stop_reason_name(static_cast<StopReason>(99)), "unknown");
  EXPECT_FALSE(pointwise_is_unary(static_cast<PointwiseMode>(99)));
  EXPECT_TRUE(pointwise_is_unary(PointwiseMode::kRelu));
  EXPECT_FALSE(pointwise_is_unary(PointwiseMode::kBiasAdd));
}

TEST(EnumNameTables, ParsersKeepTheirWording) {
  EXPECT_EQ(parse_dtype("fp12").status().message(),
            "unknown dtype 'fp12' (expected fp32, fp16, bf16, fp8_e4m3, fp8_e5m2, int8, int32 or int64)");
  EXPECT_EQ(*parse_dtype("half"), DataType::kFloat16);
  EXPECT_EQ(*parse_dtype("bfloat16"), DataType::kBFloat16);
  EXPECT_EQ(parse_reference_choice("hots").status().message(),
            "reference 'hots': expected one of auto, host, device, both");
  EXPECT_EQ(parse_heuristic_mode("C").status().message(),
            "unknown heuristic mode 'C' (expected A, B, FALLBACK, CUBLASLT or KILN)");
}

}  // namespace
}  // namespace kiln
