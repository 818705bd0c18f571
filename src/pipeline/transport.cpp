#include "gpipe/pipeline/transport.hpp"

#include <fmt/format.h>

#ifdef __linux__
#include <sys/prctl.h>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <limits>
#include <thread>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <vector>

#include "gpipe/config.hpp"
#include "gpipe/core/error.hpp"
#include "gpipe/core/kokkos_compat.hpp"
#include "gpipe/pipeline/wait.hpp"
#include "gpipe/pipeline/wire_format.hpp"

namespace gpipe {

namespace {
std::atomic<WaitPolicy> g_wait_policy{WaitPolicy::Spin};

// A sleep of a few us ends within ~10-20 us with a timer slack of 1 us (the
// default 50 us batches wake-ups): once per thread, as the synthetic layer does.
void tighten_timer_slack() {
#ifdef __linux__
  thread_local bool done = false;
  if (!done) prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);
  done = true;
#endif
}
}  // namespace

void set_wait_policy(WaitPolicy policy) { g_wait_policy.store(policy); }
WaitPolicy wait_policy() { return g_wait_policy.load(); }

int wait_request(MPI_Request* request, MPI_Status* status) {
  if (wait_policy() == WaitPolicy::Spin) return MPI_Wait(request, status);
  int done = 0;
  int rc = MPI_Test(request, &done, status);
  if (rc != MPI_SUCCESS || done) return rc;
  tighten_timer_slack();
  // 2, 4, ..., kWaitSleepMaxUs us: a message that comes soon is seen soon,
  // a long wait costs one MPI_Test per kWaitSleepMaxUs.
  for (int us = 2;; us = std::min(2 * us, kWaitSleepMaxUs)) {
    std::this_thread::sleep_for(std::chrono::microseconds(us));
    rc = MPI_Test(request, &done, status);
    if (rc != MPI_SUCCESS || done) return rc;
  }
}

int exact_allreduce(const void* send, void* recv, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm) {
  if (wait_policy() == WaitPolicy::Spin) return MPI_Allreduce(send, recv, count, type, op, comm);
  MPI_Request request = MPI_REQUEST_NULL;
  const int rc = MPI_Iallreduce(send, recv, count, type, op, comm, &request);
  return rc != MPI_SUCCESS ? rc : wait_request(&request, MPI_STATUS_IGNORE);
}

int waited_bcast(void* buffer, int count, MPI_Datatype type, int root, MPI_Comm comm) {
  if (wait_policy() == WaitPolicy::Spin) return MPI_Bcast(buffer, count, type, root, comm);
  MPI_Request request = MPI_REQUEST_NULL;
  const int rc = MPI_Ibcast(buffer, count, type, root, comm, &request);
  return rc != MPI_SUCCESS ? rc : wait_request(&request, MPI_STATUS_IGNORE);
}

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

namespace {
int checked_tag(std::int64_t tag) {
  if (tag < 0 || tag > std::int64_t(std::numeric_limits<int>::max()))
    throw PipelineError(fmt::format("message tag {} is outside [0, 2^31 - 1] (too many micro-batches)", tag));
  return int(tag);
}
// Throws PipelineError if `tag` is above the communicator's MPI_TAG_UB.
void check_tag(MPI_Comm comm, int tag, int rank, const std::string& what) {
  const int bound = tag_upper_bound(comm);
  if (tag > bound)
    throw PipelineError(fmt::format("rank {}: the message tag {} of the {} is above this MPI's MPI_TAG_UB = {}",
                                    rank, tag, what, bound));
}
}  // namespace

int forward_tag(int micro_batch, int stage, int stages) {
  return checked_tag(2 * (std::int64_t(micro_batch) * stages + stage));
}
int backward_tag(int micro_batch, int stage, int stages) {
  return checked_tag(2 * (std::int64_t(micro_batch) * stages + stage) + 1);
}
int forward_tag(int micro_batch) { return forward_tag(micro_batch, 0, 1); }
int backward_tag(int micro_batch) { return backward_tag(micro_batch, 0, 1); }

int tag_upper_bound(MPI_Comm comm) {
  void* value = nullptr;
  int flag = 0;
  MPI_Comm_get_attr(comm, MPI_TAG_UB, &value, &flag);
  return flag && value ? *static_cast<int*>(value) : 32767;  // the standard's minimum
}

void check_message_tags(MPI_Comm comm, std::int64_t micro_batches, std::int64_t stages) {
  const std::int64_t top = 2 * micro_batches * stages - 1;
  const int bound = tag_upper_bound(comm);
  if (top > bound && stages == 1)
    throw InputError(fmt::format("training.micro_batches = {}: message tags reach 2M - 1 = {}, above "
                                 "this MPI's MPI_TAG_UB = {}",
                                 micro_batches, top, bound));
  if (top > bound)
    throw InputError(fmt::format("training.micro_batches = {} over {} stages: message tags reach 2MS - 1 = {}, "
                                 "above this MPI's MPI_TAG_UB = {}",
                                 micro_batches, stages, top, bound));
}

int mpi_count(std::int64_t count, const std::string& what) {
  if (count < 0 || count > std::int64_t(std::numeric_limits<int>::max()))
    throw PipelineError(fmt::format("{}: {} elements, more than one MPI message carries (2^31 - 1)", what,
                                    count));
  return int(count);
}

template <class T>
BoundaryBuffer<T>::BoundaryBuffer(const std::string& label, std::int64_t capacity_rows,
                                  std::int64_t cols, const ExecSpace& space, Format storage)
    : device_(packed_wire(storage)
                  ? Matrix<T>(static_cast<T*>(nullptr), 0, size_t(cols))  // 16-bit storage: no float buffer
                  : Matrix<T>(Kokkos::view_alloc(Kokkos::WithoutInitializing, label), capacity_rows, cols)),
      space_(space),
      capacity_(capacity_rows),
      label_(label) {
  (void)mpi_count(capacity_rows * cols, label);  // every message on it fits an int count
  if (packed_wire(storage)) {
    set_storage_format(storage);
    return;
  }
  if (staged()) host_ = HostBuffer(Kokkos::view_alloc(Kokkos::WithoutInitializing, label + "::host"),
                                   capacity_rows, cols);
}

template <class T>
BoundaryBuffer<T>::BoundaryBuffer(BoundaryBuffer&& other) noexcept
    : device_(std::move(other.device_)),
      host_(std::move(other.host_)),
      packed_(std::move(other.packed_)),
      space_(other.space_),
      capacity_(other.capacity_),
      label_(std::move(other.label_)),
      storage16_(other.storage16_),
      request_(other.request_),
      stamp_request_(other.stamp_request_),
      stamp_(std::move(other.stamp_)),
      wire_(other.wire_),
      receiving_(other.receiving_),
      peer_(other.peer_),
      rank_(other.rank_),
      expected_rows_(other.expected_rows_),
      what_(other.what_),
      micro_batch_(other.micro_batch_) {
  other.request_ = MPI_REQUEST_NULL;
  other.stamp_request_ = MPI_REQUEST_NULL;
}

template <class T>
BoundaryBuffer<T>& BoundaryBuffer<T>::operator=(BoundaryBuffer&& other) noexcept {
  if (this == &other) return *this;
  cancel();
  device_ = std::move(other.device_);
  host_ = std::move(other.host_);
  packed_ = std::move(other.packed_);
  space_ = other.space_;
  capacity_ = other.capacity_;
  label_ = std::move(other.label_);
  storage16_ = other.storage16_;
  request_ = other.request_;
  other.request_ = MPI_REQUEST_NULL;
  stamp_request_ = other.stamp_request_;
  other.stamp_request_ = MPI_REQUEST_NULL;
  stamp_ = std::move(other.stamp_);
  wire_ = other.wire_;
  receiving_ = other.receiving_;
  peer_ = other.peer_;
  rank_ = other.rank_;
  expected_rows_ = other.expected_rows_;
  what_ = other.what_;
  micro_batch_ = other.micro_batch_;
  return *this;
}

namespace {
// Cancels and frees `request` (never null); true when the operation is
// over, so MPI no longer uses its buffer: a confirmed cancel, or a send that
// completed.
bool cancel_request(MPI_Request& request, bool receiving) noexcept {
  MPI_Cancel(&request);
  int settled = 0;
  if (receiving) {
    MPI_Status status;
    MPI_Wait(&request, &status);
    // Open MPI 4.1 (measured at 3 ranks) can complete a cancelled receive
    // without cancelling it, leaving it posted: only a confirmed cancel frees
    // the buffer for reuse.
    MPI_Test_cancelled(&status, &settled);
  } else {
    // A send that already matched cannot be cancelled and completes only when
    // its receiver takes it, which may never happen.
    MPI_Test(&request, &settled, MPI_STATUS_IGNORE);
    if (!settled) MPI_Request_free(&request);
  }
  request = MPI_REQUEST_NULL;
  return settled != 0;
}
}  // namespace

template <class T>
void BoundaryBuffer<T>::cancel() noexcept {
  if (request_ == MPI_REQUEST_NULL && stamp_request_ == MPI_REQUEST_NULL) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (stamp_request_ != MPI_REQUEST_NULL && !cancel_request(stamp_request_, receiving_))
    stamp_.release();  // MPI may still write it: never freed (a fresh one is made when needed)
  if (request_ == MPI_REQUEST_NULL || cancel_request(request_, receiving_)) return;
  // MPI may still use the buffers: hand them over for good (never destroyed,
  // not even after Kokkos::finalize) and continue with fresh ones.
  static auto* orphans = new std::vector<std::pair<Matrix<T>, HostBuffer>>();
  orphans->emplace_back(device_, host_);
  if (packed_.device.data()) {
    static auto* packed_orphans = new std::vector<Packed>();
    packed_orphans->push_back(packed_);
    const Format format = packed_.format;
    packed_ = Packed{};
    set_wire_format(format);
  }
  if (!storage16_)
    device_ = Matrix<T>(Kokkos::view_alloc(Kokkos::WithoutInitializing, label_), device_.extent(0),
                        device_.extent(1));
  if (staged() && !storage16_)
    host_ = HostBuffer(Kokkos::view_alloc(Kokkos::WithoutInitializing, host_.label()), device_.extent(0),
                       device_.extent(1));
}

template <class T>
void BoundaryBuffer<T>::set_wire_format(Format format) {
  if (!packed_wire(format)) {  // fp32 / fp64: the values as they are
    packed_ = Packed{};
    return;
  }
  if (!std::is_same_v<T, float>)
    throw std::invalid_argument(fmt::format("gpipe::BoundaryBuffer: wire format {} needs float buffers", name(format)));
  packed_.format = format;
  const std::string label = label_ + "::wire";
  const auto values = size_t(capacity_ * cols());
  packed_.device =
      Kokkos::View<std::uint16_t*, MemSpace>(Kokkos::view_alloc(Kokkos::WithoutInitializing, label), values);
  if (staged())
    packed_.host = Kokkos::View<std::uint16_t*, compat::HostPinnedSpace>(
        Kokkos::view_alloc(Kokkos::WithoutInitializing, label + "::host"), values);
}

template <class T>
void BoundaryBuffer<T>::set_storage_format(Format format) {
  if (!packed_wire(format))
    throw std::invalid_argument(fmt::format("gpipe::BoundaryBuffer: 16-bit storage needs bf16 or fp16, not {}",
                                            name(format)));
  set_wire_format(format);  // throws for a double buffer
  storage16_ = true;
  device_ = Matrix<T>(static_cast<T*>(nullptr), 0, device_.extent(1));  // unmanaged: no allocation
  host_ = HostBuffer();
}

template <class T>
void BoundaryBuffer<T>::store(ConstMatrix<T> values) {
  if constexpr (std::is_same_v<T, float>) {
    if (!storage16_) throw std::logic_error("gpipe::BoundaryBuffer::store: the buffer has no 16-bit storage");
    pack_wire(space_, packed_.format, values.data(), std::int64_t(values.span()), packed_.device.data());
  } else {
    (void)values;
    throw std::logic_error("gpipe::BoundaryBuffer::store: 16-bit storage needs a float buffer");
  }
}

template <class T>
Matrix<T> BoundaryBuffer<T>::load(std::int64_t rows, T* work) const {
  if constexpr (std::is_same_v<T, float>) {
    if (!storage16_) throw std::logic_error("gpipe::BoundaryBuffer::load: the buffer has no 16-bit storage");
    unpack_wire(space_, packed_.format, packed_.device.data(), rows * cols(), work);
    return Matrix<T>(work, size_t(rows), size_t(cols()));
  } else {
    (void)rows;
    (void)work;
    throw std::logic_error("gpipe::BoundaryBuffer::load: 16-bit storage needs a float buffer");
  }
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
                                  const char* what, int micro_batch, bool stamped) {
  MPI_Comm_rank(comm, &rank_);
  receiving_ = true;
  peer_ = source;
  expected_rows_ = expected_rows;
  what_ = what;
  micro_batch_ = micro_batch;
  wire_ = WireTime{};
  check_tag(comm, tag, rank_, describe());
  if (stamped) {  // posted first: the sender sends the stamp first on the same tag (MPI keeps the order)
    if (!stamp_) stamp_.reset(new std::int64_t[2]);
    const int rc = MPI_Irecv(stamp_.get(), 2, MPI_INT64_T, source, tag, comm, &stamp_request_);
    if (rc != MPI_SUCCESS)
      throw PipelineError(fmt::format("rank {}: MPI_Irecv of the link stamp of the {} from rank {} failed: {}",
                                      rank_, describe(), source, mpi_error_text(rc)));
  }
  void* buffer = packed_.device.data() ? (staged() ? (void*)packed_.host.data() : (void*)packed_.device.data())
                                        : (void*)mpi_buffer();
  const int rc = MPI_Irecv(buffer, mpi_count(capacity_ * cols(), describe()),
                           packed_.device.data() ? MPI_UINT16_T : mpi_type<T>(), source, tag, comm, &request_);
  if (rc != MPI_SUCCESS)
    throw PipelineError(fmt::format("rank {}: MPI_Irecv of the {} from rank {} failed: {}", rank_,
                                    describe(), source, mpi_error_text(rc)));
}

template <class T>
std::string BoundaryBuffer<T>::describe() const {
  return micro_batch_ < 0 ? std::string(what_) : fmt::format("{} of micro-batch {}", what_, micro_batch_);
}

template <class T>
void BoundaryBuffer<T>::post_send(MPI_Comm comm, int dest, int tag, std::int64_t rows, Wire* wire) {
  MPI_Comm_rank(comm, &rank_);
  receiving_ = false;
  peer_ = dest;
  check_tag(comm, tag, rank_, describe());
  const std::int64_t count = rows * cols();
  // The kernels that wrote the rows run on space_: fence that instance (not
  // the whole device) before MPI reads them; stage only the rows sent.
  const bool packed = packed_.device.data() != nullptr;
  if constexpr (std::is_same_v<T, float>) {
    if (packed) {  // float -> 16-bit wire values, only the rows sent (16-bit storage: stored already)
      if (!storage16_) pack_wire(space_, packed_.format, device_.data(), count, packed_.device.data());
      if (staged())
        Kokkos::deep_copy(space_, Kokkos::subview(packed_.host, std::make_pair(std::int64_t(0), count)),
                          Kokkos::subview(packed_.device, std::make_pair(std::int64_t(0), count)));
    }
  }
  if (staged() && !packed) Kokkos::deep_copy(space_, leading_rows(host_, rows), leading_rows(device_, rows));
  compat::fence(space_, "gpipe::BoundaryBuffer::post_send");
  const std::int64_t payload = count * wire_value_bytes();
  count_boundary_bytes(payload);
  if (wire) {  // the data is ready now: it enters the emulated wire
    if (!stamp_) stamp_.reset(new std::int64_t[2]);
    stamp_[0] = link_clock_ns();
    stamp_[1] = wire->transmit(stamp_[0], payload);
    const int rc = MPI_Isend(stamp_.get(), 2, MPI_INT64_T, dest, tag, comm, &stamp_request_);
    if (rc != MPI_SUCCESS)
      throw PipelineError(fmt::format("rank {}: MPI_Isend of a link stamp to rank {} failed: {}", rank_,
                                      dest, mpi_error_text(rc)));
  }
  void* buffer = packed ? (staged() ? (void*)packed_.host.data() : (void*)packed_.device.data())
                        : (void*)mpi_buffer();
  const int rc = MPI_Isend(buffer, mpi_count(count, describe()), packed ? MPI_UINT16_T : mpi_type<T>(), dest, tag,
                           comm, &request_);
  if (rc != MPI_SUCCESS)
    throw PipelineError(fmt::format("rank {}: MPI_Isend of {} values to rank {} failed: {}", rank_,
                                    count, dest, mpi_error_text(rc)));
}

template <class T>
bool BoundaryBuffer<T>::arrived() const {
  if (request_ == MPI_REQUEST_NULL) return true;
  int flag = 0;
  MPI_Request_get_status(request_, &flag, MPI_STATUS_IGNORE);
  return flag != 0;
}

template <class T>
void BoundaryBuffer<T>::wait() {
  if (stamp_request_ != MPI_REQUEST_NULL) {
    MPI_Status status;
    const int rc = wait_request(&stamp_request_, &status);
    if (rc != MPI_SUCCESS)
      throw PipelineError(fmt::format("rank {}: the link stamp of the {} {} rank {} failed: {}", rank_,
                                      receiving_ ? describe() : std::string("message"),
                                      receiving_ ? "from" : "to", peer_,
                                      mpi_error_text(status.MPI_ERROR != MPI_SUCCESS ? status.MPI_ERROR : rc)));
    if (receiving_) wire_ = WireTime{stamp_[0], stamp_[1], 0};
  }
  if (request_ == MPI_REQUEST_NULL) return;
  MPI_Status status;
  const int rc = wait_request(&request_, &status);
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
  const bool packed = packed_.device.data() != nullptr;
  MPI_Get_count(&status, packed ? MPI_UINT16_T : mpi_type<T>(), &count);
  if (count != expected)
    throw PipelineError(fmt::format("rank {}: the {} from rank {} has {} values, expected "
                                    "{}x{} = {}",
                                    rank_, describe(), peer_, count, expected_rows_, cols(), expected));
  if (wire_.arrival_ns != 0) wire_.bytes = std::int64_t(count) * wire_value_bytes();
  if constexpr (std::is_same_v<T, float>) {
    if (packed) {  // 16-bit wire values -> float, only the rows received
      if (staged())
        Kokkos::deep_copy(space_, Kokkos::subview(packed_.device, std::make_pair(std::int64_t(0), expected)),
                          Kokkos::subview(packed_.host, std::make_pair(std::int64_t(0), expected)));
      if (!storage16_) unpack_wire(space_, packed_.format, packed_.device.data(), expected, device_.data());
      compat::fence(space_, "gpipe::BoundaryBuffer::wait");
      return;
    }
  }
  if (staged()) {  // only the rows received; host_ is free for the next receive after the fence
    Kokkos::deep_copy(space_, leading_rows(device_, expected_rows_), leading_rows(host_, expected_rows_));
    compat::fence(space_, "gpipe::BoundaryBuffer::wait");
  }
}

#define GPIPE_INSTANTIATE(T) template class BoundaryBuffer<T>;
GPIPE_FOR_EACH_SCALAR(GPIPE_INSTANTIATE)
#undef GPIPE_INSTANTIATE

}  // namespace gpipe
