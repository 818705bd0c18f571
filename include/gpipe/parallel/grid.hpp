#pragma once
// The D x K rank grid of hybrid data x pipeline parallelism: D replicas, each
// a K-cell pipeline, on D x K ranks (docs/design.md, "Data x pipeline
// parallelism").

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "gpipe/io/deck.hpp"
#include "gpipe/pipeline/micro_batch.hpp"

namespace gpipe {

/// Which ranks are adjacent (consecutive) in the communicator:
/// - Replica: the D copies of a cell, rank = cell x D + replica. The
///   gradient all-reduce of a cell stays among consecutive ranks (inside a
///   node when D divides the ranks per node); the smaller pipeline messages
///   cross nodes. The default.
/// - Pipeline: the K cells of a replica, rank = replica x K + cell.
/// With D = 1 or K = 1 both give rank = cell (resp. replica).
enum class Placement { Replica, Pipeline };

/// Parses "replica" or "pipeline" (as validated by the deck).
Placement parse_placement(const std::string& name);
const char* to_string(Placement placement);

/// The grid's shape and the rank <-> (replica, cell) mapping.
struct GridShape {
  int replicas = 1;  ///< D
  int cells = 1;     ///< K
  Placement placement = Placement::Replica;

  int ranks() const { return replicas * cells; }
  /// Rank of cell `cell` of replica `replica`.
  int rank_of(int replica, int cell) const;
  int replica_of(int rank) const;
  int cell_of(int rank) const;
  /// Ranks of every replica's pipeline, in cell order: layout()[r][k] = rank_of(r, k).
  std::vector<std::vector<int>> layout() const;
  /// "2 replicas x 2 cells, placement replica: pipelines [0, 2] [1, 3]".
  std::string describe() const;
};

/// The grid of deck.parallel on `ranks` ranks: K = parallel.cells (0: all
/// ranks), D = ranks / K. Computed identically on every rank without any
/// communication. Throws InputError for K not dividing the rank count, for
/// D > training.batch_size (a replica without samples), and for a shard
/// smaller than training.micro_batches.
GridShape grid_shape(const Deck& deck, int ranks);

/// Shard `replica` of a mini-batch of n samples over `replicas` replicas:
/// contiguous, in replica order, sizes differ by at most one (the larger
/// first, as micro-batches); a shard may be empty when n < replicas.
MicroBatch shard_of(std::int64_t n, int replicas, int replica);

/// The two communicators of one rank, split from `comm` (collective; the
/// caller's duplicate) and freed on destruction:
/// - pipeline(): the K cells of this rank's replica, rank = cell;
/// - replica_group(): the D copies of this rank's cell, rank = replica.
class Grid {
 public:
  Grid(MPI_Comm comm, const GridShape& shape);
  ~Grid();
  Grid(const Grid&) = delete;
  Grid& operator=(const Grid&) = delete;

  const GridShape& shape() const { return shape_; }
  int replica() const { return replica_; }
  int cell() const { return cell_; }
  MPI_Comm pipeline() const { return pipeline_; }
  MPI_Comm replica_group() const { return replica_group_; }

 private:
  GridShape shape_;
  int replica_ = 0, cell_ = 0;
  MPI_Comm pipeline_ = MPI_COMM_NULL;
  MPI_Comm replica_group_ = MPI_COMM_NULL;
};

}  // namespace gpipe
