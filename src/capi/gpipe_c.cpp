// The C API (include/gpipe/gpipe.h): a thin wrapper over gpipe::Pipeline. Every entry point
// catches every exception and turns it into a status and a message.

#include "gpipe/gpipe.h"
#include "gpipe/core/precision.hpp"

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "gpipe/core/agreed.hpp"
#include "gpipe/train/plan.hpp"
#include "gpipe/core/error.hpp"
#include "gpipe/core/runtime.hpp"
#include "gpipe/io/checkpoint.hpp"
#include "gpipe/io/deck.hpp"
#include "gpipe/train/pipeline.hpp"

struct gpipe_trainer {
  std::variant<std::unique_ptr<gpipe::Pipeline<float>>, std::unique_ptr<gpipe::Pipeline<double>>> impl;
  gpipe::Deck deck;
};

namespace {

thread_local std::string last_error;
bool initialized_kokkos = false;
bool finalized_kokkos = false;  // Kokkos cannot be initialized again in this process

gpipe_status fail(gpipe_status status, std::string message) {
  last_error = std::move(message);
  return status;
}

// Runs `body`, mapping exceptions to statuses.
template <class F>
gpipe_status guarded(F&& body) {
  try {
    last_error.clear();
    return body();
  } catch (const gpipe::InputError& e) {
    return fail(GPIPE_ERROR_INPUT, e.what());
  } catch (const gpipe::StateError& e) {
    return fail(GPIPE_ERROR_STATE, e.what());
  } catch (const std::exception& e) {
    return fail(GPIPE_ERROR_RUNTIME, e.what());
  } catch (...) {
    return fail(GPIPE_ERROR_RUNTIME, "unknown C++ exception");
  }
}

// GPIPE_ERROR_STATE unless gpipe_initialize (or the host code) set up Kokkos.
gpipe_status need_initialized(const char* function) {
  if (Kokkos::is_initialized()) return GPIPE_OK;
  return fail(GPIPE_ERROR_STATE, std::string(function) + ": call gpipe_initialize first" +
                                     (finalized_kokkos ? " (gpipe_finalize has already run)" : ""));
}

// Collective over `comm`, before any other collective of an entry point:
// agrees on the ranks' argument checks. `local` is this rank's status
// (GPIPE_OK, or a failure whose message is in last_error). Returns the
// lowest failing rank's status on every rank (GPIPE_OK if none failed); the
// failing rank keeps its message, the others get "<function>: rank R
// rejected its arguments: <R's message>". One MPI_Allreduce when all agree.
gpipe_status agree_arguments(gpipe_status local, MPI_Comm comm, const char* function) {
  const gpipe::Agreement a = gpipe::agree(int(local), local == GPIPE_OK ? std::string() : last_error, comm);
  if (!a.failed) return GPIPE_OK;
  if (local == GPIPE_OK)
    last_error = std::string(function) + ": rank " + std::to_string(a.first_rank) +
                 " rejected its arguments: " + a.message;
  return gpipe_status(a.kind);
}

// A checksum of `bytes` bytes (64-bit, word by word): equal batches give
// equal sums; a difference anywhere changes it (but for a 2^-64 chance).
std::uint64_t checksum(const void* data, std::size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint64_t h = 0xcbf29ce484222325ull ^ bytes;
  std::size_t i = 0;
  for (; i + 4 <= bytes; i += 4) {
    std::uint32_t w;
    std::memcpy(&w, p + i, 4);
    h = (h ^ w) * 0x100000001b3ull;
    h ^= h >> 29;
  }
  for (; i < bytes; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

// Collective over `comm`, after the arguments are agreed: every rank must
// pass the same batch (the first cell uses the inputs, the last the labels or
// targets; a rank passing other samples would silently train on a mix). One
// MPI_Allreduce of the minima of n and of two checksums (each with its
// complement: min == max) when they agree; otherwise an MPI_Allgather to name
// the ranks, and GPIPE_ERROR_INPUT on every rank with the same message.
// Different n pass here: the step itself names the sample counts.
gpipe_status check_same_batch(const void* inputs, std::size_t input_bytes, const void* targets,
                              std::size_t target_bytes, const char* target_name, std::int64_t n,
                              MPI_Comm comm, const char* function) {
  const std::uint64_t in = checksum(inputs, input_bytes), out = checksum(targets, target_bytes);
  const auto count = std::uint64_t(n);
  std::uint64_t local[6] = {in, ~in, out, ~out, count, ~count}, least[6];
  MPI_Allreduce(local, least, 6, MPI_UINT64_T, MPI_MIN, comm);
  if (least[4] != ~least[5]) return GPIPE_OK;  // different n: Pipeline::step's message
  if (least[0] == ~least[1] && least[2] == ~least[3]) return GPIPE_OK;
  int ranks = 1;
  MPI_Comm_size(comm, &ranks);
  std::vector<std::uint64_t> all(2 * std::size_t(ranks));
  const std::uint64_t mine[2] = {in, out};
  MPI_Allgather(mine, 2, MPI_UINT64_T, all.data(), 2, MPI_UINT64_T, comm);
  std::string message = std::string(function) +
                        ": every rank must pass the same batch (the same n samples), but";
  const char* names[2] = {"inputs", target_name};
  bool first = true;
  for (int a = 0; a < 2; ++a) {
    std::string differ;
    for (int r = 1; r < ranks; ++r)
      if (all[2 * std::size_t(r) + a] != all[std::size_t(a)])
        differ += (differ.empty() ? "" : ", ") + std::to_string(r);
    if (differ.empty()) continue;
    message += std::string(first ? "" : ";") + " the " + names[a] + " of rank" +
               (differ.find(',') == std::string::npos ? " " : "s ") + differ + " differ from rank 0's";
    first = false;
  }
  return fail(GPIPE_ERROR_INPUT, message + " (checksums compared over the trainer's communicator)");
}

template <class Trainer>
MPI_Comm comm_of(const Trainer& t) {
  return std::visit([](const auto& p) { return p->comm(); }, t->impl);
}

// The n a training step accepts: D x micro_batches to batch_size; "" if fine.
std::string check_step_size(const gpipe_trainer* trainer, int64_t n, const char* function) {
  const auto& d = trainer->deck;
  const int replicas = std::visit([](const auto& t) { return t->grid().replicas; }, trainer->impl);
  const std::int64_t least = std::int64_t(replicas) * d.training.micro_batches;
  if (n >= least && n <= d.training.batch_size) return "";
  return std::string(function) + ": n = " + std::to_string(n) + " samples, expected " +
         std::to_string(least) +
         (replicas > 1 ? " (replicas x micro_batches) to " : " (micro_batches) to ") +
         std::to_string(d.training.batch_size) + " (batch_size)";
}

// The local checks of gpipe_train_step's arguments (the message is set on failure).
gpipe_status check_train_arguments(const gpipe_trainer* trainer, const int32_t* labels, int64_t n) {
  const auto& d = trainer->deck;
  if (d.model.loss.regression())
    return fail(GPIPE_ERROR_INPUT, "gpipe_train_step: model.loss is " + d.model.loss.type +
                                       ": pass float targets with gpipe_train_step_targets");
  const std::string bad = check_step_size(trainer, n, "gpipe_train_step");
  if (!bad.empty()) return fail(GPIPE_ERROR_INPUT, bad);
  // One label per sample, in [0, classes); a language model
  // (token_cross_entropy): one per token, n x T, in [0, vocabulary).
  const std::int64_t per = std::max<std::int64_t>(d.model.labels_per_sample(), 1);
  const std::int64_t classes = d.model.vocabulary();
  const std::string what = d.model.loss.tokens() ? " (the vocabulary)" : "";
  for (int64_t i = 0; i < n * per; ++i)
    if (labels[i] < 0 || labels[i] >= classes)
      return fail(GPIPE_ERROR_INPUT,
                  "gpipe_train_step: labels[" + std::to_string(i) + "] = " + std::to_string(labels[i]) +
                      (per > 1 ? " (sample " + std::to_string(i / per) + ", token " + std::to_string(i % per) + ")"
                               : std::string()) +
                      " is outside [0, " + std::to_string(classes) + ")" + what);
  return GPIPE_OK;
}

// The local checks of gpipe_train_step_targets' arguments.
gpipe_status check_target_arguments(const gpipe_trainer* trainer, int64_t n) {
  if (!trainer->deck.model.loss.regression())
    return fail(GPIPE_ERROR_INPUT, "gpipe_train_step_targets: model.loss is softmax_cross_entropy: "
                                   "pass integer labels with gpipe_train_step");
  const std::string bad = check_step_size(trainer, n, "gpipe_train_step_targets");
  return bad.empty() ? GPIPE_OK : fail(GPIPE_ERROR_INPUT, bad);
}

gpipe_status create(gpipe::Deck deck, MPI_Comm comm, gpipe_trainer** out) {
  auto t = std::make_unique<gpipe_trainer>();
  gpipe::with_scalar(deck.precision,
                     [&](auto s) { t->impl = std::make_unique<gpipe::Pipeline<decltype(s)>>(deck, comm); });
  t->deck = std::move(deck);
  *out = t.release();
  return GPIPE_OK;
}

// The frame of every collective entry point on a trainer. A NULL trainer
// fails at once (there is no communicator to agree over). Otherwise `check`
// (this rank's argument checks: a status, with last_error set on failure)
// is agreed over the trainer's communicator before `body` runs any
// collective, so an argument rejected on one rank fails the call on every
// rank with the same status and none is left waiting.
template <class Check, class Body>
gpipe_status collective(const gpipe_trainer* trainer, const char* null_message, const char* function,
                        Check&& check, Body&& body) {
  if (!trainer) return fail(GPIPE_ERROR_NULL_ARGUMENT, null_message);
  last_error.clear();
  gpipe_status local = need_initialized(function);
  if (local == GPIPE_OK) local = guarded(check);
  const gpipe_status agreed = agree_arguments(local, comm_of(trainer), function);
  if (agreed != GPIPE_OK) return agreed;
  return guarded(body);
}

// Collective over `comm`: reads the deck with `read` on every rank and
// agrees on the arguments and the deck before constructing the trainer
// (whose construction communicates). `null_message`: the error when
// `arguments_ok` is false.
template <class Read>
gpipe_status create_agreed(bool arguments_ok, const char* null_message, const char* function,
                           Read&& read, MPI_Comm comm, gpipe_trainer** out) {
  if (out) *out = nullptr;
  int mpi = 0;
  MPI_Initialized(&mpi);
  if (!mpi) return fail(GPIPE_ERROR_STATE, std::string(function) + ": initialize MPI first");
  if (comm == MPI_COMM_NULL)
    return fail(GPIPE_ERROR_INPUT, std::string(function) + ": comm is MPI_COMM_NULL");
  gpipe::Deck deck;
  gpipe_status local = arguments_ok ? need_initialized(function) : fail(GPIPE_ERROR_NULL_ARGUMENT, null_message);
  if (local == GPIPE_OK)
    local = guarded([&] {
      deck = read();
      return GPIPE_OK;
    });
  const gpipe_status agreed = agree_arguments(local, comm, function);
  if (agreed != GPIPE_OK) return agreed;
  return guarded([&] {
    // Every rank's deck must be rank 0's (agreed, before any collective the
    // deck decides, such as the checkpoint directory's check below).
    gpipe::check_same_deck(deck, comm);
    // Before the first step, as every entry point: a checkpoint directory
    // that cannot be written fails here (agreed), not at the first save.
    if (!deck.checkpoint.directory.empty())
      gpipe::require_writable_directory("checkpoint.directory", deck.checkpoint.directory, comm);
    return create(std::move(deck), comm, out);
  });
}

}  // namespace

extern "C" {

const char* gpipe_last_error(void) { return last_error.c_str(); }

gpipe_status gpipe_initialize(int* argc, char*** argv) {
  return guarded([&] {
    int mpi = 0;
    MPI_Initialized(&mpi);
    if (!mpi) return fail(GPIPE_ERROR_STATE, "gpipe_initialize: initialize MPI first (MPI_Init_thread)");
    int provided = MPI_THREAD_SINGLE;
    MPI_Query_thread(&provided);
    if (provided < gpipe::required_mpi_thread_level())
      return fail(GPIPE_ERROR_STATE,
                  "gpipe_initialize: MPI was initialized with thread level " + std::to_string(provided) +
                      "; the Kokkos " + gpipe::ExecSpace::name() +
                      " backend needs MPI_THREAD_FUNNELED: initialize MPI with MPI_Init_thread");
    if (finalized_kokkos && !Kokkos::is_initialized())
      return fail(GPIPE_ERROR_STATE,
                  "gpipe_initialize: gpipe_finalize has already finalized Kokkos, which cannot be "
                  "initialized again in the same process: call gpipe_initialize and gpipe_finalize "
                  "once per process");
    if (!Kokkos::is_initialized()) {
      int zero = 0;
      char** none = nullptr;
      if (argc && argv)
        Kokkos::initialize(*argc, *argv);
      else
        Kokkos::initialize(zero, none);
      initialized_kokkos = true;
    }
    return GPIPE_OK;
  });
}

gpipe_status gpipe_finalize(void) {
  return guarded([&] {
    if (initialized_kokkos && Kokkos::is_initialized()) {
      Kokkos::finalize();
      finalized_kokkos = true;
    }
    initialized_kokkos = false;
    return GPIPE_OK;
  });
}

gpipe_status gpipe_create_from_string(const char* deck_yaml, MPI_Comm comm, gpipe_trainer** out) {
  return create_agreed(
      deck_yaml && out, "gpipe_create_from_string: deck_yaml and out must not be NULL",
      "gpipe_create_from_string",
      [&] { return gpipe::parse_model_deck(deck_yaml, "<deck string>"); }, comm, out);
}

gpipe_status gpipe_create_from_file(const char* deck_path, MPI_Comm comm, gpipe_trainer** out) {
  return create_agreed(
      deck_path && out, "gpipe_create_from_file: deck_path and out must not be NULL",
      "gpipe_create_from_file", [&] { return gpipe::load_model_deck(deck_path); }, comm, out);
}

gpipe_status gpipe_create_from_string_f(const char* deck_yaml, MPI_Fint comm, gpipe_trainer** out) {
  return gpipe_create_from_string(deck_yaml, MPI_Comm_f2c(comm), out);
}

gpipe_status gpipe_destroy(gpipe_trainer* trainer) {
  return guarded([&] {
    delete trainer;
    return GPIPE_OK;
  });
}

gpipe_status gpipe_dimensions(const gpipe_trainer* trainer, int64_t* input_features, int64_t* classes,
                              int64_t* max_batch) {
  if (!trainer) return fail(GPIPE_ERROR_NULL_ARGUMENT, "gpipe_dimensions: trainer is NULL");
  return guarded([&] {
    if (input_features) *input_features = trainer->deck.model.input_features;
    if (classes) *classes = trainer->deck.model.classes();
    if (max_batch) *max_batch = trainer->deck.training.batch_size;
    return GPIPE_OK;
  });
}


gpipe_status gpipe_train_step(gpipe_trainer* trainer, const float* inputs, const int32_t* labels,
                              int64_t n, double* mean_loss) {
  constexpr const char* null = "gpipe_train_step: trainer, inputs and labels must not be NULL";
  return collective(
      trainer, null, "gpipe_train_step",
      [&] {
        return !inputs || !labels ? fail(GPIPE_ERROR_NULL_ARGUMENT, null)
                                  : check_train_arguments(trainer, labels, n);
      },
      [&] {
        const auto& d = trainer->deck;
        const gpipe_status same = check_same_batch(
            inputs, std::size_t(n * d.model.input_features) * sizeof(float), labels,
            std::size_t(n * std::max<std::int64_t>(d.model.labels_per_sample(), 1)) * sizeof(int32_t), "labels", n,
            comm_of(trainer), "gpipe_train_step");
        if (same != GPIPE_OK) return same;
        std::visit(
            [&](auto& t) {
              const double loss = t->from_last(t->step(inputs, labels, n).loss);
              if (mean_loss) *mean_loss = loss / double(n);
            },
            trainer->impl);
        return GPIPE_OK;
      });
}

gpipe_status gpipe_train_step_targets(gpipe_trainer* trainer, const float* inputs,
                                      const float* targets, int64_t n, double* mean_loss) {
  constexpr const char* null = "gpipe_train_step_targets: trainer, inputs and targets must not be NULL";
  return collective(
      trainer, null, "gpipe_train_step_targets",
      [&] {
        return !inputs || !targets ? fail(GPIPE_ERROR_NULL_ARGUMENT, null)
                                   : check_target_arguments(trainer, n);
      },
      [&] {
        const auto& d = trainer->deck;
        const gpipe_status same = check_same_batch(
            inputs, std::size_t(n * d.model.input_features) * sizeof(float), targets,
            std::size_t(n * d.model.classes()) * sizeof(float), "targets", n, comm_of(trainer),
            "gpipe_train_step_targets");
        if (same != GPIPE_OK) return same;
        std::visit(
            [&](auto& t) {
              const double loss = t->from_last(t->step(inputs, targets, n).loss);
              if (mean_loss) *mean_loss = loss / double(n);
            },
            trainer->impl);
        return GPIPE_OK;
      });
}

gpipe_status gpipe_predict(gpipe_trainer* trainer, const float* inputs, int64_t n, float* logits) {
  constexpr const char* null = "gpipe_predict: trainer, inputs and logits must not be NULL";
  return collective(
      trainer, null, "gpipe_predict",
      [&] {
        if (!inputs || !logits) return fail(GPIPE_ERROR_NULL_ARGUMENT, null);
        if (n < 1)
          return fail(GPIPE_ERROR_INPUT,
                      "gpipe_predict: n = " + std::to_string(n) + " samples, expected at least 1");
        return GPIPE_OK;
      },
      [&] {
        std::visit(
            [&](auto& t) {
              const auto out = t->predict(inputs, n);
              for (size_t i = 0; i < out.size(); ++i) logits[i] = float(out[i]);
            },
            trainer->impl);
        return GPIPE_OK;
      });
}

gpipe_status gpipe_parameter_count(const gpipe_trainer* trainer, int64_t* count) {
  if (!trainer || !count)
    return fail(GPIPE_ERROR_NULL_ARGUMENT, "gpipe_parameter_count: trainer and count must not be NULL");
  return guarded([&] {
    std::visit([&](const auto& t) { *count = t->total_parameters(); }, trainer->impl);
    return GPIPE_OK;
  });
}

gpipe_status gpipe_get_parameters(gpipe_trainer* trainer, double* values, int64_t count) {
  constexpr const char* null = "gpipe_get_parameters: trainer and values must not be NULL";
  const auto total = [&] {
    return std::visit([](const auto& t) { return std::int64_t(t->total_parameters()); }, trainer->impl);
  };
  return collective(
      trainer, null, "gpipe_get_parameters",
      [&] {
        if (!values) return fail(GPIPE_ERROR_NULL_ARGUMENT, null);
        if (count != total())
          return fail(GPIPE_ERROR_INPUT, "gpipe_get_parameters: count = " + std::to_string(count) +
                                             ", the model has " + std::to_string(total()) + " parameters");
        return GPIPE_OK;
      },
      [&] {
        std::visit(
            [&](auto& t) {
              auto all = t->gather_parameters();
              std::vector<double> buffer(all.begin(), all.end());
              buffer.resize(size_t(count));
              MPI_Bcast(buffer.data(), int(count), MPI_DOUBLE, 0, t->comm());
              std::copy(buffer.begin(), buffer.end(), values);
            },
            trainer->impl);
        return GPIPE_OK;
      });
}

gpipe_status gpipe_layout(const gpipe_trainer* trainer, int* replicas, int* cells, int* replica,
                          int* cell) {
  if (!trainer) return fail(GPIPE_ERROR_NULL_ARGUMENT, "gpipe_layout: trainer is NULL");
  return guarded([&] {
    std::visit(
        [&](const auto& t) {
          if (replicas) *replicas = t->grid().replicas;
          if (cells) *cells = t->grid().cells;
          if (replica) *replica = t->replica();
          if (cell) *cell = t->cell().rank();
        },
        trainer->impl);
    return GPIPE_OK;
  });
}

gpipe_status gpipe_skipped_steps(const gpipe_trainer* trainer, int64_t* skipped) {
  if (!trainer || !skipped)
    return fail(GPIPE_ERROR_NULL_ARGUMENT, "gpipe_skipped_steps: trainer and skipped must not be NULL");
  return guarded([&] {
    *skipped = std::visit([](const auto& t) { return std::int64_t(t->skipped_steps()); }, trainer->impl);
    return GPIPE_OK;
  });
}

gpipe_status gpipe_set_total_steps(gpipe_trainer* trainer, int64_t total_steps) {
  if (!trainer) return fail(GPIPE_ERROR_NULL_ARGUMENT, "gpipe_set_total_steps: trainer is NULL");
  if (total_steps < 0)
    return fail(GPIPE_ERROR_INPUT, "gpipe_set_total_steps: total_steps = " + std::to_string(total_steps) +
                                       ", expected >= 0");
  return guarded([&] {
    std::visit([&](auto& t) { t->set_total_steps(total_steps); }, trainer->impl);
    return GPIPE_OK;
  });
}

gpipe_status gpipe_save_checkpoint(gpipe_trainer* trainer, const char* path) {
  constexpr const char* null = "gpipe_save_checkpoint: trainer and path must not be NULL";
  return collective(
      trainer, null, "gpipe_save_checkpoint", [&] { return path ? GPIPE_OK : fail(GPIPE_ERROR_NULL_ARGUMENT, null); },
      [&] {
        std::visit([&](auto& t) { t->save_checkpoint(path); }, trainer->impl);
        return GPIPE_OK;
      });
}

gpipe_status gpipe_load_checkpoint(gpipe_trainer* trainer, const char* path) {
  constexpr const char* null = "gpipe_load_checkpoint: trainer and path must not be NULL";
  return collective(
      trainer, null, "gpipe_load_checkpoint", [&] { return path ? GPIPE_OK : fail(GPIPE_ERROR_NULL_ARGUMENT, null); },
      [&] {
        std::visit([&](auto& t) { t->load_checkpoint(path); }, trainer->impl);
        return GPIPE_OK;
      });
}

}  // extern "C"
