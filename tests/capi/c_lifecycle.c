/* The C API's lifecycle from a C program: calls before gpipe_initialize and
 * a second gpipe_initialize after gpipe_finalize return GPIPE_ERROR_STATE with
 * a clear message instead of reaching Kokkos. */
#include "gpipe/gpipe.h"

#include <stdio.h>
#include <string.h>

static int failures = 0, passed = 0;

static void expect(int ok, const char* what) {
  if (ok) {
    passed++;
  } else {
    failures++;
    printf("FAIL %s (last error: %s)\n", what, gpipe_last_error());
  }
}

static const char* deck =
    "model: {input: 3, layers: [{type: dense, units: 4}, {type: relu}, {type: dense, units: 2}]}\n"
    "data: {train_images: a, train_labels: b, test_images: c, test_labels: d}\n"
    "training: {epochs: 1, batch_size: 4, micro_batches: 2}\n";

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  gpipe_trainer* t = NULL;
  expect(gpipe_create_from_string(deck, MPI_COMM_WORLD, &t) == GPIPE_ERROR_STATE, "create before initialize");
  expect(strcmp(gpipe_last_error(), "gpipe_create_from_string: call gpipe_initialize first") == 0,
         "create before initialize: message");
  expect(t == NULL, "create before initialize: no trainer");

  expect(gpipe_initialize(&argc, &argv) == GPIPE_OK, "initialize");
  expect(gpipe_create_from_string(deck, MPI_COMM_WORLD, &t) == GPIPE_OK, "create");
  float inputs[12] = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f, 0.7f, 0.8f, 0.9f, 1.0f, 1.1f, 1.2f};
  int32_t labels[4] = {0, 1, 1, 0};
  double loss = -1;
  expect(gpipe_train_step(t, inputs, labels, 4, &loss) == GPIPE_OK && loss > 0, "train step");
  expect(gpipe_destroy(t) == GPIPE_OK, "destroy");
  expect(gpipe_finalize() == GPIPE_OK, "finalize");

  /* A second round in the same process. */
  expect(gpipe_initialize(&argc, &argv) == GPIPE_ERROR_STATE, "initialize after finalize");
  expect(strcmp(gpipe_last_error(),
                "gpipe_initialize: gpipe_finalize has already finalized Kokkos, which cannot be "
                "initialized again in the same process: call gpipe_initialize and gpipe_finalize "
                "once per process") == 0,
         "initialize after finalize: message");
  t = NULL;
  expect(gpipe_create_from_string(deck, MPI_COMM_WORLD, &t) == GPIPE_ERROR_STATE, "create after finalize");
  expect(strcmp(gpipe_last_error(),
                "gpipe_create_from_string: call gpipe_initialize first (gpipe_finalize has already run)") == 0,
         "create after finalize: message");
  expect(gpipe_finalize() == GPIPE_OK, "second finalize is harmless");
  MPI_Finalize();
  printf("%d passed, %d failed\n", passed, failures);
  return failures != 0;
}
