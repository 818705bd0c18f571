#pragma once
// MPI point-to-point transport of boundary activations and gradients.

#include <mpi.h>

#include <memory>
#include <string>

#include "gpipe/core/kokkos_compat.hpp"
#include "gpipe/core/precision.hpp"
#include "gpipe/core/views.hpp"
#include "gpipe/pipeline/link.hpp"

namespace gpipe {

/// A duplicate of the caller's communicator (so gpipe's tags never collide
/// with the host code's messages), freed on destruction. Errors are returned,
/// not fatal, so gpipe can report them with context.
class Communicator {
 public:
  explicit Communicator(MPI_Comm parent);
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;
  MPI_Comm get() const { return comm_; }
  int rank() const { return rank_; }
  int size() const { return size_; }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
};

/// Message tags from (stage, micro-batch, direction): across the boundary
/// between stages `stage` and `stage` + 1 of a pipeline of `stages` stages,
/// micro-batch m's forward activation is 2 (m stages + stage), its gradient
/// that + 1 (computed in 64 bits), so two stages of one rank that talk to the
/// same rank (interleaved chunks, or a stage handing off to the next on its
/// own rank) never share a tag. Throws PipelineError for a tag above
/// 2^31 - 1; post_send/post_recv check it against the communicator's MPI_TAG_UB.
int forward_tag(int micro_batch, int stage, int stages);
int backward_tag(int micro_batch, int stage, int stages);
/// One stage boundary (stages = 1): 2m and 2m + 1.
int forward_tag(int micro_batch);
int backward_tag(int micro_batch);
/// The largest tag MPI allows on `comm` (its MPI_TAG_UB attribute; at least
/// 32767 by the standard, 2^31 - 1 in Open MPI).
int tag_upper_bound(MPI_Comm comm);
/// Throws InputError on every rank (the same on all: no communication) if
/// `micro_batches` micro-batches over `stages` stages need a tag above
/// tag_upper_bound(comm): "training.micro_batches = M: message tags reach
/// 2M - 1 = ..., above this MPI's MPI_TAG_UB = ..." (stages > 1: "... = M
/// over S stages: message tags reach 2MS - 1 = ..."). Pipeline's constructor calls it.
void check_message_tags(MPI_Comm comm, std::int64_t micro_batches, std::int64_t stages = 1);
/// `count` elements as an MPI count (int); throws PipelineError naming `what`
/// if it exceeds 2^31 - 1 (or is negative).
int mpi_count(std::int64_t count, const std::string& what);

/// A message's passage over an emulated link, in link_clock_ns() time.
struct WireTime {
  std::int64_t sent_ns = 0;     ///< when the sender handed it to the wire
  std::int64_t arrival_ns = 0;  ///< modelled arrival (Wire::transmit)
  std::int64_t bytes = 0;       ///< payload bytes (0: no emulated link)
};

/// One boundary buffer of (capacity rows, cols) in MemSpace and the
/// non-blocking MPI operation on it. When MemSpace is not host-accessible and
/// GPIPE_ENABLE_GPU_AWARE_MPI is off, data is staged through a host mirror
/// allocated once at construction.
///
/// The buffer owns its MPI request: it is move-only (a copy would share a
/// posted buffer), and cancel() or the destructor cancels and frees an
/// operation still pending, so an abandoned step leaves nothing that MPI may
/// write into later and the next step posts into a clean buffer.
template <class T>
class BoundaryBuffer {
 public:
  BoundaryBuffer() = default;
  /// `space`: the execution-space instance whose kernels write and read the
  /// buffer; post_send() fences it (not Kokkos::fence()) and staging copies
  /// run on it.
  /// `storage` bf16 / fp16: constructed with 16-bit storage
  /// (set_storage_format(storage)), no float buffer ever allocated.
  BoundaryBuffer(const std::string& label, std::int64_t capacity_rows, std::int64_t cols,
                 const ExecSpace& space = ExecSpace(), Format storage = Format::fp32);
  ~BoundaryBuffer() { cancel(); }
  BoundaryBuffer(const BoundaryBuffer&) = delete;
  BoundaryBuffer& operator=(const BoundaryBuffer&) = delete;
  BoundaryBuffer(BoundaryBuffer&& other) noexcept;
  BoundaryBuffer& operator=(BoundaryBuffer&& other) noexcept;

  /// The first `rows` rows of the device buffer.
  Matrix<T> rows(std::int64_t rows) const;
  std::int64_t cols() const { return std::int64_t(device_.extent(1)); }
  /// Bytes of the float (T) buffer: 0 with 16-bit storage (set_storage_format).
  std::int64_t bytes() const { return std::int64_t(device_.span() * sizeof(T)); }
  /// Sends and receives as `format` (the precision policy's wire,
  /// gpipe/pipeline/wire_format.hpp): bf16 / fp16 allocate a 16-bit buffer
  /// of the same capacity (wire_buffer_bytes()) that post_send packs the
  /// rows into and wait() unpacks them from; fp32 (float) / fp64 (double)
  /// send the buffer itself (T's own format, whichever of the two is
  /// passed). Call before the first post. Throws std::invalid_argument for
  /// a 16-bit format on a double buffer.
  void set_wire_format(Format format);
  /// As set_wire_format(format) for bf16 / fp16, and the 16-bit buffer is
  /// the only storage (a Stage's 16-bit activation storage, docs/design.md
  /// "Mixed precision"): the float buffer is released (rows() is then
  /// empty), the caller writes the rows with store() before post_send and
  /// reads them with load() after wait(); post_send and wait convert
  /// nothing. Call before the first post. Throws std::invalid_argument for a
  /// format that is not 16-bit or a double buffer.
  void set_storage_format(Format format);
  /// True after set_storage_format.
  bool stores_16_bit() const { return storage16_; }
  /// 16-bit storage: packs values (rows x cols(), rows <= capacity) into the
  /// 16-bit buffer, on the buffer's execution space (round to nearest even:
  /// exact for values that are already 16-bit values).
  void store(ConstMatrix<T> values);
  /// 16-bit storage: the first `rows` rows unpacked into `work` (at least
  /// rows x cols() values, MemSpace), returned as a (rows, cols()) matrix
  /// on `work`; on the buffer's execution space, not fenced.
  Matrix<T> load(std::int64_t rows, T* work) const;
  Format wire_format() const { return packed_.format; }
  /// Bytes of the 16-bit wire buffer (0 unless bf16 / fp16).
  std::int64_t wire_buffer_bytes() const { return std::int64_t(packed_.device.span() * 2); }
  /// Bytes one value takes on the wire (2, or sizeof(T)).
  std::int64_t wire_value_bytes() const { return packed_.device.data() ? 2 : std::int64_t(sizeof(T)); }

  /// Posts MPI_Irecv of up to the full capacity from `source`. `what` and
  /// `micro_batch` name the message in errors ("forward activation of
  /// micro-batch 3"; micro_batch < 0: `what` alone); `what` must outlive the
  /// receive (a string literal). Nothing is formatted unless an error occurs.
  /// `stamped`: the sender emulates a link (post_send with a Wire): a
  /// receive of its WireTime stamp is posted first, on the same tag.
  void post_recv(MPI_Comm comm, int source, int tag, std::int64_t expected_rows, const char* what,
                 int micro_batch = -1, bool stamped = false);
  /// Fences the buffer's execution-space instance, stages the first `rows`
  /// rows if needed (only those), and posts MPI_Isend of them.
  /// With a `wire` (an emulated link, the direction to `dest`): first sends
  /// the stamp {now, wire->transmit(now, bytes)} (two MPI_INT64_T) on the
  /// same tag, so the receiver (post_recv with stamped) knows when the
  /// message arrives on the emulated link; the data itself goes at once.
  void post_send(MPI_Comm comm, int dest, int tag, std::int64_t rows, Wire* wire = nullptr);
  /// Completes the pending operation. For a receive, checks the received
  /// count against expected_rows x cols (throws PipelineError naming both
  /// ranks and the sizes) and copies staged data to the device. Does not
  /// wait for the emulated arrival: see wire_time() and hold_until().
  void wait();
  /// The last completed stamped receive's passage over the emulated link
  /// (bytes 0 when the receive was not stamped).
  const WireTime& wire_time() const { return wire_; }
  bool pending() const { return request_ != MPI_REQUEST_NULL; }
  /// Whether the pending operation has completed, without completing it
  /// (MPI_Request_get_status: wait() still checks and unpacks); true when
  /// nothing is pending. Drives MPI's progress like MPI_Test.
  bool arrived() const;
  /// Abandons the pending operation, if any, and frees its request:
  /// MPI_Cancel, then a receive is waited for and a send tested. Unless MPI
  /// confirms the cancel (or the send completed), MPI may still use the
  /// buffer: it is kept alive until the process ends and this object
  /// continues with a fresh buffer of the same shape. Either way the object
  /// can post again; a message sent for the abandoned receive may still be
  /// matched by a later receive with the same source and tag, which is why
  /// an abandoned step poisons the Pipeline. Never throws; does nothing after
  /// MPI_Finalize.
  void cancel() noexcept;

 private:
  // Host staging: pinned (page-locked) memory where the backend has it
  // (Kokkos' SharedHostPinnedSpace), else host memory.
  using HostBuffer = Kokkos::View<T**, Kokkos::LayoutRight, compat::HostPinnedSpace>;
  Matrix<T> device_;
  HostBuffer host_;
  struct Packed {  // the 16-bit wire buffer (set_wire_format)
    Format format = sizeof(T) == 8 ? Format::fp64 : Format::fp32;
    Kokkos::View<std::uint16_t*, MemSpace> device;
    Kokkos::View<std::uint16_t*, compat::HostPinnedSpace> host;  // staging, as host_
  } packed_;
  ExecSpace space_{};
  std::int64_t capacity_ = 0;  // rows
  std::string label_;
  bool storage16_ = false;     // set_storage_format: the 16-bit buffer is the only storage
  MPI_Request request_ = MPI_REQUEST_NULL;
  MPI_Request stamp_request_ = MPI_REQUEST_NULL;
  std::unique_ptr<std::int64_t[]> stamp_;  // {sent_ns, arrival_ns}: on the heap, so a move keeps a posted address
  WireTime wire_;
  bool receiving_ = false;
  int peer_ = -1;
  int rank_ = -1;
  std::int64_t expected_rows_ = 0;
  const char* what_ = "";
  int micro_batch_ = -1;
  std::string describe() const;
  T* mpi_buffer() const;
  bool staged() const;
};

/// MPI datatype of T (MPI_FLOAT or MPI_DOUBLE).
template <class T>
MPI_Datatype mpi_type();

}  // namespace gpipe
