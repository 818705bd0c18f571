#pragma once
// RAII for HDF5 identifiers (internal to gpipe's I/O).

#include <hdf5.h>

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

/// Scalar attributes on an object.
void write_attribute(hid_t object, const std::string& name, long long value);
void write_attribute(hid_t object, const std::string& name, double value);
void write_attribute(hid_t object, const std::string& name, const std::string& value);
/// A 1-D double attribute (an empty vector is stored with 0 elements).
void write_attribute(hid_t object, const std::string& name, const std::vector<double>& values);
bool has_attribute(hid_t object, const std::string& name);
std::vector<double> read_double_vector_attribute(hid_t object, const std::string& name);
long long read_int_attribute(hid_t object, const std::string& name);
double read_double_attribute(hid_t object, const std::string& name);
std::string read_string_attribute(hid_t object, const std::string& name);

}  // namespace gpipe::h5
