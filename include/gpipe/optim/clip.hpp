#pragma once
// Gradient clipping by global norm (Pascanu et al. 2013, "On the difficulty
// of training recurrent neural networks", Algorithm 2; PyTorch's
// clip_grad_norm_): g <- g * clip / ||g|| when ||g|| > clip, with ||g|| the
// L2 norm over every parameter of the whole model, whatever the cells and
// replicas it is spread over.

#include <mpi.h>

#include <cstdint>
#include <vector>

#include "gpipe/core/views.hpp"

namespace gpipe {

/// out[s] = sum of values(i)^2 over i in [offsets[s], offsets[s + 1]), in
/// double, in the fixed lane order of core/fixed_sum.hpp (one team per
/// segment): the same bits at every thread count and on every backend.
/// offsets: non-decreasing, size segments + 1 (e.g. Cell::parameter_offsets).
/// Fences `space` (the sums come back to the host).
template <class T>
std::vector<double> segment_squared_norms(const ExecSpace& space, ConstVector<T> values,
                                          const std::vector<std::int64_t>& offsets);

/// The global L2 norm over the cells of one pipeline: each cell passes the
/// squared norms of its layers (segment_squared_norms over its
/// parameter_offsets); they are gathered on every rank of `pipeline` in cell
/// order (one MPI_Allgatherv: the agreed reduction) and added in global
/// layer order in double, then the square root. Every layer's sum is the same
/// whatever the partition, and the order of the additions is the layer
/// order, so the norm is bitwise the same for every K and partition.
/// Collective over `pipeline` (the K cells of a replica; the replicas hold
/// the same reduced gradients, so each replica's norm is the same).
double global_norm(const std::vector<double>& layer_squares, MPI_Comm pipeline);

/// The factor clip_grad_norm applies: clip / norm when norm > clip > 0,
/// else 1 (no change; also for a non-finite norm, which the trainer's
/// non-finite check handles).
double clip_factor(double norm, double clip);

/// values(i) *= factor for every i (one element-wise kernel on `space`).
template <class T>
void scale_in_place(const ExecSpace& space, Vector<T> values, T factor);

}  // namespace gpipe
