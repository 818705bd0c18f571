#include "hdf5_handle.hpp"

#include <stdexcept>
#include <vector>

namespace gpipe::h5 {

namespace {
Handle scalar_space() { return dataspace(H5Screate(H5S_SCALAR)); }

void write_raw(hid_t object, const std::string& name, hid_t type, const void* value) {
  if (H5Aexists(object, name.c_str()) > 0) H5Adelete(object, name.c_str());
  const Handle space = scalar_space();
  const Handle attr = attribute(H5Acreate2(object, name.c_str(), type, space.get(), H5P_DEFAULT, H5P_DEFAULT));
  if (!attr.valid() || H5Awrite(attr.get(), type, value) < 0)
    throw std::runtime_error("HDF5: cannot write attribute '" + name + "'");
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
    throw std::runtime_error("HDF5: cannot write attribute '" + name + "'");
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
