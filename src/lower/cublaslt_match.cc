// match_cublaslt: which graphs cuBLASLt runs, and as what problem (src/lower/cublaslt_plan.h). Host code only.
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <vector>
#include <sstream>

#include "lower/cublaslt_plan.h"

namespace kiln::lower_detail {
namespace {

// A Kiln matrix X (rows x cols, strides sr and sc) as a column-major operand that holds X itself, or its transpose:
// X with sr == 1 is column-major X (ld = sc); with sc == 1 it is column-major X^T (ld = sr). `want_transposed`: the
// product needs X^T. nullopt when X has no unit stride, or a leading dimension too small for cuBLASLt.
std::optional<BltMatrix> as_operand(int64_t rows, int64_t cols, int64_t sr, int64_t sc, bool want_transposed) {
  const bool col_major = sr == 1 && sc >= std::max<int64_t>(1, rows);  // memory holds X
  const bool row_major = sc == 1 && sr >= std::max<int64_t>(1, cols);  // memory holds X^T
  if (!col_major && !row_major) return std::nullopt;
  // Both (a row or column vector): the memory that needs no transpose.
  const bool holds_x = col_major && (!row_major || !want_transposed);
  BltMatrix m;
  m.rows = holds_x ? rows : cols;
  m.cols = holds_x ? cols : rows;
  m.ld = holds_x ? std::max<int64_t>(sc, m.rows) : std::max<int64_t>(sr, m.rows);
  m.transposed = holds_x == want_transposed;
  return m;
}

bool gemm_input_dtype(DataType t) {
  return t == DataType::kFloat32 || t == DataType::kFloat16 || t == DataType::kBFloat16 || t == DataType::kFp8E4M3 ||
         t == DataType::kFp8E5M2;
}
bool is_fp8(DataType t) { return t == DataType::kFp8E4M3 || t == DataType::kFp8E5M2; }

// The batch of a rank-2 or rank-3 tensor (1 for rank 2) and its stride (0 where the batch is 1).
void batch_of(const TensorDesc& t, int64_t* count, int64_t* stride) {
  *count = t.dims.size() == 3 ? t.dims[0].value : 1;
  *stride = t.dims.size() == 3 && *count > 1 ? t.strides[0] : 0;
}

// The matmul node's operands and output as cuBLASLt's A, B and D (D = y^T = b^T a^T).
bool place_operands(const Graph& g, const Node& mm, int iy, BltProblem* p, std::string* why_not) {
  const int ia = mm.inputs[0], ib = mm.inputs[1];
  const TensorDesc &a = g.tensors[static_cast<size_t>(ia)], &b = g.tensors[static_cast<size_t>(ib)],
                   &y = g.tensors[static_cast<size_t>(iy)];
  for (const TensorDesc* t : {&a, &b, &y})
    if (t->dims.size() < 2 || t->dims.size() > 3 || t->strides.size() != t->dims.size()) {
      *why_not = "tensor '" + t->name + "' is not of rank 2 or 3";
      return false;
    }
  const size_t ra = a.dims.size(), rb = b.dims.size(), ry = y.dims.size();
  const int64_t M = a.dims[ra - 2].value, K = a.dims[ra - 1].value, N = b.dims[rb - 1].value;
  // cuBLASLt's A = b^T (N x K), its B = a^T (K x M), D = y^T (N x M) held as y's rows.
  auto A = as_operand(K, N, b.strides[rb - 2], b.strides[rb - 1], /*want_transposed=*/true);
  auto B = as_operand(M, K, a.strides[ra - 2], a.strides[ra - 1], /*want_transposed=*/true);
  auto D = as_operand(M, N, y.strides[ry - 2], y.strides[ry - 1], /*want_transposed=*/true);
  if (!A || !B || !D) {
    *why_not = "tensor '" + (!A ? b.name : !B ? a.name : y.name) + "' has no unit stride in its last two axes";
    return false;
  }
  if (D->transposed) {
    *why_not = "output '" + y.name + "' is column-major";
    return false;
  }
  int64_t batch_a, batch_b, batch_y;
  batch_of(a, &batch_a, &B->batch_stride);
  batch_of(b, &batch_b, &A->batch_stride);
  batch_of(y, &batch_y, &D->batch_stride);
  if (batch_y > INT32_MAX) {
    *why_not = "a batch of " + std::to_string(batch_y) + " (cuBLASLt counts batches in 32 bits)";
    return false;
  }
  if ((batch_a != 1 && batch_a != batch_y) || (batch_b != 1 && batch_b != batch_y)) {
    *why_not = "the batch of '" + a.name + "' or '" + b.name + "' is neither 1 nor the output's";
    return false;
  }
  A->tensor = ib;
  A->dtype = g.dtype_of(ib);
  B->tensor = ia;
  B->dtype = g.dtype_of(ia);
  D->tensor = iy;
  D->dtype = g.dtype_of(iy);
  p->a = *A;
  p->b = *B;
  p->d = *D;
  p->m = N;
  p->n = M;
  p->k = K;
  p->batch = batch_y;
  return true;
}

bool dtypes_fit(const Graph& g, const Node& mm, const BltProblem& p, std::string* why_not) {
  const DataType compute = mm.compute_dtype.value_or(g.compute_dtype);
  if (compute != DataType::kFloat32) {
    *why_not =
        std::string("the matmul computes in ") + dtype_name(compute) + " (cuBLASLt's candidates compute in fp32)";
    return false;
  }
  if (!gemm_input_dtype(p.a.dtype) || !gemm_input_dtype(p.b.dtype)) {
    *why_not = "an input is neither fp32, fp16, bf16 nor FP8";
    return false;
  }
  if (is_fp8(p.a.dtype) != is_fp8(p.b.dtype) || (!is_fp8(p.a.dtype) && p.a.dtype != p.b.dtype)) {
    *why_not = std::string("inputs of ") + dtype_name(p.b.dtype) + " and " + dtype_name(p.a.dtype) + " do not pair";
    return false;
  }
  if (p.d.dtype != DataType::kFloat32 && p.d.dtype != DataType::kFloat16 && p.d.dtype != DataType::kBFloat16) {
    *why_not =
        std::string("the output is ") + dtype_name(p.d.dtype) + " (cuBLASLt's candidates write fp32, fp16, bf16)";
    return false;
  }
  return true;
}

// `g` with its nodes in the order of the chain from its matmul (the node reading the matmul's output next, and so on;
// any other node last): a graph's signature does not depend on the order its nodes are written in, so neither may
// the match (a plan stored for one order is loaded for the other).
Graph in_chain_order(const Graph& g) {
  Graph out = g;
  std::vector<bool> taken(g.nodes.size(), false);
  out.nodes.clear();
  for (size_t i = 0; i < g.nodes.size() && out.nodes.empty(); ++i)
    if (g.nodes[i].op == OpKind::kMatmul) {
      out.nodes.push_back(g.nodes[i]);
      taken[i] = true;
    }
  for (bool grew = !out.nodes.empty(); grew;) {
    grew = false;
    const int last = out.nodes.back().outputs.empty() ? -1 : out.nodes.back().outputs[0];  // a copy: nodes grow
    for (size_t i = 0; i < g.nodes.size() && !grew; ++i)
      if (!taken[i] && last >= 0 && !g.nodes[i].inputs.empty() && g.nodes[i].inputs[0] == last) {
        out.nodes.push_back(g.nodes[i]);
        taken[i] = grew = true;
      }
  }
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (!taken[i]) out.nodes.push_back(g.nodes[i]);
  return out;
}

// A pointwise node of `mode` reading `from` (first input), or null.
const Node* pointwise_after(const Graph& g, size_t at, int from, std::initializer_list<PointwiseMode> modes) {
  if (at >= g.nodes.size()) return nullptr;
  const Node& n = g.nodes[at];
  if (n.op != OpKind::kPointwise || n.inputs.empty() || n.inputs[0] != from || n.outputs.size() != 1) return nullptr;
  for (PointwiseMode m : modes)
    if (n.pointwise.mode == m) return &n;
  return nullptr;
}

// The matmul's epilogue nodes from g.nodes[*next] on: a bias_add, then relu or gelu_tanh; sets p's bias and
// activation and moves *next past them. The tensor they end in (the matmul's own output without any), or -1 when
// a tensor between them is a graph output (cuBLASLt writes only the last).
int epilogue_of(const Graph& g, size_t* next, BltProblem* p, std::string* why_not) {
  int t = g.nodes[0].outputs[0];
  auto step = [&](const Node* n) {
    if (g.is_graph_output(t)) {
      *why_not = "'" + g.tensors[static_cast<size_t>(t)].name + "' is a graph output and node '" + n->name +
                 "' reads it (cuBLASLt writes only the epilogue's result)";
      return false;
    }
    t = n->outputs[0];
    ++*next;
    return true;
  };
  if (const Node* bias = pointwise_after(g, *next, t, {PointwiseMode::kBiasAdd})) {
    if (bias->inputs.size() != 2 || !step(bias)) return -1;
    p->bias_tensor = bias->inputs[1];
  }
  if (const Node* act =
          pointwise_after(g, *next, t, {PointwiseMode::kRelu, PointwiseMode::kGeluErf, PointwiseMode::kGeluTanh})) {
    if (!step(act)) return -1;
    p->activation = act->pointwise.mode == PointwiseMode::kRelu      ? BltProblem::Activation::kRelu
                    : act->pointwise.mode == PointwiseMode::kGeluErf ? BltProblem::Activation::kGeluErf
                                                                     : BltProblem::Activation::kGeluTanh;
  }
  if (*next < g.nodes.size() && g.nodes[*next].op == OpKind::kPointwise) {
    *why_not = "node '" + g.nodes[*next].name + "' (" + node_op_name(g.nodes[*next]) +
               ") is not an epilogue Kiln runs after a matmul (bias_add, then relu, gelu_erf or gelu_tanh)";
    return -1;
  }
  return t;
}

// The bias: a graph input with one value per column of y ([.., N], every other extent 1, a unit last stride).
bool bias_fits(const Graph& g, BltProblem& p, std::string* why_not) {
  if (p.bias_tensor < 0) return true;
  const TensorDesc& b = g.tensors[static_cast<size_t>(p.bias_tensor)];
  bool per_column = !b.dims.empty() && b.dims.back().value == p.m && !b.by_value && g.is_graph_input(p.bias_tensor) &&
                    (p.m == 1 || b.strides.back() == 1);
  for (size_t i = 0; i + 1 < b.dims.size(); ++i) per_column = per_column && b.dims[i].value == 1;
  if (!per_column) {
    *why_not = "bias '" + b.name + "' is not a graph input of one value per output column ([.., " +
               std::to_string(p.m) + "] with a unit last stride)";
    return false;
  }
  p.bias_dtype = g.dtype_of(p.bias_tensor);
  if (p.bias_dtype != DataType::kFloat32 && p.bias_dtype != DataType::kFloat16 && p.bias_dtype != DataType::kBFloat16) {
    *why_not = std::string("bias '") + b.name + "' is " + dtype_name(p.bias_dtype);
    return false;
  }
  return true;
}

}  // namespace

std::string BltProblem::describe() const {
  std::ostringstream os;
  os << "m=" << m << " n=" << n << " k=" << k;
  if (batch > 1) os << " batch=" << batch;
  os << " A " << dtype_name(a.dtype) << (a.transposed ? " T" : " N") << " B " << dtype_name(b.dtype)
     << (b.transposed ? " T" : " N") << " D " << dtype_name(d.dtype);
  if (bias_tensor >= 0) os << ", bias " << dtype_name(bias_dtype);
  if (activation == Activation::kRelu) os << ", ReLU";
  if (activation == Activation::kGeluErf) os << ", GELU (erf)";
  if (activation == Activation::kGeluTanh) os << ", GELU (tanh)";

  return os.str();
}

std::optional<BltProblem> match_cublaslt(const Graph& graph, std::string* why_not) {
  std::string scratch;
  if (!why_not) why_not = &scratch;
  std::optional<BltProblem> p = match_gemm_chain(graph, why_not);
  // Not GELU: cuBLASLt 13.1's GELU epilogue was wrong by Kiln's numerics gate in every configuration it offered
  // (bf16, K 256: err2/expected 62-84 against a bound of 4.16; bench/results/h100/cublaslt-b1), and it has no erf one.
  if (p && (p->activation == BltProblem::Activation::kGeluErf || p->activation == BltProblem::Activation::kGeluTanh)) {
    *why_not = "cuBLASLt runs no GELU epilogue Kiln trusts (" + p->describe() + ")";
    return std::nullopt;
  }
  return p;
}

std::optional<BltProblem> match_gemm_chain(const Graph& graph, std::string* why_not) {
  const Graph g = in_chain_order(graph);
  std::string scratch;
  if (!why_not) why_not = &scratch;
  if (!g.dynamic_dims.empty()) {
    *why_not = "the graph has dynamic dims";
    return std::nullopt;
  }
  if (g.nodes.empty() || g.nodes.size() > 3 || g.nodes[0].op != OpKind::kMatmul || g.nodes[0].inputs.size() != 2 ||
      g.nodes[0].outputs.size() != 1) {
    *why_not = "the graph is not one matmul with at most a bias and an activation after it";
    return std::nullopt;
  }
  const Node& mm = g.nodes[0];
  if (!g.is_graph_input(mm.inputs[0]) || !g.is_graph_input(mm.inputs[1]) ||
      g.tensors[static_cast<size_t>(mm.inputs[0])].by_value || g.tensors[static_cast<size_t>(mm.inputs[1])].by_value) {
    *why_not = "the matmul's inputs are not graph inputs in device memory";
    return std::nullopt;
  }
  BltProblem p;
  size_t next = 1;
  const int y = epilogue_of(g, &next, &p, why_not);
  if (y < 0) return std::nullopt;
  if (!g.is_graph_output(y)) {
    *why_not = "the matmul's result '" + g.tensors[static_cast<size_t>(y)].name + "' is not a graph output";
    return std::nullopt;
  }
  if (!place_operands(g, mm, y, &p, why_not) || !dtypes_fit(g, mm, p, why_not)) return std::nullopt;
  if (!bias_fits(g, p, why_not)) return std::nullopt;
  if (next < g.nodes.size()) {
    *why_not = "node '" + g.nodes[next].name + "' (" + node_op_name(g.nodes[next]) +
               ") follows the epilogue (cuBLASLt's AMAX_D is for FP8 outputs only: 13.1 offered no algorithm with it "
               "for a bf16 one)";
    return std::nullopt;
  }
  for (int out : g.outputs)
    if (out != y) {
      *why_not = "the graph has another output, '" + g.tensors[static_cast<size_t>(out)].name + "'";
      return std::nullopt;
    }
  return p;
}

}  // namespace kiln::lower_detail
