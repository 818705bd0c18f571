#include "gpipe/io/checkpoint.hpp"
#include "gpipe/core/precision.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <random>
#include <sstream>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <regex>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "gpipe/config.hpp"
#include "gpipe/core/agreed.hpp"
#include "gpipe/optim/optimizer.hpp"
#include "gpipe/core/error.hpp"
#include "gpipe/layers/tied.hpp"
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
  const TiedLayers tied = tied_layers(model);
  for (const auto& layer : model_shapes(model)) {
    out.push_back({layer_group(layer.index, layer.type()), layer.parameters, layer.state});
    // A tied lm_head's weight is the token_embedding's (layers/tied.hpp):
    // stored once, in the embedding's group; the head's group holds none.
    if (int(layer.index) == tied.head) out.back().specs.clear();
  }
  return out;
}

// The bytes of every dataset of a checkpoint of `model` with `states`
// optimizer state tensors per parameter: a lower bound of its file size.
template <class T>
std::uint64_t data_bytes(const std::vector<LayerLayout>& layers, std::size_t states) {
  std::uint64_t bytes = 0;
  for (const auto& l : layers) {
    for (const auto& spec : l.specs) bytes += std::uint64_t(spec.size()) * (1 + states) * sizeof(T);
    for (const auto& spec : l.state) bytes += std::uint64_t(spec.size()) * sizeof(T);
  }
  return bytes;
}

// Before any HDF5 call: "" if a file of at least `bytes` bytes fits, else why
// not (this rank's file-size limit, ulimit -f; on rank 0 also the free space
// of the directory's file system).
std::string room_for(const std::string& tmp, std::uint64_t bytes, int rank) {
  rlimit limit{};
  if (getrlimit(RLIMIT_FSIZE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur < bytes)
    return fmt::format("not written: the checkpoint needs at least {} bytes, more than rank {}'s file "
                       "size limit of {} bytes (ulimit -f)",
                       bytes, rank, std::uint64_t(limit.rlim_cur));
  if (rank != 0) return "";
  struct statvfs fsys {};
  const fs::path dir = fs::path(tmp).parent_path().empty() ? fs::path(".") : fs::path(tmp).parent_path();
  if (::statvfs(dir.c_str(), &fsys) == 0) {
    const std::uint64_t free = std::uint64_t(fsys.f_bavail) * std::uint64_t(fsys.f_frsize);
    if (free < bytes)
      return fmt::format("not written: the checkpoint needs at least {} bytes, but the file system "
                         "of {} has {} bytes free",
                         bytes, dir.string(), free);
  }
  return "";
}

// After a failed write, before the (collective) close: HDF5 must still flush
// its metadata and set the file's size to close it, and a failed close in
// HDF5 1.10 leaves a dangling file that crashes at the next close or in
// MPI_Finalize. So rank 0 frees the partial file's blocks (its data is
// discarded anyway) and every rank lifts its soft file-size limit to the hard
// one for the close; the limit is restored by the returned guard.
struct CloseRoom {
  rlimit saved{};
  bool lifted = false;
  CloseRoom(const std::string& tmp, int rank) {
    if (rank == 0) {
      const int fd = ::open(tmp.c_str(), O_WRONLY);
      if (fd >= 0) {
        (void)!::ftruncate(fd, 0);
        ::close(fd);
      }
    }
    if (getrlimit(RLIMIT_FSIZE, &saved) == 0 && saved.rlim_cur != saved.rlim_max) {
      rlimit up = saved;
      up.rlim_cur = saved.rlim_max;
      lifted = setrlimit(RLIMIT_FSIZE, &up) == 0;
    }
  }
  ~CloseRoom() {
    if (lifted) setrlimit(RLIMIT_FSIZE, &saved);
  }
  CloseRoom(const CloseRoom&) = delete;
  CloseRoom& operator=(const CloseRoom&) = delete;
};

// "tmp: why", or "" when there is no reason.
std::string error_prefix(const std::string& tmp, const std::string& why) {
  return why.empty() ? why : fmt::format("{}: {}", tmp, why);
}

// Agrees across ranks: every rank throws the first failing rank's error.
void agree_on(const std::string& error, MPI_Comm comm) {
  throw_agreed(agree(error.empty() ? 0 : 1, error, comm));
}

// The root attributes (run identity and data position included) and the
// normalization group of an open checkpoint; throws InputError naming `path`.
CheckpointInfo read_info(hid_t root, const std::string& path) {
  CheckpointInfo info;
  if (!h5::has_attribute(root, "format_version"))
    throw InputError(fmt::format("{}: attribute format_version is missing: not a gpipe checkpoint", path));
  const auto version = h5::read_int_attribute(root, "format_version");
  if (version != kCheckpointFormatVersion)
    throw InputError(fmt::format("{}: format_version {} is not supported (this build reads {})", path,
                                 version, kCheckpointFormatVersion));
  info.step = h5::read_int_attribute(root, "step");
  info.epoch = h5::read_int_attribute(root, "epoch");
  info.seed = h5::read_uint_attribute(root, "seed");
  info.precision = h5::read_string_attribute(root, "precision");
  info.run_precision = h5::has_attribute(root, "run_precision") ? h5::read_string_attribute(root, "run_precision")
                                                                 : info.precision;
  if (h5::has_attribute(root, "loss_scale")) {
    info.loss_scale = h5::read_double_attribute(root, "loss_scale");
    info.loss_scale_good_steps = h5::read_int_attribute(root, "loss_scale_good_steps");
    info.loss_scale_overflows = h5::read_int_attribute(root, "loss_scale_overflows");
  }
  info.optimizer = h5::read_string_attribute(root, "optimizer");
  info.optimizer_steps = h5::read_int_attribute(root, "optimizer_steps");
  info.deck = h5::read_string_attribute(root, "deck");
  auto optional_int = [&](const char* name) {
    return h5::has_attribute(root, name) ? std::int64_t(h5::read_int_attribute(root, name)) : 0;
  };
  if (h5::has_attribute(root, "run_id")) info.run_id = h5::read_string_attribute(root, "run_id");
  info.written_ns = optional_int("written_ns");
  info.batch_size = optional_int("batch_size");
  info.train_samples = optional_int("train_samples");
  info.epoch_samples = optional_int("epoch_samples");
  info.epoch_loss_samples =
      h5::has_attribute(root, "epoch_loss_samples") ? optional_int("epoch_loss_samples") : -1;
  if (h5::has_attribute(root, "epoch_loss_sum"))
    info.epoch_loss_sum = h5::read_double_attribute(root, "epoch_loss_sum");
  info.epoch_skipped_steps = optional_int("epoch_skipped_steps");
  if (h5::has_attribute(root, "epoch_metric_samples")) {
    info.epoch_metric_samples = optional_int("epoch_metric_samples");
    info.epoch_metric_moments = h5::read_double_vector_attribute(root, "epoch_metric_moments");
  }
  if (H5Lexists(root, "normalization", H5P_DEFAULT) > 0) {
    const h5::Handle g = h5::group(H5Gopen2(root, "normalization", H5P_DEFAULT));
    auto& n = info.normalization;
    n.input_scale = h5::read_double_attribute(g.get(), "input_scale");
    n.input_mean = h5::read_double_attribute(g.get(), "input_mean");
    n.input_std = h5::read_double_attribute(g.get(), "input_std");
    if (h5::has_attribute(g.get(), "input_feature_mean")) {
      n.input_feature_mean = h5::read_double_vector_attribute(g.get(), "input_feature_mean");
      n.input_feature_std = h5::read_double_vector_attribute(g.get(), "input_feature_std");
    }
    n.target_mean = h5::read_double_vector_attribute(g.get(), "target_mean");
    n.target_std = h5::read_double_vector_attribute(g.get(), "target_std");
  }
  return info;
}

// Reads the root attributes and checks them against what the deck asks for;
// throws InputError naming `path`.
template <class T>
CheckpointInfo read_header(hid_t root, const std::string& path, const std::string& optimizer,
                           std::size_t layer_count) {
  CheckpointInfo info = read_info(root, path);
  const std::string precision = sizeof(T) == 4 ? "float" : "double";
  if (info.precision != precision)
    throw InputError(fmt::format("{}: precision: the checkpoint holds {}, the deck asks for {}", path,
                                 info.precision, precision));
  if (info.optimizer != optimizer)
    throw InputError(fmt::format("{}: optimizer: the checkpoint holds {} state, the deck asks for {}",
                                 path, info.optimizer, optimizer));
  const auto stored = h5::read_int_attribute(root, "layers");
  if (stored != (long long)layer_count)
    throw InputError(fmt::format("{}: the checkpoint has {} layers, the model has {}", path, stored,
                                 layer_count));
  return info;
}

// Checks that dataset `name` exists with spec's shape and type T; returns it open.
template <class T>
h5::Handle open_checked(hid_t root, const std::string& path, const std::string& name,
                        const ParameterSpec& spec) {
  h5::Handle d = h5::dataset(H5Dopen2(root, name.c_str(), H5P_DEFAULT));
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
  if (H5Dget_storage_size(d.get()) < hsize_t(spec.size()) * sizeof(T))
    throw InputError(fmt::format("{}: {} holds no complete data (file corrupt or truncated)", path, name));
  return d;
}

// Checks layer `l`'s group and datasets (parameters and every optimizer state).
template <class T>
void check_layer(hid_t root, const std::string& path, const ModelSpec& model, int l,
                 const LayerLayout& layout, const std::vector<std::string>& states) {
  if (H5Lexists(root, layout.group.c_str(), H5P_DEFAULT) <= 0)
    throw InputError(fmt::format("{}: missing group {} (the model's layer {} is a {} layer)", path,
                                 layout.group, l, model.layers[size_t(l)].type));
  for (const auto& spec : layout.specs) {
    open_checked<T>(root, path, layout.group + "/" + spec.name, spec);
    for (const auto& state : states)
      open_checked<T>(root, path, layout.group + "/optimizer/" + state + "/" + spec.name, spec);
  }
}


}  // namespace

std::string layer_group(std::int64_t index, const std::string& type) {
  return fmt::format("/layers/{:03d}_{}", index, type);
}

CheckpointInfo read_checkpoint_info(const std::string& path) {
  h5::silence_errors();
  std::error_code ec;
  if (!fs::exists(path, ec)) throw InputError(fmt::format("{}: checkpoint not found", path));
  const h5::Handle file = h5::file(H5Fis_hdf5(path.c_str()) > 0
                                       ? H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT)
                                       : hid_t(-1));
  if (!file.valid())
    throw InputError(fmt::format("{}: not a readable HDF5 checkpoint (corrupt or truncated)", path));
  if (!h5::has_attribute(file.get(), "format_version"))
    throw InputError(fmt::format("{}: attribute format_version is missing: not a gpipe checkpoint", path));
  try {
    return read_info(file.get(), path);
  } catch (const InputError&) {
    throw;
  } catch (const std::exception& e) {
    throw InputError(fmt::format("{}: {}", path, e.what()));
  }
}

std::string checkpoint_path(const std::string& directory, std::int64_t step, const std::string& run) {
  const std::string name = run.empty() ? fmt::format("ckpt_{:09d}.h5", step)
                                       : fmt::format("ckpt_{:09d}_{}.h5", step, run);
  return (fs::path(directory) / name).string();
}

std::string new_run_id(MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  unsigned long long id = 0;
  if (rank == 0) {
    std::random_device device;
    const auto now = std::chrono::system_clock::now().time_since_epoch().count();
    id = (std::uint64_t(device()) << 32 | device()) ^ std::uint64_t(now) ^
         (std::uint64_t(::getpid()) << 17);
  }
  MPI_Bcast(&id, 1, MPI_UNSIGNED_LONG_LONG, 0, comm);
  return fmt::format("{:016x}", id);
}

namespace {
struct Listed {
  std::int64_t step;
  std::string run;  // from the name ("" for names without a run id)
  std::string path;
};

// Checkpoint files (ckpt_<step>[_<run>].h5; never .tmp files) in `directory`.
std::vector<Listed> list_checkpoints(const std::string& directory) {
  std::vector<Listed> found;
  std::error_code ec;
  if (!fs::is_directory(directory, ec)) return found;
  static const std::regex name(R"(ckpt_(\d+)(?:_([0-9a-f]{16}))?\.h5)");
  for (const auto& entry : fs::directory_iterator(directory, ec)) {
    std::smatch m;
    const std::string file = entry.path().filename().string();
    if (std::regex_match(file, m, name))
      found.push_back({std::stoll(m[1].str()), m[2].str(), entry.path().string()});
  }
  return found;
}

// Inspects one candidate on this rank alone (serial HDF5): header and every
// dataset of every layer. Returns "" if usable, else the reason.
// Unix time (ns) of the file's last modification.
std::int64_t modified_ns(const std::string& path) {
  std::error_code ec;
  const auto t = fs::last_write_time(path, ec);
  const auto since = t - fs::file_time_type::clock::now() + std::chrono::system_clock::now();
  return std::int64_t(
      std::chrono::duration_cast<std::chrono::nanoseconds>(since.time_since_epoch()).count());
}

// Inspects one candidate on this rank alone (serial HDF5): header and every
// dataset of every layer. Returns "" if usable, else the reason. Sets
// info.written_ns in any case (from the file, else its modification time), so
// damaged files sort by age too.
template <class T>
std::string inspect(const std::string& path, const ModelSpec& model, const std::string& optimizer,
                    const std::vector<std::string>& states, CheckpointInfo& info) {
  info.written_ns = modified_ns(path);
  const char* unreadable = "not a readable HDF5 checkpoint (corrupt or truncated)";
  if (H5Fis_hdf5(path.c_str()) <= 0) return unreadable;
  const h5::Handle file = h5::file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  if (!file.valid()) return unreadable;
  try {
    if (h5::has_attribute(file.get(), "written_ns"))
      info.written_ns = h5::read_int_attribute(file.get(), "written_ns");
    const auto written = info.written_ns;
    const auto layers = layouts<T>(model);
    info = read_header<T>(file.get(), path, optimizer, layers.size());
    if (info.written_ns == 0) info.written_ns = written;
    for (std::size_t l = 0; l < layers.size(); ++l)
      check_layer<T>(file.get(), path, model, int(l), layers[l], states);
  } catch (const std::exception& e) {
    std::string why = e.what();
    if (why.rfind(path + ": ", 0) == 0) why = why.substr(path.size() + 2);
    return why;
  }
  return "";
}

template <class T>
LatestCheckpoint latest_of(const std::string& directory, const ModelSpec& model,
                           const std::string& optimizer) {
  LatestCheckpoint out;
  auto found = list_checkpoints(directory);
  std::vector<std::string> states;  // names of the deck optimizer's state buffers
  OptimizerSpec spec;
  spec.type = optimizer;
  for (const auto& [name, values] : make_optimizer<T>(spec, 0)->state()) states.push_back(name);
  struct Candidate {
    Listed file;
    CheckpointInfo info;
    std::string problem;
  };
  std::vector<Candidate> candidates;
  for (auto& f : found) {
    Candidate c{f, {}, ""};
    c.problem = inspect<T>(f.path, model, optimizer, states, c.info);
    candidates.push_back(std::move(c));
  }
  // Newest first: written time (damaged files by step alone, after the rest), then step.
  std::sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
    if (a.info.written_ns != b.info.written_ns) return a.info.written_ns > b.info.written_ns;
    if (a.file.step != b.file.step) return a.file.step > b.file.step;
    return a.file.path > b.file.path;
  });
  for (const auto& c : candidates) {
    if (c.problem.empty()) {
      out.path = c.file.path;
      out.info = c.info;
      return out;
    }
    out.skipped.push_back(c.file.path + ": " + c.problem);
  }
  return out;
}
}  // namespace

LatestCheckpoint find_latest_checkpoint(const std::string& directory, const ModelSpec& model,
                                        const std::string& precision,
                                        const std::string& optimizer, MPI_Comm comm) {
  h5::silence_errors();
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  LatestCheckpoint latest;
  std::string error;
  if (rank == 0) {
    try {
      latest = with_scalar(precision, [&](auto t) { return latest_of<decltype(t)>(directory, model, optimizer); });
      if (latest.path.empty())
        error = latest.skipped.empty()
                    ? fmt::format("{}: no complete checkpoint (ckpt_*.h5) to restart from", directory)
                    : fmt::format("{}: no usable checkpoint to restart from; skipped: {}", directory,
                                  fmt::join(latest.skipped, "; "));
    } catch (const std::exception& e) {
      error = fmt::format("{}: {}", directory, e.what());
    }
  }
  agree_on(error, comm);
  // Broadcast the choice (path, skipped list) as one text, and its step.
  long long step = latest.info.step;
  MPI_Bcast(&step, 1, MPI_LONG_LONG, 0, comm);
  latest.info.step = step;
  std::string text;
  if (rank == 0) {
    text = latest.path + '\n' + fmt::format("{}", fmt::join(latest.skipped, "\n"));
  }
  int size = int(text.size());
  MPI_Bcast(&size, 1, MPI_INT, 0, comm);
  text.resize(std::size_t(size));
  MPI_Bcast(text.data(), size, MPI_CHAR, 0, comm);
  if (rank != 0) {
    std::istringstream in(text);
    std::string line;
    std::getline(in, latest.path);
    while (std::getline(in, line))
      if (!line.empty()) latest.skipped.push_back(line);
  }
  return latest;
}

std::string newest_checkpoint(const std::string& directory) {
  h5::silence_errors();
  std::error_code ec;
  if (!fs::is_directory(directory, ec))
    throw InputError(fmt::format("{}: no such directory", directory));
  std::string best;
  std::int64_t best_ns = 0, best_step = -1;
  std::vector<std::string> skipped;
  for (const auto& f : list_checkpoints(directory)) {
    std::int64_t ns = 0;
    try {
      const CheckpointInfo info = read_checkpoint_info(f.path);
      ns = info.written_ns != 0 ? info.written_ns : modified_ns(f.path);
    } catch (const std::exception& e) {
      skipped.push_back(e.what());
      continue;
    }
    if (best.empty() || ns > best_ns || (ns == best_ns && f.step > best_step) ||
        (ns == best_ns && f.step == best_step && f.path > best)) {
      best = f.path;
      best_ns = ns;
      best_step = f.step;
    }
  }
  if (best.empty())
    throw InputError(skipped.empty()
                         ? fmt::format("{}: no complete checkpoint (ckpt_*.h5) in this directory", directory)
                         : fmt::format("{}: no readable checkpoint; skipped: {}", directory,
                                       fmt::join(skipped, "; ")));
  return best;
}

std::vector<std::string> remove_partial_checkpoints(const std::string& directory) {
  std::vector<std::string> removed;
  std::error_code ec;
  static const std::regex partial(R"(ckpt_\d+(_[0-9a-f]{16})?\.h5\.tmp)");
  std::vector<fs::path> found;  // listed first, removed after: no removal while iterating
  for (fs::directory_iterator it(directory, ec), end; !ec && it != end; it.increment(ec))
    if (std::regex_match(it->path().filename().string(), partial)) found.push_back(it->path());
  std::sort(found.begin(), found.end());
  for (const auto& path : found)
    if (fs::remove(path, ec)) removed.push_back(path.string());
  return removed;
}

void prune_checkpoints(const std::string& directory, const std::string& run, int keep) {
  if (run.empty()) return;  // files without an id belong to no run we can prove is ours
  auto found = list_checkpoints(directory);
  std::vector<Listed> mine;
  for (auto& f : found)
    if (f.run == run) mine.push_back(f);
  std::sort(mine.begin(), mine.end(), [](const Listed& a, const Listed& b) { return a.step > b.step; });
  std::error_code ec;
  for (std::size_t i = std::size_t(std::max(keep, 1)); i < mine.size(); ++i) fs::remove(mine[i].path, ec);
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
  // Room for the file, checked before HDF5 creates anything (agreed).
  agree_on(error_prefix(tmp, room_for(tmp, data_bytes<T>(layers, shard.optimizer_state.size()), rank)),
           comm);
  // A rank-local failure (a failed H5Dwrite, an attribute) is recorded, and the
  // rank keeps making the same collective HDF5 calls as the others, so every
  // rank reaches the agreement below; only then is the outcome acted on.
  std::string error;
  auto fail = [&](const std::string& why) {
    if (error.empty()) error = fmt::format("{}: {}", tmp, why);
  };
  {
    const h5::Handle fapl = mpio_access(comm);
    h5::Handle file = h5::file(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()));
    if (!file.valid()) fail(h5::with_reason("cannot create checkpoint file"));
    const hid_t root = file.get();
    if (file.valid()) {
      try {
        h5::write_attribute(root, "format_version", (long long)kCheckpointFormatVersion);
        h5::write_attribute(root, "step", (long long)info.step);
        h5::write_attribute(root, "epoch", (long long)info.epoch);
        h5::write_attribute(root, "seed", std::uint64_t(info.seed));
        h5::write_attribute(root, "precision", info.precision);
        h5::write_attribute(root, "run_precision", info.run_precision.empty() ? info.precision : info.run_precision);
        if (info.loss_scale > 0) {
          h5::write_attribute(root, "loss_scale", info.loss_scale);
          h5::write_attribute(root, "loss_scale_good_steps", (long long)info.loss_scale_good_steps);
          h5::write_attribute(root, "loss_scale_overflows", (long long)info.loss_scale_overflows);
        }
        h5::write_attribute(root, "optimizer", info.optimizer);
        h5::write_attribute(root, "optimizer_steps", (long long)info.optimizer_steps);
        h5::write_attribute(root, "layers", (long long)layers.size());
        h5::write_attribute(root, "deck", info.deck);
        h5::write_attribute(root, "library_version", std::string(GPIPE_VERSION_STRING));
        h5::write_attribute(root, "run_id", info.run_id);
        h5::write_attribute(root, "written_ns", (long long)info.written_ns);
        h5::write_attribute(root, "batch_size", (long long)info.batch_size);
        h5::write_attribute(root, "train_samples", (long long)info.train_samples);
        h5::write_attribute(root, "epoch_samples", (long long)info.epoch_samples);
        h5::write_attribute(root, "epoch_loss_sum", info.epoch_loss_sum);
        h5::write_attribute(root, "epoch_loss_samples", (long long)info.epoch_loss_samples);
        h5::write_attribute(root, "epoch_metric_samples", (long long)info.epoch_metric_samples);
        h5::write_attribute(root, "epoch_metric_moments", info.epoch_metric_moments);
        h5::write_attribute(root, "epoch_skipped_steps", (long long)info.epoch_skipped_steps);
        const auto& n = info.normalization;
        const h5::Handle g =
            h5::group(H5Gcreate2(root, "normalization", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
        h5::write_attribute(g.get(), "input_scale", n.input_scale);
        h5::write_attribute(g.get(), "input_mean", n.input_mean);
        h5::write_attribute(g.get(), "input_std", n.input_std);
        h5::write_attribute(g.get(), "input_feature_mean", n.input_feature_mean);
        h5::write_attribute(g.get(), "input_feature_std", n.input_feature_std);
        h5::write_attribute(g.get(), "target_mean", n.target_mean);
        h5::write_attribute(g.get(), "target_std", n.target_std);
      } catch (const std::exception& e) {
        fail(e.what());
      }
      const h5::Handle top = h5::group(H5Gcreate2(root, "layers", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
      std::size_t offset = 0, state_offset = 0;  // into this rank's shard buffers
      for (std::size_t l = 0; l < layers.size(); ++l) {
        const bool mine = std::binary_search(shard.layers.begin(), shard.layers.end(), int(l));
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
            if (!d.valid())
              return fail(h5::with_reason(fmt::format("creating {}/{} failed", layers[l].group, spec.name)));
            if (mine && error.empty() && H5Dwrite(d.get(), native_type<T>(), H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0)
              fail(h5::with_reason(fmt::format("writing {}/{} failed", layers[l].group, spec.name)));
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
            if (!d.valid())
              fail(h5::with_reason(fmt::format("creating {}/state/{} failed", layers[l].group, spec.name)));
            else if (mine && error.empty() &&
                     H5Dwrite(d.get(), native_type<T>(), H5S_ALL, H5S_ALL, H5P_DEFAULT,
                              shard.layer_state.data() + state_offset) < 0)
              fail(h5::with_reason(fmt::format("writing {}/state/{} failed", layers[l].group, spec.name)));
            if (mine) state_offset += std::size_t(spec.size());
          }
        }
      }
    }
    // Every object of the file is closed (the handles above); now the file,
    // explicitly and collectively, its status checked.
    if (file.valid()) {
      const bool failed = any_rank(!error.empty(), comm);
      std::unique_ptr<CloseRoom> room;
      if (failed) {
        room = std::make_unique<CloseRoom>(tmp, rank);
        MPI_Barrier(comm);  // the partial file is emptied before any rank closes
      }
      if (file.close() < 0) fail(h5::with_reason("closing the checkpoint file failed"));
    }
  }  // every rank closes the file (collective) before agreeing
  const Agreement outcome = agree(error.empty() ? 0 : 1, error, comm);
  int ok = outcome.failed ? 0 : 1;
  if (rank == 0) {
    std::error_code ec;
    if (ok) ok = std::rename(tmp.c_str(), path.c_str()) == 0 ? 1 : 0;
    if (!ok) fs::remove(tmp, ec);  // never leave a partial file behind
  }
  MPI_Bcast(&ok, 1, MPI_INT, 0, comm);
  throw_agreed(outcome);
  if (!ok) throw AgreedError<InputError>(fmt::format("{}: cannot rename {} into place", path, tmp));
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
      const auto layers = layouts<T>(model);
      info = read_header<T>(root, path, optimizer, layers.size());
      shard.parameters.clear();
      shard.layer_state.clear();
      for (auto& s : shard.optimizer_state) s.second.clear();
      std::vector<std::string> states;
      for (const auto& st : shard.optimizer_state) states.push_back(st.first);
      for (int l : shard.layers) {
        const auto& layout = layers[size_t(l)];
        check_layer<T>(root, path, model, l, layout, states);
        auto read = [&](const std::string& name, const ParameterSpec& spec, std::vector<T>& out) {
          const h5::Handle d = open_checked<T>(root, path, name, spec);
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
  agree_on(error, comm);
  return info;
}

#define GPIPE_INSTANTIATE(T) \
  template void write_checkpoint<T>(const std::string&, const ModelSpec&, const CheckpointInfo&, const CheckpointShard<T>&, MPI_Comm); \
  template CheckpointInfo read_checkpoint<T>(const std::string&, const ModelSpec&, const std::string&, CheckpointShard<T>&, MPI_Comm);
GPIPE_FOR_EACH_SCALAR(GPIPE_INSTANTIATE)
#undef GPIPE_INSTANTIATE

std::string unwritable_file(const std::string& what, const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec)) return fmt::format("{} {}: is a directory, not a file", what, path);
  const fs::path parent = fs::path(path).parent_path();
  const std::string dir = parent.empty() ? std::string(".") : parent.string();
  static std::atomic<unsigned> probes{0};
  const std::string probe = fmt::format("{}/.gpipe-write-check-{}-{}", dir, ::getpid(), probes++);
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
  if (fd < 0) return fmt::format("{} {}: cannot create files in {}: {}", what, path, dir, std::strerror(errno));
  ::close(fd);
  ::unlink(probe.c_str());
  if (fs::exists(path, ec) && ::access(path.c_str(), W_OK) != 0)
    return fmt::format("{} {}: cannot write it: {}", what, path, std::strerror(errno));
  return "";
}

std::string unwritable_directory(const std::string& what, const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    // Create first, then look: every rank runs this at once, so another
    // rank may create the directory between any two of these calls (an
    // "exists" test before creating would then see a directory appear and
    // call it a non-directory).
    fs::create_directories(dir, ec);
    std::error_code again;
    if (!fs::is_directory(dir, again)) {
      if (fs::exists(dir, again)) return fmt::format("{} {}: exists and is not a directory", what, dir);
      return fmt::format("{} {}: cannot create the directory: {}", what, dir,
                         ec ? ec.message() : std::string("it does not exist after creating it"));
    }
  }
  return unwritable_file(what, dir + "/ckpt_probe.h5");
}

void require_writable_directory(const std::string& what, const std::string& dir, MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  const std::string error = unwritable_directory(what, dir);
  throw_agreed(agree(error.empty() ? 0 : 1, error.empty() ? error : fmt::format("{} (rank {})", error, rank), comm));
}

}  // namespace gpipe
