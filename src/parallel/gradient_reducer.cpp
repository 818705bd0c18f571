#include "gpipe/parallel/gradient_reducer.hpp"
#include "gpipe/core/precision.hpp"

#include <Kokkos_Core.hpp>

#include <algorithm>

#include "gpipe/config.hpp"
#include "gpipe/core/kokkos_compat.hpp"
#include "gpipe/pipeline/transport.hpp"
#include "gpipe/pipeline/wait.hpp"

namespace gpipe {
namespace {

// out(i) = ((g(i) + g(n + i)) + g(2n + i)) + ...: replica order, the same on every
// rank. A free function because CUDA's extended lambdas may not sit in a private
// member function.
template <class GatheredView, class OutView>
void sum_in_replica_order(const ExecSpace& space, const GatheredView& g, const OutView& out, int D, std::int64_t n) {
  Kokkos::parallel_for(
      "gpipe::GradientReducer::sum_in_replica_order", Kokkos::RangePolicy<ExecSpace>(space, 0, n),
      KOKKOS_LAMBDA(const std::int64_t i) {
        auto sum = g(i);
        for (int r = 1; r < D; ++r) sum += g(std::int64_t(r) * n + i);
        out(i) = sum;
      });
}

}  // namespace

template <class T>
GradientReducer<T>::GradientReducer(MPI_Comm group, Vector<T> gradients,
                                    const std::vector<std::int64_t>& layer_offsets,
                                    std::int64_t bucket_bytes, bool deterministic)
    : group_(group), deterministic_(deterministic), grads_(gradients) {
  MPI_Comm_size(group, &replicas_);
#ifdef GPIPE_ENABLE_GPU_AWARE_MPI
  staged_ = false;
#else
  staged_ = !Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible;
#endif
  // Buckets from the last layer backwards; empty (parameter-free) runs are dropped.
  const int layers = int(layer_offsets.size()) - 1;
  std::int64_t high = layer_offsets.back();
  for (int l = layers - 1; l >= 0; --l) {
    const std::int64_t low = layer_offsets[size_t(l)];
    const bool full = (high - low) * std::int64_t(sizeof(T)) >= bucket_bytes;
    if ((full || l == 0) && high > low) {
      Bucket b;
      b.first_layer = l;
      b.offset = low;
      b.count = high - low;
      buckets_.push_back(b);
      high = low;
    }
  }
  if (staged_) grads_host_ = Kokkos::create_mirror_view(grads_);
  if (deterministic_) {
    gathered_ = Vector<T>(Kokkos::view_alloc(Kokkos::WithoutInitializing, "gpipe::GradientReducer::gathered"),
                          grads_.extent(0) * size_t(replicas_));
    if (staged_) gathered_host_ = Kokkos::create_mirror_view(gathered_);
  }
}

template <class T>
T* GradientReducer<T>::send_buffer(const Bucket& b) const {
  return (staged_ ? grads_host_.data() : grads_.data()) + b.offset;
}

template <class T>
T* GradientReducer<T>::gather_buffer(const Bucket& b) const {
  return (staged_ ? gathered_host_.data() : gathered_.data()) + b.offset * replicas_;
}

template <class T>
void GradientReducer<T>::start(Bucket& b) {
  if (b.started) return;
  b.start = tracer_ ? tracer_->now() : 0;
  const auto range = std::make_pair(b.offset, b.offset + b.count);
  if (staged_) {
    Kokkos::deep_copy(space_, Kokkos::subview(grads_host_, range), Kokkos::subview(grads_, range));
  }
  // The backward kernels (and the staging copy) wrote these gradients on space_.
  compat::fence(space_, "gpipe::GradientReducer::start");
  const int count = int(b.count);
  if (link_.enabled()) {  // when the collective can start: once the last replica posted it
    b.posted_ns = link_clock_ns();
    MPI_Iallreduce(&b.posted_ns, &b.last_posted_ns, 1, MPI_INT64_T, MPI_MAX, group_, &b.posted_request);
  }
  if (deterministic_)
    MPI_Iallgather(send_buffer(b), count, mpi_type<T>(), gather_buffer(b), count, mpi_type<T>(), group_,
                   &b.request);
  else
    MPI_Iallreduce(MPI_IN_PLACE, send_buffer(b), count, mpi_type<T>(), MPI_SUM, group_, &b.request);
  b.started = true;
}

template <class T>
void GradientReducer<T>::complete(Bucket& b) {
  if (b.request != MPI_REQUEST_NULL) {
    wait_request(&b.request, MPI_STATUS_IGNORE);
    b.end = tracer_ ? tracer_->now() : 0;
  }
  if (tracer_) tracer_->record(EventKind::AllReduce, -1, b.start, b.end, b.count * std::int64_t(sizeof(T)));
  if (link_.enabled()) deliver(b);
  const auto range = std::make_pair(b.offset, b.offset + b.count);
  if (deterministic_) {
    const auto gathered_range = std::make_pair(b.offset * replicas_, (b.offset + b.count) * replicas_);
    if (staged_)
      Kokkos::deep_copy(space_, Kokkos::subview(gathered_, gathered_range),
                        Kokkos::subview(gathered_host_, gathered_range));
    sum_in_replica_order(space_, Kokkos::subview(gathered_, gathered_range),
                         Kokkos::subview(grads_, range), replicas_, b.count);
  } else if (staged_) {
    Kokkos::deep_copy(space_, Kokkos::subview(grads_, range), Kokkos::subview(grads_host_, range));
  }
  b.done = true;
}

template <class T>
void GradientReducer<T>::deliver(Bucket& b) {
  wait_request(&b.posted_request, MPI_STATUS_IGNORE);
  const std::int64_t bytes = b.count * std::int64_t(sizeof(T));
  const std::int64_t start = std::max(b.last_posted_ns, ring_free_ns_);
  ring_free_ns_ = start + (deterministic_ ? link_.ring_allgather_ns(bytes, replicas_)
                                          : link_.ring_allreduce_ns(bytes, replicas_));
  if (tracer_) tracer_->record_ns(EventKind::Wire, -1, start, ring_free_ns_, bytes);
  if (link_clock_ns() >= ring_free_ns_) return;
  const Tracer::Scope hold(tracer_, EventKind::LinkWait, -1);
  hold_until(ring_free_ns_);
}

template <class T>
void GradientReducer<T>::layer_ready(int layer) {
  for (auto& b : buckets_) {
    if (b.first_layer == layer) start(b);
    if (b.started && !b.done && b.request != MPI_REQUEST_NULL) {
      int flag = 0;
      MPI_Test(&b.request, &flag, MPI_STATUS_IGNORE);  // progress; the data is handled in finish()
      if (flag && tracer_) b.end = tracer_->now();
    }
  }
}

template <class T>
void GradientReducer<T>::finish() {
  for (auto& b : buckets_) start(b);
  for (auto& b : buckets_) complete(b);
  for (auto& b : buckets_) b.started = b.done = false;
}

#define GPIPE_INSTANTIATE(T) template class GradientReducer<T>;
GPIPE_FOR_EACH_SCALAR(GPIPE_INSTANTIATE)
#undef GPIPE_INSTANTIATE

}  // namespace gpipe
