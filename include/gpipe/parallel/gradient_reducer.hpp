#pragma once
// Bucketed gradient reduction of one cell over its replica group (the D
// copies of the cell): started bucket by bucket as the last backward
// micro-batch makes each bucket's gradients final, completed before the
// optimizer step (docs/design.md, "Data x pipeline parallelism").

#include <mpi.h>

#include <cstdint>
#include <vector>

#include "gpipe/core/views.hpp"
#include "gpipe/pipeline/link.hpp"
#include "gpipe/pipeline/trace.hpp"

namespace gpipe {

/// Buckets: runs of consecutive layers, formed from the cell's last layer
/// backwards (the order in which backward finishes them), each closed once
/// it holds at least `bucket_bytes` of gradients; a layer is never split.
///
/// Modes:
/// - default: MPI_Iallreduce(MPI_SUM) per bucket. The result is the sum of
///   the replicas' gradients in an order the MPI library chooses (it may
///   depend on D, the placement and the message size).
/// - deterministic: MPI_Iallgather of the bucket, then every rank sums the D
///   copies in replica order 0, 1, ..., D-1 with one Kokkos kernel. The
///   result is bitwise the same on every replica and for every placement,
///   MPI library and K; it costs D x the cell's gradient bytes of buffer.
///
/// Without GPIPE_ENABLE_GPU_AWARE_MPI, a memory space that the host cannot
/// access is staged through host mirrors allocated at construction.
/// Requests of non-blocking collectives cannot be cancelled (MPI 3.1
/// section 5.12): an abandoned reducer leaves them to MPI_Finalize.
template <class T>
class GradientReducer {
 public:
  /// `gradients`: the cell's flat gradient buffer; `layer_offsets` (size
  /// layers + 1): where each local layer's gradients start in it, in layer
  /// order, the last entry its total size. `group`: the replica group
  /// (not duplicated: the caller owns it and keeps it alive).
  GradientReducer(MPI_Comm group, Vector<T> gradients, const std::vector<std::int64_t>& layer_offsets,
                  std::int64_t bucket_bytes, bool deterministic);
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  /// Records AllReduce events (one per bucket) into `tracer` (may be null).
  void set_tracer(Tracer* tracer) { tracer_ = tracer; }
  /// The execution-space instance the backward kernels write the gradients
  /// on (fenced before MPI reads them) and the replica sums run on.
  void set_execution_space(const ExecSpace& space) { space_ = space; }

  /// Emulates `link` between the replicas (pipeline.link; the same on every
  /// replica): a bucket's result is used no earlier than its modelled ring
  /// time (LinkModel::ring_allreduce_ns, or ring_allgather_ns in
  /// deterministic mode) after the bucket is posted on the last replica
  /// (found with an MPI_MAX all-reduce of the posting times, one int64 per
  /// bucket) and after the previous bucket's modelled end (one ring, so
  /// buckets are serialized). finish() then holds in a link_wait event and
  /// records the modelled interval as a wire event. Call before the first step.
  void set_link(const LinkModel& link) { link_ = link; }

  /// Local layer `layer`'s gradients are final: starts every bucket whose
  /// first layer it is, and tests the pending ones (drives MPI progress).
  void layer_ready(int layer);

  /// Starts what is not yet started, waits for everything; afterwards the
  /// gradient buffer holds the sum over the replica group. Collective over it.
  void finish();

  int buckets() const { return int(buckets_.size()); }
  /// Elements of bucket b.
  std::int64_t bucket_size(int b) const { return buckets_[size_t(b)].count; }

 private:
  struct Bucket {
    int first_layer = 0;         // lowest local layer in the bucket (the last one backward finishes)
    std::int64_t offset = 0;     // first element in the gradient buffer
    std::int64_t count = 0;      // elements
    MPI_Request request = MPI_REQUEST_NULL;
    bool started = false;
    bool done = false;
    double start = 0, end = 0;
    std::int64_t posted_ns = 0, last_posted_ns = 0;  // emulated link: here, and on the last replica
    MPI_Request posted_request = MPI_REQUEST_NULL;
  };
  void deliver(Bucket& b);
  void start(Bucket& b);
  void complete(Bucket& b);
  T* send_buffer(const Bucket& b) const;
  T* gather_buffer(const Bucket& b) const;

  MPI_Comm group_;
  int replicas_ = 1;
  bool deterministic_ = false;
  bool staged_ = false;
  Vector<T> grads_;
  typename Vector<T>::host_mirror_type grads_host_;
  Vector<T> gathered_;  // deterministic: [bucket offset x D + replica x count + i]
  typename Vector<T>::host_mirror_type gathered_host_;
  std::vector<Bucket> buckets_;
  Tracer* tracer_ = nullptr;
  LinkModel link_;
  std::int64_t ring_free_ns_ = 0;  // emulated link: the previous bucket's modelled end
  ExecSpace space_{};
};

}  // namespace gpipe
