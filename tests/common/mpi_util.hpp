#pragma once
// Helpers of the MPI tests: ranks, a fresh shared directory, the 9-layer model
// with every layer type and a small CNN.

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

/// A small CNN of 9 layers on input [2, 6, 7] (NCHW), 3 classes:
/// [2, 6, 7] -> conv [3, 6, 7] -> pool [3, 3, 3] -> conv [4, 2, 2] -> pool [4, 1, 1] -> [4] -> [3]
const std::string kSmallCnn =
    "[{type: conv2d, filters: 3, kernel: 3, padding: same}, {type: batchnorm2d}, {type: relu}, "
    "{type: maxpool2d, size: 2}, "
    "{type: conv2d, filters: 4, kernel: 2}, {type: avgpool2d, size: 2}, {type: flatten}, "
    "{type: dropout, rate: 0.25}, {type: dense, units: 3}]";

}  // namespace gpipe::test
