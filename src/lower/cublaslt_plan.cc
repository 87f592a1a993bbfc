// BltPlan: cuBLASLt's heuristic candidates, a plan built by identity, its bytes, its execution
// (src/lower/cublaslt_plan.h). Descriptors live in pre-allocated opaque structs (cublasLt*Init): nothing to free
// but the per-thread cuBLASLt handles.
#include "lower/cublaslt_plan.h"

#include <cublasLt.h>

#include <array>
#include <cstring>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>

namespace kiln::lower_detail {
namespace {

constexpr char kMagic[] = "KILNBLT1\n";  // serialize()'s first bytes
constexpr uint32_t kAlignment = 16;      // the alignment the candidates are chosen for (execute() checks it)

Status blt_status(cublasStatus_t s, const std::string& what) {
  if (s == CUBLAS_STATUS_SUCCESS) return Status::ok();
  const std::string msg = what + ": cuBLASLt " + cublasLtGetStatusString(s);
  if (s == CUBLAS_STATUS_NOT_SUPPORTED || s == CUBLAS_STATUS_INVALID_VALUE || s == CUBLAS_STATUS_ARCH_MISMATCH)
    return not_supported(msg);
  if (s == CUBLAS_STATUS_ALLOC_FAILED) return unavailable(msg);
  return internal_error(msg);
}
#define KILN_BLT(call, what) KILN_RETURN_IF_ERROR(blt_status((call), (what)))

cudaDataType to_cuda(DataType t) {
  switch (t) {
    case DataType::kFloat32: return CUDA_R_32F;
    case DataType::kFloat16: return CUDA_R_16F;
    case DataType::kBFloat16: return CUDA_R_16BF;
    case DataType::kFp8E4M3: return CUDA_R_8F_E4M3;
    case DataType::kFp8E5M2: return CUDA_R_8F_E5M2;
    default: return CUDA_R_32F;  // match_cublaslt admits no other
  }
}

// One cuBLASLt handle per device for the process, made when a plan is listed, built or loaded, never inside
// execute() (which may run under a stream capture): a cuBLASLt handle keeps no per-call state (stream and
// workspace are arguments), and cuBLASLt's functions may share one across threads. Kept until the process ends.
class DeviceHandles {
 public:
  ~DeviceHandles() {
    for (auto& [device, h] : by_device_) cublasLtDestroy(h);
  }
  // The current device's handle, made on first use.
  StatusOr<cublasLtHandle_t> get() {
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess) return unavailable("cuBLASLt: no current CUDA device");
    std::lock_guard<std::mutex> lock(mu_);
    auto it = by_device_.find(device);
    if (it != by_device_.end()) return it->second;
    cublasLtHandle_t h = nullptr;
    KILN_BLT(cublasLtCreate(&h), "creating a cuBLASLt handle");
    by_device_[device] = h;
    return h;
  }

 private:
  std::mutex mu_;
  std::map<int, cublasLtHandle_t> by_device_;
};

StatusOr<cublasLtHandle_t> device_handle() {
  static DeviceHandles handles;
  return handles.get();
}

Status init_layout(const BltMatrix& m, int64_t batch, cublasLtMatrixLayoutOpaque_t* out) {
  KILN_BLT(cublasLtMatrixLayoutInit(out, to_cuda(m.dtype), static_cast<uint64_t>(m.rows), static_cast<uint64_t>(m.cols),
                                    m.ld),
           "describing a matrix");
  if (batch <= 1) return Status::ok();
  const int32_t count = static_cast<int32_t>(batch);
  const int64_t stride = m.batch_stride;
  KILN_BLT(cublasLtMatrixLayoutSetAttribute(out, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)),
           "setting a batch count");
  KILN_BLT(cublasLtMatrixLayoutSetAttribute(out, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)),
           "setting a batch stride");
  return Status::ok();
}

cublasLtEpilogue_t epilogue_of(const BltProblem& p) {
  const bool relu = p.activation == BltProblem::Activation::kRelu;
  if (p.bias_tensor >= 0) return relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
  return relu ? CUBLASLT_EPILOGUE_RELU : CUBLASLT_EPILOGUE_DEFAULT;
}

// The epilogue's attributes: its kind, the bias (and its dtype where it is not D's).
Status set_epilogue(const BltProblem& p, const void* bias, cublasLtMatmulDescOpaque_t* out) {
  const uint32_t epilogue = epilogue_of(p);
  if (epilogue == CUBLASLT_EPILOGUE_DEFAULT) return Status::ok();
  KILN_BLT(cublasLtMatmulDescSetAttribute(out, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)),
           "setting the epilogue");
  if (p.bias_tensor < 0) return Status::ok();
  alignas(256) static float placeholder[4];  // heuristics and checks judge its alignment; execute() sets the caller's
  const void* ptr = bias ? bias : &placeholder;
  KILN_BLT(cublasLtMatmulDescSetAttribute(out, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &ptr, sizeof(ptr)),
           "setting the bias");
  // Always: cuBLASLt's default is D's dtype except for FP8 kernels (where it is not fp32 for an fp32 D).
  const int32_t type = to_cuda(p.bias_dtype);
  KILN_BLT(cublasLtMatmulDescSetAttribute(out, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &type, sizeof(type)),
           "setting the bias dtype");
  return Status::ok();
}

// The matmul descriptor, in the caller's memory: fp32 compute and scale, the operands' transposes, the epilogue.
Status init_desc(const BltProblem& p, const void* bias, cublasLtMatmulDescOpaque_t* out) {
  KILN_BLT(cublasLtMatmulDescInit(out, CUBLAS_COMPUTE_32F, CUDA_R_32F), "describing a matmul");
  const int32_t ta = p.a.transposed ? CUBLAS_OP_T : CUBLAS_OP_N, tb = p.b.transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
  KILN_BLT(cublasLtMatmulDescSetAttribute(out, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)), "setting A's op");
  KILN_BLT(cublasLtMatmulDescSetAttribute(out, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)), "setting B's op");
  return set_epilogue(p, bias, out);
}

struct Layouts {
  cublasLtMatrixLayoutOpaque_t a, b, d;
};

Status init_layouts(const BltProblem& p, Layouts* l) {
  KILN_RETURN_IF_ERROR(init_layout(p.a, p.batch, &l->a));
  KILN_RETURN_IF_ERROR(init_layout(p.b, p.batch, &l->b));
  return init_layout(p.d, p.batch, &l->d);
}

// The identity of an algorithm: its id and every configuration attribute, named (kiln/core/engine_config.h).
struct ConfigAttr {
  cublasLtMatmulAlgoConfigAttributes_t attr;
  const char* name;
  size_t size;  // bytes cuBLASLt stores it in
};
constexpr ConfigAttr kConfigAttrs[] = {
    {CUBLASLT_ALGO_CONFIG_TILE_ID, "tile", 4},
    {CUBLASLT_ALGO_CONFIG_SPLITK_NUM, "splitk", 4},
    {CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, "reduction", 4},
    {CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, "swizzle", 4},
    {CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, "custom", 4},
    {CUBLASLT_ALGO_CONFIG_STAGES_ID, "stages", 4},
    {CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, "inner", 2},
    {CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, "cluster", 2},
};

StatusOr<EngineConfig> identity_of(const cublasLtMatmulAlgo_t& algo) {
  int32_t id = -1;
  size_t written = 0;
  KILN_BLT(cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof(id), &written),
           "reading an algorithm's id");
  EngineConfig c;
  c.engine_id = kCublasLtEngineBase + id;
  for (const ConfigAttr& a : kConfigAttrs) {
    uint32_t v32 = 0;
    uint16_t v16 = 0;
    void* buf = a.size == 4 ? static_cast<void*>(&v32) : static_cast<void*>(&v16);
    KILN_BLT(cublasLtMatmulAlgoConfigGetAttribute(&algo, a.attr, buf, a.size, &written),
             std::string("reading an algorithm's ") + a.name);
    // splitk is an int32_t in cuBLASLt; the others unsigned: both read back as the same non-negative number.
    c.knobs[a.name] = a.size == 4 ? static_cast<int64_t>(static_cast<int32_t>(v32)) : v16;
  }
  return c;
}

StatusOr<cublasLtMatmulAlgo_t> algo_from_identity(cublasLtHandle_t h, const BltProblem& p, const EngineConfig& c) {
  cublasLtMatmulAlgo_t algo;
  const int id = static_cast<int>(c.engine_id - kCublasLtEngineBase);
  const cudaDataType d = to_cuda(p.d.dtype);
  KILN_BLT(cublasLtMatmulAlgoInit(h, CUBLAS_COMPUTE_32F, CUDA_R_32F, to_cuda(p.a.dtype), to_cuda(p.b.dtype), d, d, id,
                                  &algo),
           "cuBLASLt algorithm " + std::to_string(id) + " for " + p.describe());
  for (const ConfigAttr& a : kConfigAttrs) {
    auto it = c.knobs.find(a.name);
    if (it == c.knobs.end()) return invalid_argument(c.identity() + ": no knob '" + a.name + "'");
    const int64_t limit = a.size == 4 ? std::numeric_limits<int32_t>::max() : std::numeric_limits<uint16_t>::max();
    if (it->second < 0 || it->second > limit)  // no two texts for one algorithm
      return invalid_argument(c.identity() + ": knob '" + a.name + "' is out of its range 0-" + std::to_string(limit));
    uint32_t v32 = static_cast<uint32_t>(it->second);
    uint16_t v16 = static_cast<uint16_t>(it->second);
    const void* buf = a.size == 4 ? static_cast<const void*>(&v32) : static_cast<const void*>(&v16);
    KILN_BLT(cublasLtMatmulAlgoConfigSetAttribute(&algo, a.attr, buf, a.size), c.identity() + ": setting " + a.name);
  }
  if (c.knobs.size() != std::size(kConfigAttrs))
    return invalid_argument(c.identity() + ": knobs cuBLASLt does not have");
  return algo;
}

// cuBLASLt's heuristic list for the problem: algorithms that fit `max_workspace`, in its order.
StatusOr<std::vector<cublasLtMatmulHeuristicResult_t>> heuristic(cublasLtHandle_t h, const BltProblem& p, int count,
                                                                 int64_t max_workspace) {
  Layouts l;
  cublasLtMatmulDescOpaque_t desc;
  KILN_RETURN_IF_ERROR(init_layouts(p, &l));
  KILN_RETURN_IF_ERROR(init_desc(p, nullptr, &desc));
  cublasLtMatmulPreferenceOpaque_t pref;
  KILN_BLT(cublasLtMatmulPreferenceInit(&pref), "a heuristic preference");
  const uint64_t ws = static_cast<uint64_t>(std::max<int64_t>(0, max_workspace));
  KILN_BLT(cublasLtMatmulPreferenceSetAttribute(&pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)),
           "a workspace preference");
  for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    KILN_BLT(cublasLtMatmulPreferenceSetAttribute(&pref, attr, &kAlignment, sizeof(kAlignment)),
             "an alignment preference");
  std::vector<cublasLtMatmulHeuristicResult_t> results(static_cast<size_t>(std::max(1, count)));
  int returned = 0;
  cublasStatus_t s =
      cublasLtMatmulAlgoGetHeuristic(h, &desc, &l.a, &l.b, &l.d, &l.d, &pref, count, results.data(), &returned);
  if (s == CUBLAS_STATUS_NOT_SUPPORTED || s == CUBLAS_STATUS_INVALID_VALUE) returned = 0;  // offers none
  else KILN_RETURN_IF_ERROR(blt_status(s, "cuBLASLt's heuristic for " + p.describe()));
  results.resize(static_cast<size_t>(std::max(0, returned)));
  std::vector<cublasLtMatmulHeuristicResult_t> out;
  for (const auto& r : results)
    if (r.state == CUBLAS_STATUS_SUCCESS && static_cast<int64_t>(r.workspaceSize) <= max_workspace) out.push_back(r);
  return out;
}

}  // namespace

int64_t cublaslt_version() { return static_cast<int64_t>(cublasLtGetVersion()); }

struct BltPlan::Impl {
  cublasLtHandle_t handle = nullptr;  // the device's (device_handle) where it was built or loaded: execute() runs there
  BltProblem problem;
  Layouts layouts;
  cublasLtMatmulAlgo_t algo;
  EngineConfig config;
  int64_t workspace = 0;

  // Checks `algo` against the problem on this device; sets the workspace it needs.
  Status check(cublasLtHandle_t h) {
    KILN_RETURN_IF_ERROR(init_layouts(problem, &layouts));
    cublasLtMatmulDescOpaque_t desc;
    KILN_RETURN_IF_ERROR(init_desc(problem, nullptr, &desc));
    cublasLtMatmulHeuristicResult_t r;
    std::memset(&r, 0, sizeof(r));
    KILN_BLT(cublasLtMatmulAlgoCheck(h, &desc, &layouts.a, &layouts.b, &layouts.d, &layouts.d, &algo, &r),
             config.identity() + " for " + problem.describe());
    workspace = static_cast<int64_t>(r.workspaceSize);
    return Status::ok();
  }
};

BltPlan::BltPlan() : impl_(std::make_unique<Impl>()) {}
BltPlan::~BltPlan() = default;
BltPlan::BltPlan(BltPlan&&) noexcept = default;
BltPlan& BltPlan::operator=(BltPlan&&) noexcept = default;

const EngineConfig& BltPlan::config() const { return impl_->config; }
int64_t BltPlan::workspace_size() const { return impl_->workspace; }

namespace {
// The epilogues Kiln runs with cuBLASLt: none, a bias, a ReLU (match_cublaslt refuses the rest; this keeps a GELU
// problem from being run as a plain one if one ever reaches here).
Status epilogue_supported(const BltProblem& p) {
  if (p.activation == BltProblem::Activation::kNone || p.activation == BltProblem::Activation::kRelu)
    return Status::ok();
  return not_supported("cuBLASLt runs no GELU epilogue Kiln trusts (" + p.describe() + ")");
}
}  // namespace

StatusOr<std::vector<EngineConfig>> BltPlan::candidates(const BltProblem& p, int max_count, int64_t max_workspace) {
  KILN_RETURN_IF_ERROR(epilogue_supported(p));
  KILN_ASSIGN_OR_RETURN(cublasLtHandle_t h, device_handle());
  KILN_ASSIGN_OR_RETURN(auto results, heuristic(h, p, max_count, max_workspace));
  std::vector<EngineConfig> out;
  for (const auto& r : results) {
    KILN_ASSIGN_OR_RETURN(EngineConfig c, identity_of(r.algo));
    if (std::find(out.begin(), out.end(), c) == out.end()) out.push_back(std::move(c));
  }
  return out;
}

StatusOr<BltPlan> BltPlan::build(const BltProblem& p, const EngineConfig& config) {
  if (!is_cublaslt_engine(config.engine_id))
    return invalid_argument(config.identity() + " is not a cuBLASLt algorithm");
  KILN_RETURN_IF_ERROR(epilogue_supported(p));
  KILN_ASSIGN_OR_RETURN(cublasLtHandle_t h, device_handle());
  BltPlan plan;
  plan.impl_->handle = h;  // execute() runs on this device's handle, with no lookup or lock per call
  plan.impl_->problem = p;
  plan.impl_->config = config;
  // The heuristic's own algorithm where it offers this identity (it may carry more than the named attributes),
  // else one made from the identity.
  bool found = false;
  KILN_ASSIGN_OR_RETURN(auto offered, heuristic(h, p, 64, int64_t{1} << 40));
  for (const auto& r : offered) {
    auto c = identity_of(r.algo);
    if (c.is_ok() && *c == config) {
      plan.impl_->algo = r.algo;
      found = true;
      break;
    }
  }
  if (!found) {
    auto algo = algo_from_identity(h, p, config);
    if (!algo.is_ok()) return not_supported(algo.status().message());
    plan.impl_->algo = *algo;
    auto held = identity_of(plan.impl_->algo);  // what cuBLASLt kept of the identity is the identity
    if (!held.is_ok() || *held != config)
      return not_supported(config.identity() + ": cuBLASLt keeps it as " +
                           (held.is_ok() ? held->identity() : held.status().message()));
  }
  KILN_RETURN_IF_ERROR(plan.impl_->check(h));
  return plan;
}

bool BltPlan::is_blob(const std::vector<uint8_t>& bytes) { return has_magic(bytes, kMagic); }

std::vector<uint8_t> BltPlan::serialize() const {
  nlohmann::json j;
  j["cublaslt_version"] = cublaslt_version();
  j["identity"] = impl_->config.identity();
  j["workspace"] = impl_->workspace;
  std::array<uint64_t, 8> words{};
  static_assert(sizeof(impl_->algo) == sizeof(words), "cublasLtMatmulAlgo_t is eight words");
  std::memcpy(words.data(), &impl_->algo, sizeof(words));
  j["algo"] = words;
  const std::string text = kMagic + j.dump();
  return std::vector<uint8_t>(text.begin(), text.end());
}

StatusOr<BltPlan> BltPlan::deserialize(const BltProblem& p, const std::vector<uint8_t>& bytes) {
  if (!is_blob(bytes)) return corruption("the plan bytes are not a cuBLASLt plan's");
  const size_t n = sizeof(kMagic) - 1;
  nlohmann::json j = nlohmann::json::parse(bytes.begin() + static_cast<long>(n), bytes.end(), nullptr,
                                           /*allow_exceptions=*/false);
  const bool shaped = j.is_object() && j.contains("cublaslt_version") && j["cublaslt_version"].is_number_integer() &&
                      j.contains("identity") && j["identity"].is_string() && j.contains("algo") &&
                      j["algo"].is_array() && j["algo"].size() == 8;
  if (!shaped) return corruption("a cuBLASLt plan's bytes do not hold its version, identity and algorithm");
  std::array<uint64_t, 8> words{};
  for (size_t i = 0; i < 8; ++i) {
    if (!j["algo"][i].is_number_unsigned()) return corruption("a cuBLASLt plan's algorithm is not eight words");
    words[i] = j["algo"][i].get<uint64_t>();
  }
  const int64_t made_with = j["cublaslt_version"].get<int64_t>();
  if (made_with != cublaslt_version())
    return not_supported("a cuBLASLt plan made with cuBLASLt " + std::to_string(made_with) +
                         ", and this process loads " + std::to_string(cublaslt_version()) +
                         ": its algorithm may not mean the same here; re-tune");
  auto config = EngineConfig::parse(j["identity"].get<std::string>());
  if (!config.is_ok() || !is_cublaslt_engine(config->engine_id))
    return corruption("a cuBLASLt plan's identity is not a cuBLASLt algorithm's");
  // The algorithm made again from its identity, as build() makes it: the stored words are only compared, never
  // handed to cuBLASLt (bytes from a store are not trusted with cuBLASLt's internals).
  auto plan = build(p, *config);
  if (!plan.is_ok()) return plan.status().with_context("a stored cuBLASLt plan");
  if (std::memcmp(&plan->impl_->algo, words.data(), sizeof(words)) != 0)
    return corruption("a cuBLASLt plan's algorithm is not the one its identity " + config->identity() +
                      " makes with this cuBLASLt");
  return plan;
}

Status BltPlan::execute(cudaStream_t stream, const std::map<int, void*>& ptrs, void* workspace) const {
  const BltProblem& p = impl_->problem;
  auto ptr = [&](int tensor) -> void* {
    auto it = ptrs.find(tensor);
    return it == ptrs.end() ? nullptr : it->second;
  };
  // cuBLASLt's A and B (Kiln's b and a: cublaslt_plan.h).
  void *a = ptr(p.a.tensor), *b = ptr(p.b.tensor), *d = ptr(p.d.tensor);
  void* bias = p.bias_tensor >= 0 ? ptr(p.bias_tensor) : nullptr;
  if (!a || !b || !d || (p.bias_tensor >= 0 && !bias)) return invalid_argument("execute: a matmul buffer is missing");
  for (void* q : {a, b, d, p.bias_tensor >= 0 ? bias : a})
    if (reinterpret_cast<uintptr_t>(q) % kAlignment != 0)
      return invalid_argument("execute: plan " + impl_->config.identity() + " needs " + std::to_string(kAlignment) +
                              "-byte aligned buffers");
  if (impl_->workspace > 0 && !workspace) return invalid_argument("execute: no workspace");
  cublasLtMatmulDescOpaque_t desc;
  KILN_RETURN_IF_ERROR(init_desc(p, bias, &desc));
  const float alpha = 1.0f, beta = 0.0f;
  const Layouts& l = impl_->layouts;
  // The layouts are only read: cuBLASLt takes them as non-const handles.
  auto* la = const_cast<cublasLtMatrixLayoutOpaque_t*>(&l.a);
  auto* lb = const_cast<cublasLtMatrixLayoutOpaque_t*>(&l.b);
  auto* ld = const_cast<cublasLtMatrixLayoutOpaque_t*>(&l.d);
  KILN_BLT(cublasLtMatmul(impl_->handle, &desc, &alpha, a, la, b, lb, &beta, d, ld, d, ld, &impl_->algo, workspace,
                          static_cast<size_t>(impl_->workspace), stream),
           "executing " + impl_->config.identity() + " (" + p.describe() + ")");
  return Status::ok();
}

}  // namespace kiln::lower_detail
