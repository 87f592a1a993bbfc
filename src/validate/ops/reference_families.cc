// The validate layer's table of the op families' references, by OpFamilyId (kiln/graph/ops/families.h).
#include "kiln/graph/ops/families.h"
#include "validate/ops/reference_ops.h"

namespace kiln::validate_internal {

const ReferenceFamily& reference_family(OpKind kind) {
#define KILN_REFERENCE_ENTRY(F) \
  { F##_plan, F##_host, F##_device_value, F##_device_magnitude }
  static const ReferenceFamily kTable[kOpFamilyCount] = {
      KILN_REFERENCE_ENTRY(conv),      KILN_REFERENCE_ENTRY(matmul), KILN_REFERENCE_ENTRY(pointwise),
      KILN_REFERENCE_ENTRY(reduction), KILN_REFERENCE_ENTRY(norm),   KILN_REFERENCE_ENTRY(sdpa),
  };
#undef KILN_REFERENCE_ENTRY
  return family_entry(kTable, kind);
}

}  // namespace kiln::validate_internal
