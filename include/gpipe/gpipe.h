/* gpipe-kokkos C API: GPipe pipeline-parallel training from C, Fortran
 * (through iso_c_binding) or any language with a C FFI.
 *
 * Conventions
 * - Every function returns a gpipe_status; GPIPE_OK is 0. On failure
 *   gpipe_last_error() returns a message naming the argument, file or field
 *   and what was wrong (valid until the next failing call on this thread).
 *   No C++ exception crosses this API.
 * - Arrays are caller-owned host memory, row-major (C order): inputs are
 *   (n, input_features) float32, labels (n) int32 class indices, logits
 *   (n, classes) float32.
 * - Functions marked "collective" must be called by every rank of the
 *   trainer's communicator with the same arguments (each rank may pass its
 *   own copy of the data; only the first cell reads inputs and only the last
 *   reads labels).
 *
 * - Collective calls agree on their arguments before any communication: if
 *   any rank rejects its arguments (a NULL pointer, a different n, a label
 *   out of range, a deck that does not parse, ...) every rank returns the
 *   same status, that of the lowest such rank R (R's message names the
 *   problem; the others' read "<function>: rank R rejected its arguments:
 *   <R's message>"), and the trainer stays usable. Only a NULL trainer (or
 *   an uninitialized MPI) cannot be agreed on, having no communicator: that
 *   rank returns GPIPE_ERROR_NULL_ARGUMENT at once, so pass a valid trainer
 *   on every rank. A failure after communication has started
 *   (e.g. an MPI error) cancels what the rank posted and leaves the trainer
 *   unusable: later calls return GPIPE_ERROR_STATE; destroy it.
 *
 * Lifecycle: MPI_Init_thread (caller; MPI_THREAD_FUNNELED, or
 * MPI_THREAD_SINGLE with a serial Kokkos backend) -> gpipe_initialize ->
 * gpipe_create_* -> train/predict/save/load -> gpipe_destroy ->
 * gpipe_finalize -> MPI_Finalize, once per process. Calls before
 * gpipe_initialize, and gpipe_initialize after gpipe_finalize (Kokkos cannot
 * be initialized twice), return GPIPE_ERROR_STATE.
 */
#ifndef GPIPE_GPIPE_H
#define GPIPE_GPIPE_H

#include <mpi.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum gpipe_status {
  GPIPE_OK = 0,
  GPIPE_ERROR_NULL_ARGUMENT = 1, /* a required pointer or handle was NULL */
  GPIPE_ERROR_INPUT = 2,         /* bad deck, file, size or value */
  GPIPE_ERROR_STATE = 3,         /* wrong call order (e.g. not initialized) */
  GPIPE_ERROR_RUNTIME = 4        /* a failure while running (MPI, HDF5, ...) */
} gpipe_status;

/* Opaque trainer: one pipeline cell per rank of its communicator; with the
 * deck's parallel.cells = K < ranks, D = ranks / K data-parallel replicas of a
 * K-cell pipeline (docs/design.md). */
typedef struct gpipe_trainer gpipe_trainer;

/* Message of the last failure on this thread ("" if none). */
const char* gpipe_last_error(void);

/* Initializes Kokkos (if the caller has not) with the given command line
 * (argc/argv may be NULL). MPI must already be initialized with the thread
 * level the backend needs (see Lifecycle); GPIPE_ERROR_STATE otherwise, and
 * after gpipe_finalize has finalized Kokkos. */
gpipe_status gpipe_initialize(int* argc, char*** argv);
/* Finalizes Kokkos if gpipe_initialize initialized it. Destroy trainers first. */
gpipe_status gpipe_finalize(void);

/* Creates a trainer from YAML deck text (the gpipe-train input deck format,
 * docs/input-deck.md) on a duplicate of `comm`. The data section is optional
 * (the caller passes the data; one that is there is checked but not read).
 * A deck's checkpoint.directory is checked here, before the first step: one
 * that cannot be created or written on some rank returns GPIPE_ERROR_INPUT
 * on every rank, gpipe_last_error() naming the directory, the OS's reason
 * and the rank ("checkpoint.directory D: cannot create the directory: Not a
 * directory (rank 0)"); nothing is created and the library stays usable.
 * Collective. */
gpipe_status gpipe_create_from_string(const char* deck_yaml, MPI_Comm comm, gpipe_trainer** out);
/* As gpipe_create_from_string, from a deck file (data section optional). Collective. */
gpipe_status gpipe_create_from_file(const char* deck_path, MPI_Comm comm, gpipe_trainer** out);
/* Fortran: the same with a Fortran communicator handle (MPI_Fint). */
gpipe_status gpipe_create_from_string_f(const char* deck_yaml, MPI_Fint comm, gpipe_trainer** out);

/* Frees the trainer (NULL is allowed). Collective. */
gpipe_status gpipe_destroy(gpipe_trainer* trainer);

/* Model dimensions: input features, classes (outputs), the largest batch
 * a call may pass (the deck's training.batch_size). */
gpipe_status gpipe_dimensions(const gpipe_trainer* trainer, int64_t* input_features,
                              int64_t* classes, int64_t* max_batch);

/* One synchronous training step (all micro-batches, one optimizer update) on
 * n samples: inputs (n, input_features) float32, labels (n) int32 in
 * [0, classes) — for a language model (model.loss token_cross_entropy)
 * one label per token, (n, T) int32 in [0, vocabulary), T = input_features
 * (the next token of each position). n <= max_batch, n >= D x the deck's micro_batches (D = 1
 * unless the deck's parallel section makes replicas; the global batch is
 * split into D shards). Every rank passes the same n and samples: a checksum
 * of inputs and labels is compared over the trainer's communicator (one
 * MPI_Allreduce), and a rank passing other samples makes the call fail on
 * every rank with GPIPE_ERROR_INPUT, the message naming the ranks that differ
 * from rank 0 ("the inputs of rank 1 differ from rank 0's"); nothing is
 * trained. *mean_loss (may be NULL) receives the mean loss, on every rank.
 * Collective. */
gpipe_status gpipe_train_step(gpipe_trainer* trainer, const float* inputs, const int32_t* labels,
                              int64_t n, double* mean_loss);

/* One training step with float targets (n, classes) row-major float32, for
 * decks whose model.loss is mse, mae or huber (regression; "classes" is then
 * the number of outputs). Same n rules, batch check (of inputs and targets)
 * and *mean_loss as gpipe_train_step.
 * GPIPE_ERROR_INPUT for a softmax_cross_entropy deck. Collective. */
gpipe_status gpipe_train_step_targets(gpipe_trainer* trainer, const float* inputs,
                                      const float* targets, int64_t n, double* mean_loss);

/* The training steps of this trainer whose update was skipped so far: an
 * fp16 gradient overflow (dynamic loss scaling, training.loss_scale*; the
 * decision is every rank's, so every rank counts the same) or a non-finite
 * step under training.nonfinite: skip_step. Such a step returned GPIPE_OK
 * and its forward's *mean_loss, but the weights did not change: compare the
 * count before and after a step to know. Not collective. */
gpipe_status gpipe_skipped_steps(const gpipe_trainer* trainer, int64_t* skipped);

/* Inference (Dropout off): the last layer's outputs (n, classes) float32,
 * row-major (class logits, or regression values), for inputs
 * (n, input_features) row-major, any n >= 1 (run in chunks of max_batch,
 * each as the deck's micro-batches through the pipeline), filled on every
 * rank. After gpipe_load_checkpoint the checkpoint's normalization applies:
 * raw inputs are normalized as in training and regression outputs come back
 * in the targets' units (docs/inference.md); a fresh trainer's
 * normalization is the identity. Collective. */
gpipe_status gpipe_predict(gpipe_trainer* trainer, const float* inputs, int64_t n, float* logits);

/* Number of parameters of the whole model, and all of them in layer order
 * (count values, as double) on every rank. Collective. */
gpipe_status gpipe_parameter_count(const gpipe_trainer* trainer, int64_t* count);
gpipe_status gpipe_get_parameters(gpipe_trainer* trainer, double* values, int64_t count);

/* The trainer's rank grid (the deck's parallel section): D replicas of a
 * K-cell pipeline on D x K ranks, and this rank's replica and cell index.
 * Any pointer may be NULL. */
gpipe_status gpipe_layout(const gpipe_trainer* trainer, int* replicas, int* cells, int* replica,
                          int* cell);

/* Sets the run's total number of training steps, the horizon of the
 * learning-rate schedule: the rate of step s is a function of s and this
 * count (optimizer.schedule: cosine decays to 0 at total_steps; constant
 * ignores it). total_steps >= 0; 0 = unset. With a cosine schedule,
 * gpipe_train_step returns GPIPE_ERROR_INPUT until it is set. Call it with
 * the same value on every rank (not collective). */
gpipe_status gpipe_set_total_steps(gpipe_trainer* trainer, int64_t total_steps);

/* HDF5 checkpoints (docs/file-formats.md): written atomically; loadable with
 * any number of ranks. Collective. */
gpipe_status gpipe_save_checkpoint(gpipe_trainer* trainer, const char* path);
gpipe_status gpipe_load_checkpoint(gpipe_trainer* trainer, const char* path);

#ifdef __cplusplus
}
#endif

#endif /* GPIPE_GPIPE_H */
