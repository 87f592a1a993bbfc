// kiln/validate/device_check.h: the numerics gate's data where the work is (issue 11). Random inputs are generated
// on the device by the same counter-based generator as make_random_inputs (bit for bit); the reference is
// computed once per graph and shape and kept on the device; each candidate's outputs are compared with it
// in one pass per output on the device, and only the figures of kiln/validate/numerics.h (a few hundred bytes per
// output) travel to the host. Nothing here does host work that grows with the tensors, but
// download_reference, which exists for tests and for callers that want the host copy.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "kiln/core/status.h"
#include "kiln/cuda/cuda_handles.h"
#include "kiln/graph/graph.h"
#include "kiln/validate/numerics.h"
#include "kiln/validate/reference.h"

namespace kiln {

// Fills every graph input make_random_inputs fills (kiln/validate/reference.h), in place on the device, with the
// values make_random_inputs gives for `seed`, in the tensor's dtype through its strides (elements between
// strided positions are left alone). `buffers` maps tensor index -> device pointer (e.g.
// GraphBuffers::pointers()); by-value tensors have no buffer and are skipped. InvalidArgument when a
// graph input has no buffer. Enqueued on `stream`; not synchronised, but for a ragged attention graph's offsets
// (reference_common.h ragged_offsets), copied from the host and waited for.
Status generate_inputs_on_device(const Graph& graph, uint64_t seed, const std::map<int, void*>& buffers,
                                 cudaStream_t stream = nullptr);

// A reference held on the device: per graph output (graph.outputs order), packed row-major doubles of its
// values, and with magnitudes its magnitudes and scales (kiln/validate/reference.h ReferenceOutputs).
struct DeviceReference {
  ReferenceKind kind = ReferenceKind::kDevice;
  struct Output {
    int64_t count = 0;  // elements
    DeviceBuffer values, magnitudes, scales;
  };
  std::vector<Output> outputs;
  bool has_magnitudes() const { return !outputs.empty() && outputs[0].magnitudes.size() > 0; }
  size_t bytes() const;  // device memory held
};

// The device reference with magnitudes and scales (double precision, as run_device_reference_with_
// magnitudes) of the graph on inputs already on the device: `inputs` maps each graph input's tensor
// index to its buffer, in its dtype through its strides; by-value tensors take TensorDesc::value. The
// result stays on the device. Errors as run_device_reference's, InvalidArgument for a missing input.
StatusOr<DeviceReference> device_reference_on_device(const Graph& graph, const std::map<int, void*>& inputs);
// A host reference uploaded (magnitudes and scales when it has them).
StatusOr<DeviceReference> upload_reference(const Graph& graph, const ReferenceOutputs& reference);
// The host copy of a device reference (ReferenceOutputs with the graph's strides and dtypes).
StatusOr<ReferenceOutputs> download_reference(const Graph& graph, const DeviceReference& reference);

// Compares a graph's outputs on the device with a DeviceReference that has magnitudes: one pass per output
// computes what check_outputs computes on the host (kiln/validate/numerics.h: the per-element band, nmse, the error
// size and bias of the expected-error model, the worst index and the first offenders) with the same
// per-element code (src/validate/gate_math.h); the report is check_outputs' for the same data, its sums
// equal to rounding (they are added in another order). Scratch memory is allocated once, in create().
class DeviceChecker {
 public:
  static StatusOr<DeviceChecker> create(const Graph& graph, const CheckOptions& options = {});
  DeviceChecker(DeviceChecker&&) noexcept;
  DeviceChecker& operator=(DeviceChecker&&) noexcept;
  ~DeviceChecker();

  // `outputs`: tensor index -> device pointer of each graph output (its dtype, through its strides).
  // Enqueues the passes on `stream` and waits for their figures. InvalidArgument when an output has no
  // pointer or the reference does not match the graph.
  StatusOr<CheckReport> check(const std::map<int, void*>& outputs, const DeviceReference& reference,
                              cudaStream_t stream = nullptr);

 private:
  struct State;
  explicit DeviceChecker(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace kiln
