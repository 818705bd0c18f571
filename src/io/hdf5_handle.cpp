#include "hdf5_handle.hpp"

#include <stdexcept>
#include <vector>

namespace gpipe::h5 {

namespace {
// The first entry of an upward walk is the most specific one.
herr_t first_description(unsigned n, const H5E_error2_t* e, void* out) {
  auto& reason = *static_cast<std::string*>(out);
  if (n == 0 && e && e->desc) reason = e->desc;
  return 0;
}
herr_t names_lock(unsigned, const H5E_error2_t* e, void* out) {
  if (e && e->desc) {
    const std::string d = e->desc;
    if (d.find("lock") != std::string::npos) *static_cast<bool*>(out) = true;
  }
  return 0;
}
}  // namespace

std::string error_reason() {
  // Copy the stack first: walking it must not be disturbed by another call.
  const hid_t stack = H5Eget_current_stack();
  if (stack < 0) return "";
  std::string reason;
  bool lock = false;
  H5Ewalk2(stack, H5E_WALK_UPWARD, first_description, &reason);
  H5Ewalk2(stack, H5E_WALK_UPWARD, names_lock, &lock);
  H5Eclose_stack(stack);
  if (lock)
    reason += " (another process holds the file open: close it, or set HDF5_USE_FILE_LOCKING=FALSE "
              "where the file system does not support locking)";
  return reason;
}

std::string with_reason(const std::string& what) {
  const std::string reason = error_reason();
  return reason.empty() ? what : what + ": HDF5: " + reason;
}

namespace {
Handle scalar_space() { return dataspace(H5Screate(H5S_SCALAR)); }

void write_raw(hid_t object, const std::string& name, hid_t type, const void* value) {
  if (H5Aexists(object, name.c_str()) > 0) H5Adelete(object, name.c_str());
  const Handle space = scalar_space();
  const Handle attr = attribute(H5Acreate2(object, name.c_str(), type, space.get(), H5P_DEFAULT, H5P_DEFAULT));
  if (!attr.valid() || H5Awrite(attr.get(), type, value) < 0)
    throw std::runtime_error(with_reason("cannot write attribute '" + name + "'"));
}

template <class V>
V read_raw(hid_t object, const std::string& name, hid_t type) {
  const Handle attr = attribute(H5Aopen(object, name.c_str(), H5P_DEFAULT));
  V value{};
  if (!attr.valid() || H5Aread(attr.get(), type, &value) < 0)
    throw std::runtime_error("cannot read attribute '" + name + "'");
  return value;
}
}  // namespace

void write_attribute(hid_t object, const std::string& name, long long value) {
  write_raw(object, name, H5T_NATIVE_LLONG, &value);
}
void write_attribute(hid_t object, const std::string& name, std::uint64_t value) {
  write_raw(object, name, H5T_NATIVE_UINT64, &value);
}
void write_attribute(hid_t object, const std::string& name, double value) {
  write_raw(object, name, H5T_NATIVE_DOUBLE, &value);
}
void write_attribute(hid_t object, const std::string& name, const std::string& value) {
  const Handle type = datatype(H5Tcopy(H5T_C_S1));
  H5Tset_size(type.get(), value.empty() ? 1 : value.size());
  H5Tset_strpad(type.get(), H5T_STR_NULLPAD);
  write_raw(object, name, type.get(), value.data());
}
void write_attribute(hid_t object, const std::string& name, const std::vector<double>& values) {
  if (H5Aexists(object, name.c_str()) > 0) H5Adelete(object, name.c_str());
  const hsize_t dims[1] = {hsize_t(values.size())};
  const Handle space = dataspace(H5Screate_simple(1, dims, nullptr));
  const Handle attr = attribute(
      H5Acreate2(object, name.c_str(), H5T_NATIVE_DOUBLE, space.get(), H5P_DEFAULT, H5P_DEFAULT));
  if (!attr.valid() || (!values.empty() && H5Awrite(attr.get(), H5T_NATIVE_DOUBLE, values.data()) < 0))
    throw std::runtime_error(with_reason("cannot write attribute '" + name + "'"));
}
std::vector<double> read_double_vector_attribute(hid_t object, const std::string& name) {
  const Handle attr = attribute(H5Aopen(object, name.c_str(), H5P_DEFAULT));
  if (!attr.valid()) throw std::runtime_error("cannot read attribute '" + name + "'");
  const Handle space = dataspace(H5Aget_space(attr.get()));
  const hssize_t count = H5Sget_simple_extent_npoints(space.get());
  std::vector<double> out(static_cast<size_t>(count > 0 ? count : 0));
  if (!out.empty() && H5Aread(attr.get(), H5T_NATIVE_DOUBLE, out.data()) < 0)
    throw std::runtime_error("cannot read attribute '" + name + "'");
  return out;
}
bool has_attribute(hid_t object, const std::string& name) {
  return H5Aexists(object, name.c_str()) > 0;
}
long long read_int_attribute(hid_t object, const std::string& name) {
  return read_raw<long long>(object, name, H5T_NATIVE_LLONG);
}
std::uint64_t read_uint_attribute(hid_t object, const std::string& name) {
  return read_raw<std::uint64_t>(object, name, H5T_NATIVE_UINT64);
}
double read_double_attribute(hid_t object, const std::string& name) {
  return read_raw<double>(object, name, H5T_NATIVE_DOUBLE);
}
std::string read_string_attribute(hid_t object, const std::string& name) {
  const Handle attr = attribute(H5Aopen(object, name.c_str(), H5P_DEFAULT));
  if (!attr.valid()) throw std::runtime_error("cannot read attribute '" + name + "'");
  const Handle type = datatype(H5Aget_type(attr.get()));
  if (H5Tget_class(type.get()) != H5T_STRING)
    throw std::runtime_error("attribute '" + name + "' is not a string");
  const size_t size = H5Tget_size(type.get());
  std::vector<char> buffer(size + 1, '\0');
  if (H5Aread(attr.get(), type.get(), buffer.data()) < 0)
    throw std::runtime_error("cannot read attribute '" + name + "'");
  return std::string(buffer.data());
}

}  // namespace gpipe::h5
