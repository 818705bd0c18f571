#include "gpipe/parallel/grid.hpp"

#include <fmt/format.h>

#include "gpipe/core/error.hpp"

namespace gpipe {

Placement parse_placement(const std::string& name) {
  if (name == "pipeline") return Placement::Pipeline;
  require(name == "replica",
          fmt::format("parallel.placement: unknown placement '{}' (expected replica or pipeline)", name));
  return Placement::Replica;
}

const char* to_string(Placement placement) {
  return placement == Placement::Pipeline ? "pipeline" : "replica";
}

int GridShape::rank_of(int replica, int cell) const {
  return placement == Placement::Replica ? cell * replicas + replica : replica * cells + cell;
}

int GridShape::replica_of(int rank) const {
  return placement == Placement::Replica ? rank % replicas : rank / cells;
}

int GridShape::cell_of(int rank) const {
  return placement == Placement::Replica ? rank / replicas : rank % cells;
}

std::vector<std::vector<int>> GridShape::layout() const {
  std::vector<std::vector<int>> out(static_cast<size_t>(replicas));
  for (int r = 0; r < replicas; ++r)
    for (int k = 0; k < cells; ++k) out[size_t(r)].push_back(rank_of(r, k));
  return out;
}

std::string GridShape::describe() const {
  std::string pipelines;
  for (const auto& ranks : layout()) pipelines += fmt::format(" [{}]", fmt::join(ranks, ", "));
  return fmt::format("{} replica{} x {} cell{}, placement {}: pipelines{}", replicas,
                     replicas == 1 ? "" : "s", cells, cells == 1 ? "" : "s", to_string(placement),
                     pipelines);
}

GridShape grid_shape(const Deck& deck, int ranks) {
  GridShape g;
  g.placement = parse_placement(deck.parallel.placement);
  g.cells = deck.parallel.cells > 0 ? deck.parallel.cells : ranks;
  if (ranks % g.cells != 0)
    throw InputError(fmt::format("parallel.cells: {} cells per pipeline do not divide the {} MPI "
                                 "ranks (ranks = replicas x cells)",
                                 g.cells, ranks));
  g.replicas = ranks / g.cells;
  const std::int64_t N = deck.training.batch_size;
  const int M = deck.training.micro_batches;
  if (g.replicas > N)
    throw InputError(fmt::format("parallel: {} replicas ({} ranks / {} cells) but "
                                 "training.batch_size is {}: every replica needs at least one "
                                 "sample of the mini-batch",
                                 g.replicas, ranks, g.cells, N));
  const std::int64_t smallest = N / g.replicas;
  if (smallest < M)
    throw InputError(fmt::format("training.micro_batches: {} micro-batches per replica, but the "
                                 "smallest of the {} shards of a {}-sample mini-batch has {} "
                                 "samples (need batch_size >= replicas x micro_batches = {})",
                                 M, g.replicas, N, smallest, std::int64_t(g.replicas) * M));
  if (g.replicas > 1)
    check_micro_batch_statistics(deck.model, smallest / M,
                                 fmt::format("training.micro_batches = {} of the smallest {}-sample shard "
                                             "of a {}-sample batch on {} replicas",
                                             M, smallest, N, g.replicas));
  return g;
}

MicroBatch shard_of(std::int64_t n, int replicas, int replica) {
  const std::int64_t base = n / replicas, extra = n % replicas, r = replica;
  return {r * base + std::min(r, extra), base + (r < extra ? 1 : 0)};
}

Grid::Grid(MPI_Comm comm, const GridShape& shape) : shape_(shape) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  require(size == shape.ranks(), fmt::format("parallel: the grid has {} x {} ranks but the "
                                             "communicator has {}",
                                             shape.replicas, shape.cells, size));
  replica_ = shape.replica_of(rank);
  cell_ = shape.cell_of(rank);
  MPI_Comm_split(comm, replica_, cell_, &pipeline_);
  MPI_Comm_split(comm, cell_, replica_, &replica_group_);
  MPI_Comm_set_errhandler(pipeline_, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(replica_group_, MPI_ERRORS_RETURN);
}

Grid::~Grid() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (pipeline_ != MPI_COMM_NULL) MPI_Comm_free(&pipeline_);
  if (replica_group_ != MPI_COMM_NULL) MPI_Comm_free(&replica_group_);
}

}  // namespace gpipe
