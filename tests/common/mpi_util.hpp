#pragma once
// Helpers of the MPI tests: ranks, and the 9-layer model with every layer type.

#include <mpi.h>

#include <cstdint>
#include <string>

namespace gpipe::test {

inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

inline int world_size() {
  int s = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

/// 9 layers with every layer type, Dropout included; input 6, 3 classes.
const std::string kNineLayers =
    "[{type: dense, units: 10}, {type: gelu}, {type: layer_norm}, {type: dropout, rate: 0.2}, "
    "{type: dense, units: 8}, {type: tanh}, {type: dense, units: 5}, {type: relu}, "
    "{type: dense, units: 3}]";
constexpr std::int64_t kNineLayersInput = 6;

}  // namespace gpipe::test
