/* gpipe/gpipe.h compiles as C (C99) and links: a C program's view. */
#include "gpipe/gpipe.h"

#include <stdio.h>

int main(int argc, char** argv) {
  /* FUNNELED: what a threaded (OpenMP) Kokkos backend needs; gpipe_initialize checks it. */
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  gpipe_trainer* t = NULL;
  int failures = 0;
  if (gpipe_initialize(&argc, &argv) != GPIPE_OK) failures++;
  if (gpipe_create_from_string(NULL, MPI_COMM_WORLD, &t) != GPIPE_ERROR_NULL_ARGUMENT) failures++;
  if (t != NULL) failures++;
  printf("%s\n", gpipe_last_error());
  if (gpipe_finalize() != GPIPE_OK) failures++;
  MPI_Finalize();
  printf("%d passed, %d failed\n", 4 - failures, failures);
  return failures != 0;
}
