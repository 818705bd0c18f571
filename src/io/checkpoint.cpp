#include "gpipe/io/checkpoint.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <regex>
#include <unistd.h>

#include "gpipe/config.hpp"
#include "gpipe/core/error.hpp"
#include "hdf5_handle.hpp"

namespace gpipe {

namespace fs = std::filesystem;

namespace {

template <class T>
hid_t native_type();
template <>
hid_t native_type<float>() {
  return H5T_NATIVE_FLOAT;
}
template <>
hid_t native_type<double>() {
  return H5T_NATIVE_DOUBLE;
}

h5::Handle mpio_access(MPI_Comm comm) {
  h5::Handle fapl = h5::plist(H5Pcreate(H5P_FILE_ACCESS));
  H5Pset_fapl_mpio(fapl.get(), comm, MPI_INFO_NULL);
  return fapl;
}

struct LayerLayout {
  std::string group;
  std::vector<ParameterSpec> specs;
  std::vector<ParameterSpec> state;  // non-trainable: GROUP/state/NAME
};

template <class T>
std::vector<LayerLayout> layouts(const ModelSpec& model) {
  std::vector<LayerLayout> out;
  for (const auto& layer : model_shapes(model))
    out.push_back({layer_group(layer.index, layer.type()), layer.parameters, layer.state});
  return out;
}

// Fault injection for tests: GPIPE_FAULT_KILL_DURING_CHECKPOINT=1 kills the
// process with SIGKILL after the first layer's data is written.
bool kill_requested() {
  const char* v = std::getenv("GPIPE_FAULT_KILL_DURING_CHECKPOINT");
  return v && std::string(v) == "1";
}

// Agrees across ranks: throws on every rank if `error` is set on any.
void agree(const std::string& error, const std::string& path, MPI_Comm comm) {
  int local = error.empty() ? 0 : 1, any = 0;
  MPI_Allreduce(&local, &any, 1, MPI_INT, MPI_MAX, comm);
  if (!error.empty()) throw InputError(error);
  if (any) throw InputError(fmt::format("{}: another rank failed to read its layers", path));
}

}  // namespace

std::string layer_group(std::int64_t index, const std::string& type) {
  return fmt::format("/layers/{:03d}_{}", index, type);
}

std::string checkpoint_path(const std::string& directory, std::int64_t step) {
  return (fs::path(directory) / fmt::format("ckpt_{:09d}.h5", step)).string();
}

namespace {
std::vector<std::pair<std::int64_t, std::string>> complete_checkpoints(const std::string& directory) {
  std::vector<std::pair<std::int64_t, std::string>> found;
  std::error_code ec;
  if (!fs::is_directory(directory, ec)) return found;
  static const std::regex name(R"(ckpt_(\d+)\.h5)");
  for (const auto& entry : fs::directory_iterator(directory, ec)) {
    std::smatch m;
    const std::string file = entry.path().filename().string();
    if (std::regex_match(file, m, name)) found.emplace_back(std::stoll(m[1].str()), entry.path().string());
  }
  std::sort(found.begin(), found.end());
  return found;
}
}  // namespace

std::string latest_checkpoint(const std::string& directory) {
  const auto found = complete_checkpoints(directory);
  if (found.empty())
    throw InputError(fmt::format("{}: no complete checkpoint (ckpt_*.h5) to restart from", directory));
  return found.back().second;
}

std::vector<std::string> remove_partial_checkpoints(const std::string& directory) {
  std::vector<std::string> removed;
  std::error_code ec;
  static const std::regex partial(R"(ckpt_\d+\.h5\.tmp)");
  std::vector<fs::path> found;  // listed first, removed after: no removal while iterating
  for (fs::directory_iterator it(directory, ec), end; !ec && it != end; it.increment(ec))
    if (std::regex_match(it->path().filename().string(), partial)) found.push_back(it->path());
  std::sort(found.begin(), found.end());
  for (const auto& path : found)
    if (fs::remove(path, ec)) removed.push_back(path.string());
  return removed;
}

void prune_checkpoints(const std::string& directory, int keep) {
  auto found = complete_checkpoints(directory);
  std::error_code ec;
  for (size_t i = 0; i + size_t(std::max(keep, 1)) < found.size(); ++i) fs::remove(found[i].second, ec);
}

template <class T>
void write_checkpoint(const std::string& path, const ModelSpec& model, const CheckpointInfo& info,
                      const CheckpointShard<T>& shard, MPI_Comm comm) {
  h5::silence_errors();
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  const std::string tmp = path + ".tmp";
  if (rank == 0) {
    std::error_code ec;
    fs::create_directories(fs::path(path).parent_path(), ec);
  }
  MPI_Barrier(comm);
  const auto layers = layouts<T>(model);
  {
    const h5::Handle fapl = mpio_access(comm);
    const h5::Handle file = h5::file(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()));
    if (!file.valid()) throw InputError(fmt::format("{}: cannot create checkpoint file", tmp));
    const hid_t root = file.get();
    h5::write_attribute(root, "format_version", (long long)kCheckpointFormatVersion);
    h5::write_attribute(root, "step", (long long)info.step);
    h5::write_attribute(root, "epoch", (long long)info.epoch);
    h5::write_attribute(root, "seed", (long long)info.seed);
    h5::write_attribute(root, "precision", info.precision);
    h5::write_attribute(root, "optimizer", info.optimizer);
    h5::write_attribute(root, "optimizer_steps", (long long)info.optimizer_steps);
    h5::write_attribute(root, "layers", (long long)layers.size());
    h5::write_attribute(root, "deck", info.deck);
    h5::write_attribute(root, "library_version", std::string(GPIPE_VERSION_STRING));
    const h5::Handle top = h5::group(H5Gcreate2(root, "layers", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    std::size_t offset = 0, state_offset = 0;  // into this rank's shard buffers
    for (std::size_t l = 0; l < layers.size(); ++l) {
      const bool mine = int(l) >= shard.first_layer && int(l) < shard.first_layer + shard.layer_count;
      const h5::Handle g = h5::group(H5Gcreate2(root, layers[l].group.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
      std::vector<h5::Handle> state_groups;
      if (!layers[l].specs.empty()) {
        const h5::Handle og = h5::group(H5Gcreate2(g.get(), "optimizer", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
        for (const auto& [name, values] : shard.optimizer_state)
          state_groups.push_back(h5::group(H5Gcreate2(og.get(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)));
      }
      for (const auto& spec : layers[l].specs) {
        const hsize_t dims[2] = {hsize_t(spec.rows), hsize_t(spec.cols)};
        const h5::Handle space = h5::dataspace(H5Screate_simple(2, dims, nullptr));
        auto write = [&](hid_t parent, const T* data) {
          const h5::Handle d = h5::dataset(H5Dcreate2(parent, spec.name.c_str(), native_type<T>(), space.get(),
                                                      H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
          if (mine && H5Dwrite(d.get(), native_type<T>(), H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0)
            throw InputError(fmt::format("{}: writing {}/{} failed", tmp, layers[l].group, spec.name));
        };
        write(g.get(), mine ? shard.parameters.data() + offset : nullptr);
        for (std::size_t s = 0; s < state_groups.size(); ++s)
          write(state_groups[s].get(), mine ? shard.optimizer_state[s].second.data() + offset : nullptr);
        if (mine) offset += std::size_t(spec.size());
      }
      if (!layers[l].state.empty()) {
        const h5::Handle sg = h5::group(H5Gcreate2(g.get(), "state", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
        for (const auto& spec : layers[l].state) {
          const hsize_t dims[2] = {hsize_t(spec.rows), hsize_t(spec.cols)};
          const h5::Handle space = h5::dataspace(H5Screate_simple(2, dims, nullptr));
          const h5::Handle d = h5::dataset(H5Dcreate2(sg.get(), spec.name.c_str(), native_type<T>(), space.get(),
                                                      H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
          if (mine && H5Dwrite(d.get(), native_type<T>(), H5S_ALL, H5S_ALL, H5P_DEFAULT,
                               shard.layer_state.data() + state_offset) < 0)
            throw InputError(fmt::format("{}: writing {}/state/{} failed", tmp, layers[l].group, spec.name));
          if (mine) state_offset += std::size_t(spec.size());
        }
      }
      if (l == 0 && kill_requested()) {
        H5Fflush(root, H5F_SCOPE_GLOBAL);
        ::kill(::getpid(), SIGKILL);
      }
    }
  }
  MPI_Barrier(comm);  // every rank has closed the file
  int ok = 1;
  if (rank == 0) ok = std::rename(tmp.c_str(), path.c_str()) == 0 ? 1 : 0;
  MPI_Bcast(&ok, 1, MPI_INT, 0, comm);
  if (!ok) throw InputError(fmt::format("{}: cannot rename {} into place", path, tmp));
}

template <class T>
CheckpointInfo read_checkpoint(const std::string& path, const ModelSpec& model,
                               const std::string& optimizer, CheckpointShard<T>& shard,
                               MPI_Comm comm) {
  h5::silence_errors();
  CheckpointInfo info;
  std::string error;
  {
    h5::Handle file;
    if (H5Fis_hdf5(path.c_str()) > 0) {
      const h5::Handle fapl = mpio_access(comm);
      file = h5::file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get()));
    }
    // Opening is collective and its outcome the same on every rank.
    if (!file.valid()) {
      std::error_code ec;
      throw InputError(fs::exists(path, ec)
                           ? fmt::format("{}: not a readable HDF5 checkpoint (corrupt or truncated)", path)
                           : fmt::format("{}: checkpoint not found", path));
    }
    try {
      const hid_t root = file.get();
      if (!h5::has_attribute(root, "format_version"))
        throw InputError(fmt::format("{}: attribute format_version is missing: not a gpipe checkpoint", path));
      const auto version = h5::read_int_attribute(root, "format_version");
      if (version != kCheckpointFormatVersion)
        throw InputError(fmt::format("{}: format_version {} is not supported (this build reads {})", path,
                                     version, kCheckpointFormatVersion));
      info.step = h5::read_int_attribute(root, "step");
      info.epoch = h5::read_int_attribute(root, "epoch");
      info.seed = std::uint64_t(h5::read_int_attribute(root, "seed"));
      info.precision = h5::read_string_attribute(root, "precision");
      info.optimizer = h5::read_string_attribute(root, "optimizer");
      info.optimizer_steps = h5::read_int_attribute(root, "optimizer_steps");
      info.deck = h5::read_string_attribute(root, "deck");
      const std::string precision = sizeof(T) == 4 ? "float" : "double";
      if (info.precision != precision)
        throw InputError(fmt::format("{}: precision: the checkpoint holds {}, the deck asks for {}", path,
                                     info.precision, precision));
      if (info.optimizer != optimizer)
        throw InputError(fmt::format("{}: optimizer: the checkpoint holds {} state, the deck asks for {}",
                                     path, info.optimizer, optimizer));
      const auto layers = layouts<T>(model);
      const auto stored = h5::read_int_attribute(root, "layers");
      if (stored != (long long)layers.size())
        throw InputError(fmt::format("{}: the checkpoint has {} layers, the model has {}", path, stored,
                                     layers.size()));
      shard.parameters.clear();
      shard.layer_state.clear();
      for (auto& s : shard.optimizer_state) s.second.clear();
      for (int l = shard.first_layer; l < shard.first_layer + shard.layer_count; ++l) {
        const auto& layout = layers[size_t(l)];
        if (H5Lexists(root, layout.group.c_str(), H5P_DEFAULT) <= 0)
          throw InputError(fmt::format("{}: missing group {} (the model's layer {} is a {} layer)", path,
                                       layout.group, l, model.layers[size_t(l)].type));
        auto read = [&](const std::string& name, const ParameterSpec& spec, std::vector<T>& out) {
          const h5::Handle d = h5::dataset(H5Dopen2(root, name.c_str(), H5P_DEFAULT));
          if (!d.valid()) throw InputError(fmt::format("{}: missing dataset {}", path, name));
          const h5::Handle space = h5::dataspace(H5Dget_space(d.get()));
          hsize_t dims[2] = {0, 0};
          const int rank = H5Sget_simple_extent_ndims(space.get());
          H5Sget_simple_extent_dims(space.get(), dims, nullptr);
          if (rank != 2 || dims[0] != hsize_t(spec.rows) || dims[1] != hsize_t(spec.cols))
            throw InputError(fmt::format("{}: {} has shape {}, the model expects {}x{}", path, name,
                                         rank == 2 ? fmt::format("{}x{}", dims[0], dims[1])
                                                   : fmt::format("of rank {}", rank),
                                         spec.rows, spec.cols));
          const h5::Handle type = h5::datatype(H5Dget_type(d.get()));
          if (H5Tequal(type.get(), native_type<T>()) <= 0)
            throw InputError(fmt::format("{}: {} is not stored as {}", path, name, sizeof(T) == 4 ? "float" : "double"));
          const std::size_t at = out.size();
          out.resize(at + std::size_t(spec.size()));
          if (H5Dread(d.get(), native_type<T>(), H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data() + at) < 0)
            throw InputError(fmt::format("{}: reading {} failed (file corrupt or truncated)", path, name));
        };
        for (const auto& spec : layout.specs) {
          read(layout.group + "/" + spec.name, spec, shard.parameters);
          for (auto& [state, values] : shard.optimizer_state)
            read(layout.group + "/optimizer/" + state + "/" + spec.name, spec, values);
        }
        for (const auto& spec : layout.state)
          read(layout.group + "/state/" + spec.name, spec, shard.layer_state);
      }
    } catch (const InputError& e) {
      error = e.what();
    } catch (const std::exception& e) {
      error = fmt::format("{}: {}", path, e.what());
    }
  }  // the file is closed (collectively) on every rank before agreeing
  agree(error, path, comm);
  return info;
}

template void write_checkpoint<float>(const std::string&, const ModelSpec&, const CheckpointInfo&,
                                      const CheckpointShard<float>&, MPI_Comm);
template void write_checkpoint<double>(const std::string&, const ModelSpec&, const CheckpointInfo&,
                                       const CheckpointShard<double>&, MPI_Comm);
template CheckpointInfo read_checkpoint<float>(const std::string&, const ModelSpec&, const std::string&,
                                               CheckpointShard<float>&, MPI_Comm);
template CheckpointInfo read_checkpoint<double>(const std::string&, const ModelSpec&, const std::string&,
                                                CheckpointShard<double>&, MPI_Comm);

}  // namespace gpipe
