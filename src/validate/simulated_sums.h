// Shared by the validate layer's host tests of the gate (gate_test.cc, gate_false_alarm_test.cc,
// accumulation_bound_test.cc): how correct kernels accumulate an output element's terms (its products) in
// fp32, so that the tests can feed the gate results a correct kernel produces.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

namespace kiln::simulated_sums {

// In order, each term rounded to fp32 and added to an fp32 accumulator.
template <class T>
float sequential(const std::vector<T>& p) {
  float acc = 0.f;
  for (T x : p) acc += static_cast<float>(x);
  return acc;
}

// As a tree: neighbours added in fp32, level by level.
template <class T>
float pairwise(const std::vector<T>& p) {
  std::vector<float> v(p.begin(), p.end());
  while (v.size() > 1) {
    std::vector<float> next((v.size() + 1) / 2);
    for (size_t i = 0; i < next.size(); ++i) next[i] = v[2 * i] + (2 * i + 1 < v.size() ? v[2 * i + 1] : 0.f);
    v.swap(next);
  }
  return v.empty() ? 0.f : v[0];
}

// Tensor-core-like: `block` products summed exactly, then added to the fp32 accumulator rounding toward zero
// (Fasi, Higham, Mikaitis & Pranesh 2021). With 16-product blocks this reproduces the H200's error on
// conv_wgrad (K = 100352): nmse ~2e-8 simulated, 1.35e-8 measured.
template <class T>
float truncated(const std::vector<T>& p, size_t block) {
  float acc = 0.f;
  for (size_t i = 0; i < p.size(); i += block) {
    double sum = 0.0;
    for (size_t j = i; j < std::min(p.size(), i + block); ++j) sum += p[j];
    const double e = static_cast<double>(acc) + sum;
    float r = static_cast<float>(e);
    if (std::fabs(static_cast<double>(r)) > std::fabs(e)) r = std::nextafter(r, 0.f);
    acc = r;
  }
  return acc;
}

}  // namespace kiln::simulated_sums
