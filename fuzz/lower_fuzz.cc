// libFuzzer entry: valid graphs, lowered to cuDNN Frontend and compiled deviceless for the recorded H200
// (profiles/h200.json). The cuDNN library is needed, a GPU is not.
//
// The bytes are a recipe, not JSON: a FuzzedDataProvider picks a main op (conv fprop/dgrad/wgrad, matmul,
// pointwise, reduction, layer/RMS norm, sdpa) with its shapes, attributes, dtypes and layouts, then a chain
// of up to KILN_FUZZ_MAX_NODES - 1 more nodes (unary and binary pointwise with broadcast or by-value
// operands, reductions, norms, matmuls, casts), and the graph outputs. The recipe is written as a spec and
// goes through parse_spec_string, so only graphs Kiln accepts reach lowering, and a crash input replays as a
// spec (KILN_FUZZ_PRINT=1 prints it). An input that starts with '{' is taken as spec JSON as is (the
// examples seed the corpus that way).
//
// Must hold for every graph that validates: lowering and plan building never crash, hang, throw or trip
// ASan/UBSan; a failure is a Status with a message; a built plan serializes and its identity parses back
// to the same configuration. Internal statuses (exit 10, "a bug") are counted, each distinct one is printed
// with its spec, and with KILN_FUZZ_INTERNAL_ABORTS=1 they abort.
//
// Environment: KILN_FUZZ_MAX_NODES (default 40: graphs over cuDNN's 50-operation limit crash inside
// the frontend until validation refuses them, a known bug being fixed separately; set it higher to look
// for that), KILN_FUZZ_PROFILE (default profiles/h200.json), KILN_FUZZ_PRINT=1 (print each spec and its
// outcome to stderr).
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiln/graph/graph.h"
#include "kiln/lower/lower.h"
#include "kiln/spec/spec.h"

namespace {

using nlohmann::json;
using Dims = std::vector<int64_t>;

int env_int(const char* name, int def) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : def;
}
bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && std::strcmp(v, "0") != 0;
}

const kiln::DeviceProfile& profile() {
  static const kiln::DeviceProfile p = [] {
    const char* path = std::getenv("KILN_FUZZ_PROFILE");
    auto r = kiln::load_device_profile(path ? path : KILN_SOURCE_DIR "/profiles/h200.json");
    if (!r.is_ok()) {
      std::fprintf(stderr, "lower_fuzz: %s\n", r.status().to_string().c_str());
      std::abort();
    }
    return *r;
  }();
  return p;
}

// Builds a spec from the recipe bytes. Shapes are tracked here so that most recipes validate; the ones
// that do not are still useful (they exercise validation) and cheap.
class Recipe {
 public:
  explicit Recipe(FuzzedDataProvider& p, int max_nodes) : p_(p), max_nodes_(max_nodes) {}

  json build() {
    static const char* io[] = {"fp16", "bf16", "fp32"};
    spec_["name"] = "fuzz";
    spec_["io_dtype"] = io[p_.ConsumeIntegralInRange(0, 2)];
    if (p_.ConsumeBool()) spec_["intermediate_dtype"] = p_.ConsumeBool() ? "fp16" : "bf16";
    if (rare(8)) spec_["compute_dtype"] = "fp16";
    main_op();
    int more = p_.ConsumeIntegralInRange(0, std::max(0, max_nodes_ - 1));
    for (int i = 0; i < more && p_.remaining_bytes() > 0 && nodes_.size() < static_cast<size_t>(max_nodes_); ++i)
      epilogue();
    json outs = json::array({cur_.name});
    if (produced_.size() > 1 && rare(4)) {  // also read an intermediate back
      const Value& extra = produced_[p_.ConsumeIntegralInRange<size_t>(0, produced_.size() - 2)];
      if (extra.name != cur_.name) outs.push_back(extra.name);
    }
    if (dynamic_) spec_["dynamic"] = {{"batch", batch_}};  // used by the main op's first input
    spec_["tensors"] = tensors_;
    spec_["nodes"] = nodes_;
    spec_["outputs"] = outs;
    return spec_;
  }

 private:
  struct Value {
    std::string name;
    Dims dims;
  };

  int64_t pick(int64_t lo, int64_t hi) { return p_.ConsumeIntegralInRange<int64_t>(lo, hi); }
  // True one time in n; false once the bytes run out, so a short recipe gives the common graph.
  bool rare(int n) { return p_.ConsumeIntegralInRange(0, n - 1) == n - 1; }
  // Extents: mostly small, sometimes a power of two or an odd size cuDNN's engines treat specially.
  int64_t extent(int64_t hi) {
    switch (p_.ConsumeIntegralInRange(0, 3)) {
      case 0: return int64_t{1} << pick(0, 7);
      case 1: return pick(1, 8);
      default: return pick(1, hi);
    }
  }
  std::string fresh(const char* stem) { return std::string(stem) + std::to_string(counter_++); }

  // A graph input: dims, and a layout or explicit (padded) strides, sometimes a dtype of its own.
  std::string input(const char* stem, const Dims& dims, bool image, bool batch_dynamic = false,
                    const char* dtype = nullptr) {
    std::string name = fresh(stem);
    json t;
    json d = json::array();
    for (size_t i = 0; i < dims.size(); ++i) {
      if (i == 0 && batch_dynamic) d.push_back("batch");
      else d.push_back(dims[i]);
    }
    t["dims"] = d;
    int how = p_.ConsumeIntegralInRange(0, 7);
    if (image && dims.size() >= 3 && how < 4) {
      t["layout"] = how < 3 ? "NHWC" : "NCHW";
    } else if (how == 7) {  // explicit row-major strides with padding in one axis
      Dims s(dims.size());
      int64_t acc = 1;
      size_t padded = p_.ConsumeIntegralInRange<size_t>(0, dims.size() - 1);
      for (size_t i = dims.size(); i-- > 0;) {
        s[i] = acc;
        acc *= dims[i] + (i == padded ? pick(0, 3) : 0);
      }
      t["strides"] = s;
    }
    if (dtype) t["dtype"] = dtype;
    tensors_[name] = t;
    return name;
  }

  void node(const std::string& op, const std::vector<std::string>& ins, const Dims& out_dims,
            json attrs = json::object()) {
    std::string out = fresh("t");
    json n = attrs;
    n["name"] = fresh("n");
    n["op"] = op;
    n["inputs"] = ins;
    n["outputs"] = json::array({out});
    if (rare(16)) n["compute_dtype"] = "fp32";
    nodes_.push_back(n);
    if (rare(8)) {  // declare the output: a dtype (a cast) or a layout
      static const char* dt[] = {"fp32", "fp16", "bf16", "fp8_e4m3", "int8"};
      json t;
      if (p_.ConsumeBool()) t["dtype"] = dt[p_.ConsumeIntegralInRange(0, 4)];
      else if (out_dims.size() >= 3) t["layout"] = p_.ConsumeBool() ? "NHWC" : "NCHW";
      if (p_.ConsumeBool()) t["dims"] = out_dims;
      tensors_[out] = t;
    }
    cur_ = Value{out, out_dims};
    produced_.push_back(cur_);
  }

  json conv_attrs(size_t spatial, Dims& pre, Dims& post, Dims& stride, Dims& dil) {
    pre.assign(spatial, 0);
    post.assign(spatial, 0);
    stride.assign(spatial, 1);
    dil.assign(spatial, 1);
    json a;
    for (size_t i = 0; i < spatial; ++i) {
      pre[i] = pick(0, 2);
      post[i] = p_.ConsumeBool() ? pre[i] : pick(0, 2);
      stride[i] = rare(3) ? pick(1, 3) : 1;
      dil[i] = rare(4) ? 2 : 1;
    }
    a["pre_padding"] = pre;
    a["post_padding"] = post;
    a["stride"] = stride;
    a["dilation"] = dil;
    return a;
  }

  void main_op() {
    batch_ = extent(16);
    dynamic_ = rare(4);
    static const char* fp8[] = {"fp8_e4m3", "fp8_e5m2"};
    switch (p_.ConsumeIntegralInRange(0, 8)) {
      case 0:
      case 1:
      case 2: {  // conv fprop / dgrad / wgrad
        int kind = p_.ConsumeIntegralInRange(0, 2);
        size_t spatial = p_.ConsumeIntegralInRange<size_t>(1, 3);
        int64_t groups = rare(6) ? pick(2, 4) : 1;
        int64_t c = extent(64) * groups, k = extent(64) * groups;
        Dims x{batch_, c}, w{k, c / groups}, pre, post, stride, dil;
        json a = conv_attrs(spatial, pre, post, stride, dil);
        if (groups > 1) a["groups"] = groups;
        Dims y{batch_, k};
        for (size_t i = 0; i < spatial; ++i) {
          int64_t f = pick(1, 5), in = extent(40);
          int64_t o = (in + pre[i] + post[i] - dil[i] * (f - 1) - 1) / stride[i] + 1;
          if (o < 1) {
            in += dil[i] * (f - 1);
            o = (in + pre[i] + post[i] - dil[i] * (f - 1) - 1) / stride[i] + 1;
          }
          x.push_back(in);
          w.push_back(f);
          y.push_back(o);
        }
        const char* dt = rare(8) ? fp8[p_.ConsumeBool()] : nullptr;
        if (kind == 0) {
          std::string xi = input("x", x, true, dynamic_, dt), wi = input("w", w, true, false, dt);
          node("conv_fprop", {xi, wi}, y, a);
        } else if (kind == 1) {
          std::string dy = input("dy", y, true, dynamic_, dt), wi = input("w", w, true, false, dt);
          node("conv_dgrad", {dy, wi}, x, a);
        } else {
          std::string xi = input("x", x, true, dynamic_, dt), dy = input("dy", y, true, dynamic_, dt);
          node("conv_wgrad", {xi, dy}, w, a);
        }
        return;
      }
      case 3:
      case 4: {  // matmul, batched and broadcast
        int64_t m = extent(256), kk = extent(256), n = extent(256);
        size_t batch_rank = p_.ConsumeIntegralInRange<size_t>(0, 2);
        Dims a, b, c;
        for (size_t i = 0; i < batch_rank; ++i) {
          int64_t e = i == 0 ? batch_ : extent(8);
          a.push_back(e);
          b.push_back(p_.ConsumeBool() ? e : 1);
          c.push_back(e);
        }
        a.insert(a.end(), {m, kk});
        b.insert(b.end(), {kk, n});
        c.insert(c.end(), {m, n});
        const char* dt = rare(6) ? fp8[p_.ConsumeBool()] : nullptr;
        bool dyn = dynamic_ && batch_rank > 0;
        if (!dyn) dynamic_ = false;
        std::string ai = input("a", a, false, dyn, dt), bi = input("b", b, false, false, dt);
        node("matmul", {ai, bi}, c);
        return;
      }
      case 5: {  // a pointwise graph on inputs
        Dims x = shape(4);
        std::string xi = input("x", x, true, dynamic_);
        if (p_.ConsumeBool()) node(unary_op(), {xi}, x);
        else node(p_.ConsumeBool() ? "add" : "mul", {xi, input("y", broadcastable(x), true)}, x);
        return;
      }
      case 6: {  // reduction
        Dims x = shape(4);
        std::string xi = input("x", x, true, dynamic_);
        reduction(xi, x);
        return;
      }
      case 7: {  // norm
        Dims x = shape(4);
        if (x.size() < 2) x.push_back(extent(64));
        std::string xi = input("x", x, true, dynamic_);
        norm(xi, x);
        return;
      }
      default: {  // sdpa
        static const char* dt[] = {"fp16", "bf16"};
        const char* t = dt[p_.ConsumeBool()];
        int64_t hk = extent(8), h = hk * (p_.ConsumeBool() ? 1 : pick(1, 4));
        int64_t sq = extent(256), skv = p_.ConsumeBool() ? sq : extent(256);
        int64_t d = 8 * pick(1, 32), dv = rare(4) ? 8 * pick(1, 32) : d;
        std::string q = input("q", {batch_, h, sq, d}, false, dynamic_, t);
        std::string k = input("k", {batch_, hk, skv, d}, false, dynamic_, t);
        std::string v = input("v", {batch_, hk, skv, dv}, false, dynamic_, t);
        json a;
        if (p_.ConsumeBool()) a["causal"] = true;
        if (rare(4)) a["attn_scale"] = 0.125;
        node("sdpa", {q, k, v}, {batch_, h, sq, dv}, a);
        if (p_.ConsumeBool()) {
          json o;
          o["dtype"] = t;
          tensors_[cur_.name] = o;
        }
        return;
      }
    }
  }

  Dims shape(size_t max_rank) {
    size_t rank = p_.ConsumeIntegralInRange<size_t>(1, max_rank);
    Dims x{batch_};
    while (x.size() < rank) x.push_back(extent(64));
    return x;
  }
  // The same rank, each extent kept or 1 (numpy broadcast); sometimes fewer leading axes.
  Dims broadcastable(const Dims& x) {
    Dims b;
    for (int64_t e : x) b.push_back(p_.ConsumeBool() ? e : 1);
    if (b.size() > 1 && rare(4)) b.erase(b.begin());
    return b;
  }
  const char* unary_op() {
    static const char* ops[] = {"relu", "gelu_erf", "gelu_tanh", "silu", "sigmoid", "tanh", "exp", "identity"};
    return ops[p_.ConsumeIntegralInRange(0, 7)];
  }

  void reduction(const std::string& xi, const Dims& x) {
    static const char* ops[] = {"reduce_sum", "reduce_max", "reduce_min", "reduce_amax"};
    Dims y = x;
    json a;
    if (p_.ConsumeBool()) {
      json axes = json::array();
      for (size_t i = 0; i < x.size(); ++i)
        if (p_.ConsumeBool()) {
          axes.push_back(p_.ConsumeBool() ? static_cast<int64_t>(i)
                                          : static_cast<int64_t>(i) - static_cast<int64_t>(x.size()));
          y[i] = 1;
        }
      if (axes.empty()) {
        axes.push_back(static_cast<int64_t>(x.size()) - 1);
        y.back() = 1;
      }
      a["axes"] = axes;
    } else {
      std::fill(y.begin(), y.end(), 1);
    }
    node(ops[p_.ConsumeIntegralInRange(0, 3)], {xi}, y, a);
  }

  void norm(const std::string& xi, const Dims& x) {
    Dims s = x;
    s[0] = 1;
    bool layer = p_.ConsumeBool();
    std::vector<std::string> ins{xi, input("scale", s, true)};
    if (layer || rare(4)) ins.push_back(input("bias", s, true));
    json a;
    if (p_.ConsumeBool()) a["epsilon"] = p_.ConsumeBool() ? 1e-6 : 0.1;
    node(layer ? "layer_norm" : "rms_norm", ins, x, a);
  }

  void epilogue() {
    Value x = cur_;
    switch (p_.ConsumeIntegralInRange(0, 9)) {
      case 0:
      case 1:
      case 2: node(unary_op(), {x.name}, x.dims); return;
      case 3:
      case 4: {  // binary with a new (broadcast) operand
        static const char* ops[] = {"add", "sub", "mul", "div", "min", "max"};
        std::string op = ops[p_.ConsumeIntegralInRange(0, 5)];
        Dims b = broadcastable(x.dims);
        bool swap = rare(4);
        std::string bi = input("b", b, true);
        node(op, swap ? std::vector<std::string>{bi, x.name} : std::vector<std::string>{x.name, bi}, x.dims);
        return;
      }
      case 5: {  // bias_add (channel axis for images, else the last) or scale by a by-value scalar
        if (p_.ConsumeBool()) {
          Dims b(x.dims.size(), 1);
          b[x.dims.size() >= 3 ? 1 : x.dims.size() - 1] = x.dims[x.dims.size() >= 3 ? 1 : x.dims.size() - 1];
          node("bias_add", {x.name, input("bias", b, true)}, x.dims);
        } else {
          std::string s = fresh("s");
          tensors_[s] = {{"value", p_.ConsumeBool() ? 0.5 : 448.0}};
          node("scale", {x.name, s}, x.dims);
        }
        return;
      }
      case 6: {  // binary with an earlier value of the same shape (a diamond)
        for (auto it = produced_.rbegin(); it != produced_.rend(); ++it)
          if (it->name != x.name && it->dims == x.dims) {
            node(p_.ConsumeBool() ? "add" : "mul", {x.name, it->name}, x.dims);
            return;
          }
        node(unary_op(), {x.name}, x.dims);
        return;
      }
      case 7: reduction(x.name, x.dims); return;
      case 8:
        if (x.dims.size() >= 2) norm(x.name, x.dims);
        else node(unary_op(), {x.name}, x.dims);
        return;
      default: {  // matmul with a new weight: [..., M, K] x [K, N]
        if (x.dims.size() < 2) {
          node(unary_op(), {x.name}, x.dims);
          return;
        }
        Dims w(x.dims.size(), 1), y = x.dims;
        w[w.size() - 2] = x.dims.back();
        w.back() = y.back() = extent(128);
        node("matmul", {x.name, input("w", w, false)}, y);
        return;
      }
    }
  }

  FuzzedDataProvider& p_;
  int max_nodes_;
  json spec_ = json::object(), tensors_ = json::object(), nodes_ = json::array();
  Value cur_;
  std::vector<Value> produced_;
  int counter_ = 0;
  int64_t batch_ = 1;
  bool dynamic_ = false;
};

long g_valid = 0, g_built = 0, g_internal = 0, g_device_query = 0;
std::set<std::string> g_internal_seen;  // distinct Internal messages (their first line, numbers left out)

std::string message_family(const std::string& m) {
  std::string f;
  for (char ch : m.substr(0, m.find('\n'))) {
    if (ch >= '0' && ch <= '9') {
      if (f.empty() || f.back() != '#') f += '#';
    } else f += ch;
  }
  return f.substr(0, 160);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const int max_nodes = env_int("KILN_FUZZ_MAX_NODES", 40);
  static const bool print = env_flag("KILN_FUZZ_PRINT");
  static const bool internal_aborts = env_flag("KILN_FUZZ_INTERNAL_ABORTS");
  std::string text;
  uint8_t path = 0;  // which plan-building path: heuristics' choice, or list + build one configuration
  if (size > 0 && data[0] == '{') {
    text.assign(reinterpret_cast<const char*>(data), size);
    path = static_cast<uint8_t>(size);
  } else {
    FuzzedDataProvider p(data, size);
    path = p.ConsumeIntegral<uint8_t>();
    text = Recipe(p, max_nodes).build().dump();
  }
  kiln::ValidateOptions vo;
  vo.target_sm_version = profile().sm_version;
  kiln::StatusOr<kiln::Graph> g = kiln::parse_spec_string(text, "fuzz.json", vo);
  if (print) std::fprintf(stderr, "spec: %s\n", text.c_str());
  if (!g.is_ok()) {
    if (print) std::fprintf(stderr, "invalid: %s\n", g.status().message().c_str());
    return 0;
  }
  if (g->nodes.size() > static_cast<size_t>(max_nodes)) return 0;  // see KILN_FUZZ_MAX_NODES above
  ++g_valid;

  kiln::LowerTarget target;
  target.profile = &profile();
  auto outcome = [&](const kiln::Status& st, const char* stage) {
    if (st.is_ok()) return;
    if (st.message().empty()) std::abort();  // every failure says what failed
    if (st.code() == kiln::StatusCode::kInternal) {
      // The frontend's sdpa node asks the CUDA runtime for the device even for a recorded profile; without
      // a driver that is an environment limit (kiln compile reports it as "needs a GPU"), not a bug here.
      if (st.message().find("cuda_get_device(&device) failed") != std::string::npos) {
        ++g_device_query;
        return;
      }
      ++g_internal;
      if (print || g_internal_seen.insert(message_family(st.message())).second)
        std::fprintf(stderr, "lower_fuzz: Internal at %s: %s\n  spec: %s\n", stage, st.message().substr(0, 400).c_str(),
                     text.c_str());
      if (internal_aborts) std::abort();
    } else if (print) {
      std::fprintf(stderr, "%s: %s\n", stage, st.message().substr(0, 300).c_str());
    }
  };
  auto lg = kiln::LoweredGraph::create(*g, target);
  if (!lg.is_ok()) {
    outcome(lg.status(), "create");
    return 0;
  }
  if (path % 4 == 3) {
    // Every configuration the heuristics offer, then build one of them through the custom-plan path.
    auto cands =
        lg->list_candidates({kiln::HeuristicMode::kA, kiln::HeuristicMode::kB, kiln::HeuristicMode::kFallback});
    if (!cands.is_ok()) {
      outcome(cands.status(), "list_candidates");
      return 0;
    }
    const auto& c = (*cands)[(path / 4) % cands->size()];
    kiln::Status st = lg->build_config(c.config);
    outcome(st, "build_config");
    if (st.is_ok() && !(lg->config() == c.config)) std::abort();
  } else {
    kiln::Status st = lg->build_heuristic();
    outcome(st, "build_heuristic");
  }
  if (!lg->has_plan()) return 0;
  ++g_built;
  auto bytes = lg->serialize();
  if (!bytes.is_ok() || bytes->empty()) std::abort();  // a built plan serializes
  auto again = kiln::EngineConfig::parse(lg->config().identity());
  if (!again.is_ok() || !(*again == lg->config())) std::abort();  // its identity parses back
  if (print) std::fprintf(stderr, "built %s, %zu B\n", lg->config().identity().c_str(), bytes->size());
  return 0;
}

// Totals at exit, for fuzz/README.md (valid graphs lowered, plans built, Internal statuses).
namespace {
struct Totals {
  ~Totals() {
    if (g_valid)
      std::fprintf(stderr,
                   "lower_fuzz: %ld valid graphs lowered, %ld plans built, %ld Internal statuses (%zu distinct), "
                   "%ld stopped by the frontend's device query\n",
                   g_valid, g_built, g_internal, g_internal_seen.size(), g_device_query);
  }
} g_totals;
}  // namespace
