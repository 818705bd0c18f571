#include "gpipe/pipeline/transport.hpp"

#include <fmt/format.h>

#include "gpipe/config.hpp"
#include "gpipe/core/error.hpp"
#include "gpipe/core/kokkos_compat.hpp"

namespace gpipe {

namespace {
std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  return std::string(text, size_t(length));
}
}  // namespace

Communicator::Communicator(MPI_Comm parent) {
  MPI_Comm_dup(parent, &comm_);
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
}

Communicator::~Communicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

template <>
MPI_Datatype mpi_type<float>() {
  return MPI_FLOAT;
}
template <>
MPI_Datatype mpi_type<double>() {
  return MPI_DOUBLE;
}

template <class T>
BoundaryBuffer<T>::BoundaryBuffer(const std::string& label, std::int64_t capacity_rows,
                                  std::int64_t cols)
    : device_(Kokkos::view_alloc(Kokkos::WithoutInitializing, label), capacity_rows, cols) {
  if (staged()) host_ = Kokkos::create_mirror_view(device_);
}

template <class T>
bool BoundaryBuffer<T>::staged() const {
#ifdef GPIPE_ENABLE_GPU_AWARE_MPI
  return false;
#else
  return !Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible;
#endif
}

template <class T>
T* BoundaryBuffer<T>::mpi_buffer() const {
  return staged() ? host_.data() : device_.data();
}

template <class T>
Matrix<T> BoundaryBuffer<T>::rows(std::int64_t rows) const {
  return Matrix<T>(device_.data(), size_t(rows), device_.extent(1));
}

template <class T>
void BoundaryBuffer<T>::post_recv(MPI_Comm comm, int source, int tag, std::int64_t expected_rows,
                                  const char* what, int micro_batch) {
  MPI_Comm_rank(comm, &rank_);
  receiving_ = true;
  peer_ = source;
  expected_rows_ = expected_rows;
  what_ = what;
  micro_batch_ = micro_batch;
  const int rc = MPI_Irecv(mpi_buffer(), int(device_.span()), mpi_type<T>(), source, tag, comm,
                           &request_);
  if (rc != MPI_SUCCESS)
    throw PipelineError(fmt::format("rank {}: MPI_Irecv of the {} from rank {} failed: {}", rank_,
                                    describe(), source, mpi_error_text(rc)));
}

template <class T>
std::string BoundaryBuffer<T>::describe() const {
  return micro_batch_ < 0 ? std::string(what_) : fmt::format("{} of micro-batch {}", what_, micro_batch_);
}

template <class T>
void BoundaryBuffer<T>::post_send(MPI_Comm comm, int dest, int tag, std::int64_t rows) {
  MPI_Comm_rank(comm, &rank_);
  receiving_ = false;
  peer_ = dest;
  const std::int64_t count = rows * cols();
  if (staged()) {
    Kokkos::deep_copy(host_, device_);
  } else {
    compat::fence("gpipe::BoundaryBuffer::post_send");
  }
  const int rc = MPI_Isend(mpi_buffer(), int(count), mpi_type<T>(), dest, tag, comm, &request_);
  if (rc != MPI_SUCCESS)
    throw PipelineError(fmt::format("rank {}: MPI_Isend of {} values to rank {} failed: {}", rank_,
                                    count, dest, mpi_error_text(rc)));
}

template <class T>
void BoundaryBuffer<T>::wait() {
  if (request_ == MPI_REQUEST_NULL) return;
  MPI_Status status;
  const int rc = MPI_Wait(&request_, &status);
  if (!receiving_) {
    if (rc != MPI_SUCCESS)
      throw PipelineError(fmt::format("rank {}: send to rank {} failed: {}", rank_, peer_,
                                      mpi_error_text(rc)));
    return;
  }
  const std::int64_t expected = expected_rows_ * cols();
  if (rc != MPI_SUCCESS) {
    throw PipelineError(fmt::format("rank {}: receiving the {} from rank {} failed (expected "
                                    "{}x{} = {} values): {}",
                                    rank_, describe(), peer_, expected_rows_, cols(), expected,
                                    mpi_error_text(status.MPI_ERROR != MPI_SUCCESS ? status.MPI_ERROR : rc)));
  }
  int count = 0;
  MPI_Get_count(&status, mpi_type<T>(), &count);
  if (count != expected)
    throw PipelineError(fmt::format("rank {}: the {} from rank {} has {} values, expected "
                                    "{}x{} = {}",
                                    rank_, describe(), peer_, count, expected_rows_, cols(), expected));
  if (staged()) Kokkos::deep_copy(device_, host_);
}

template class BoundaryBuffer<float>;
template class BoundaryBuffer<double>;

}  // namespace gpipe
