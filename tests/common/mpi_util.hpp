#pragma once
// Helpers of the MPI tests: ranks, and the 9-layer model with every layer type.

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdint>
#include <filesystem>
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

/// A fresh, empty directory shared by all ranks of MPI_COMM_WORLD:
/// TempDir() + "gpipe_<prefix>_<name>_<world size>". Collective: rank 0
/// removes and creates it, then all ranks meet at a barrier.
inline std::string shared_dir(const std::string& prefix, const std::string& name) {
  const std::string dir = ::testing::TempDir() + "gpipe_" + prefix + "_" + name + "_" + std::to_string(world_size());
  if (world_rank() == 0) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  return dir;
}

/// 9 layers with every layer type, Dropout included; input 6, 3 classes.
const std::string kNineLayers =
    "[{type: dense, units: 10}, {type: gelu}, {type: layer_norm}, {type: dropout, rate: 0.2}, "
    "{type: dense, units: 8}, {type: tanh}, {type: dense, units: 5}, {type: relu}, "
    "{type: dense, units: 3}]";
constexpr std::int64_t kNineLayersInput = 6;

}  // namespace gpipe::test
