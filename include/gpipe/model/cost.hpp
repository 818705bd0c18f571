#pragma once
// Per-layer costs by which a partition is balanced (see partition.hpp).

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "gpipe/layers/factory.hpp"
#include "gpipe/model/layer_seconds.hpp"

namespace gpipe {

/// Cost of every layer of `model` (size L, layer order) for a micro-batch of
/// `micro_batch` samples, by `mode`:
///  - "params": parameter count;
///  - "flops": forward + backward FLOPs (Layer::flops; the first layer
///    computes no input gradient);
///  - "time": measured forward + backward seconds (time_layer), measured on
///    rank 0 of `comm` and broadcast, so every rank gets the same costs and
///    hence the same partition.
/// Collective over `comm` for "time" only. Throws InputError for a layer the
/// factory rejects.
template <class T>
std::vector<double> layer_costs(const ModelSpec& model, const std::string& mode,
                                std::int64_t micro_batch, MPI_Comm comm);

/// Seconds of one forward + backward of layer `index` of `model` on a
/// (batch, in_features) micro-batch: the mean of 3 repetitions after one
/// warm-up, fenced. Allocates the layer and its buffers. Not collective.
template <class T>
double time_layer(const ModelSpec& model, std::int64_t index, std::int64_t batch);

/// Seconds of layer `index`'s forward, and of its backward split as the
/// runner runs it: backward_input and backward_weights for a layer that
/// splits (Layer::splits_backward), else the fused backward in
/// backward_input. Each part is the mean of 3 repetitions after one
/// warm-up, fenced; the model's first layer computes no input gradient.
/// For gpipe-plan --calibrate. Not collective.
template <class T>
LayerSeconds time_layer_parts(const ModelSpec& model, std::int64_t index, std::int64_t batch);

}  // namespace gpipe
