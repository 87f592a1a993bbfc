// Serving a shape from the plan of a larger one (docs/runtime.md "Padded stopgaps"). A graph whose rows along a
// dynamic dim are independent (a batch of images through a conv, the tokens of a matmul + bias + GELU, the
// rows of a norm) computes the same first n rows at any larger extent. So a new shape in a tuned bucket can
// run at once on the plan tuned for the bucket's representative (which is at least as large): the inputs
// that carry the dim are copied into scratch of the representative's size, the representative's plan runs
// there, and the first n rows of each output are copied back to the caller's buffers. No build, no
// heuristics; the price is the copies and the work on the padding rows, until the Planner's background
// build replaces it (a promotion).
//
// plan_padding decides whether that is exact for a graph, and lays out the scratch. It compares the graph
// at the requested shape with the same validated graph at the larger shape (both from reshape_graph), so it
// needs no symbols on derived tensors: a dim "varies" where its extent differs. It is exact when
//   - every tensor has at most one varying dim, no extent is larger at the request than at the plan's shape;
//   - every op keeps rows independent along it: a pointwise op (broadcasting); a matmul's M or batch dims
//     (not K, not N); a convolution's batch N (fprop and dgrad; not wgrad, which sums over N; not H or W,
//     whose padding rows would enter the border windows); a norm's first axis; a reduction over other axes
//     only; SDPA's batch;
//   - every input and output that varies holds it as its outermost dim (the largest stride; the others'
//     strides unchanged), so its real bytes are a prefix of the larger tensor's bytes.
// Anything else is NotSupported with the reason (the Planner then tries the next tuned shape, then a dynamic
// stopgap or a static build, kiln/runtime/planner.h NewShapes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/core/status.h"
#include "kiln/graph/graph.h"

namespace kiln {

// One input or output copied through scratch.
struct PaddedTensor {
  int tensor = -1;  // index in both graphs
  std::string name;
  bool output = false;        // copied back after the run; else copied in before it
  size_t real_bytes = 0;      // what the caller's buffer holds at the requested shape (what is copied)
  size_t padded_bytes = 0;    // the tensor's span at the plan's shape (its scratch)
  size_t scratch_offset = 0;  // in the scratch, kPaddingAlignment-aligned
};

constexpr size_t kPaddingAlignment = 256;

struct PaddingLayout {
  std::vector<PaddedTensor> tensors;  // the inputs first, in tensor order, then the outputs
  size_t scratch_bytes = 0;           // every tensor's scratch, each aligned; the plan's workspace follows
  std::string text() const;           // "x 2457600 of 4194304 bytes, y 2457600 of 4194304 bytes"
};

// Whether `real` can run exactly on a plan built for `larger` (see above), and where its scratch goes.
// Both are validated graphs of one structure, reshaped from one graph. NotSupported naming the node or
// tensor that prevents it; InvalidArgument when the two are not one graph at two shapes.
StatusOr<PaddingLayout> plan_padding(const Graph& real, const Graph& larger);

// ---- Split stopgaps ------------------------------------------------------------------------------------
// Under the same rules a shape of n rows also runs exactly as plans of smaller tuned shapes whose rows sum
// to n, each on its own rows of the caller's buffers (pointers offset by the rows before it): no scratch, no
// copies, no padding rows, and a shape past every tuned one (two 64s for 128) is served too. Batch 48 with
// batch 32 and 16 tuned runs the 32 plan on rows 0..31 and the 16 plan on rows 32..47.

// At most `max_parts` extents from `available` (each may repeat), largest first, that sum to `n`; empty
// when the greedy choice (the largest that fits, again and again) finds none. Greedy is the fewest parts
// for powers of two, the common representatives; for other sets it may miss a sum that exists.
std::vector<int64_t> split_extents(int64_t n, std::vector<int64_t> available, int max_parts);

// Where no sum exists, a cover: the fewest parts (at most `max_parts`) of extents from `available` that reach
// past `n` rows. The first parts run on rows [0, e1), [e1, e1 + e2), ..., and the last one on the final rows
// [n - e_k, n), over rows the part before it has computed too: batch 6 with batch 4 tuned runs the 4 plan on
// rows 0..3, then on rows 2..5. Of the covers with the fewest parts, the one whose parts sum least (the fewest
// rows computed twice: 13 with 7 and 10 tuned is 7 + 7), found by a bounded search; with powers of two that is
// the largest extent for every part but the last, and the smallest that reaches `n` for it. Exact under the
// same rules as a split (each row's outputs depend only on that row's inputs), so long as no output shares
// memory with an input: the last part would read rows the one before it has overwritten (the Planner's split
// executor refuses such a call). Empty where every extent is larger than `n`, or more than `max_parts` parts
// would be needed.
std::vector<int64_t> cover_extents(int64_t n, std::vector<int64_t> available, int max_parts);

// One input or output whose rows are split: its index, and the bytes between two rows along its varying dim.
struct SplitTensor {
  int tensor = -1;
  std::string name;
  size_t row_bytes = 0;
};

// The inputs and outputs of `real` that vary between it and `part` (the same validated graph at a shape
// smaller along one dim), with their row sizes. NotSupported where plan_padding(part, real) is: rows that
// depend on each other along the dim, or a dim that is not outermost.
StatusOr<std::vector<SplitTensor>> split_rows(const Graph& real, const Graph& part);

}  // namespace kiln
