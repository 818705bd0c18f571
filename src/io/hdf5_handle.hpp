#pragma once
// RAII for HDF5 identifiers (internal to gpipe's I/O).

#include <hdf5.h>

#include <cstdint>
#include <string>
#include <vector>
#include <utility>

namespace gpipe::h5 {

/// Owns one hid_t and closes it with the matching H5?close on destruction.
class Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  Handle() = default;
  Handle(hid_t id, Closer close) : id_(id), close_(close) {}
  Handle(Handle&& other) noexcept { *this = std::move(other); }
  Handle& operator=(Handle&& other) noexcept {
    std::swap(id_, other.id_);
    std::swap(close_, other.close_);
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle() {
    if (id_ >= 0 && close_) close_(id_);
  }
  hid_t get() const { return id_; }
  /// Closes now and returns the closer's status (the handle is then empty,
  /// whatever the status: HDF5 1.10 leaves a failed file close's identifier
  /// dangling, and closing it again would crash).
  herr_t close() {
    herr_t status = 0;
    if (id_ >= 0 && close_) status = close_(id_);
    id_ = -1;
    return status;
  }
  bool valid() const { return id_ >= 0; }

 private:
  hid_t id_ = -1;
  Closer close_ = nullptr;
};

inline Handle file(hid_t id) { return {id, H5Fclose}; }
inline Handle group(hid_t id) { return {id, H5Gclose}; }
inline Handle dataset(hid_t id) { return {id, H5Dclose}; }
inline Handle dataspace(hid_t id) { return {id, H5Sclose}; }
inline Handle datatype(hid_t id) { return {id, H5Tclose}; }
inline Handle attribute(hid_t id) { return {id, H5Aclose}; }
inline Handle plist(hid_t id) { return {id, H5Pclose}; }

/// Turns off HDF5's automatic error-stack printing (gpipe reports errors itself).
inline void silence_errors() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

/// HDF5's own reason for the last failed call on this thread: the most
/// specific description on the current error stack (e.g. "unable to lock
/// file, errno = 11, error message = 'Resource temporarily unavailable'"),
/// "" if the stack is empty. A reason that names a lock gets the hint to
/// close the other process or set HDF5_USE_FILE_LOCKING=FALSE. Call it
/// right after the failing call: the next HDF5 API call clears the stack.
std::string error_reason();
/// `what`, then ": HDF5: <error_reason()>" when HDF5 gave a reason.
std::string with_reason(const std::string& what);

/// Scalar attributes on an object (std::uint64_t: stored as an unsigned
/// 64-bit integer, so every value round-trips as given).
void write_attribute(hid_t object, const std::string& name, long long value);
void write_attribute(hid_t object, const std::string& name, std::uint64_t value);
void write_attribute(hid_t object, const std::string& name, double value);
void write_attribute(hid_t object, const std::string& name, const std::string& value);
/// A 1-D double attribute (an empty vector is stored with 0 elements).
void write_attribute(hid_t object, const std::string& name, const std::vector<double>& values);
bool has_attribute(hid_t object, const std::string& name);
std::vector<double> read_double_vector_attribute(hid_t object, const std::string& name);
long long read_int_attribute(hid_t object, const std::string& name);
/// An integer attribute read as unsigned 64-bit (a signed attribute written
/// by an older version converts when it is >= 0).
std::uint64_t read_uint_attribute(hid_t object, const std::string& name);
double read_double_attribute(hid_t object, const std::string& name);
std::string read_string_attribute(hid_t object, const std::string& name);

}  // namespace gpipe::h5
