! The Fortran bindings: create a trainer on MPI_COMM_WORLD, read its
! dimensions, train, predict, save a checkpoint and load it back (the
! predictions return bitwise), and check an error message; then a regression
! trainer (mse, float targets): dimensions, training steps with targets,
! predictions close to the targets. Prints "N passed, M failed".
program test_fortran
  use mpi
  use gpipe
  use, intrinsic :: iso_c_binding
  implicit none
  type(c_ptr) :: trainer, surrogate
  real(c_float) :: targets(2, 8), outputs(2, 8)
  integer :: ierr, provided, passed, failed, i, j, status
  real(c_float) :: inputs(4, 8), logits(3, 8), reloaded(3, 8)
  integer(c_int64_t) :: features, classes, max_batch, count, skipped
  real(c_double), allocatable :: saved(:), values(:)
  character(len=*), parameter :: checkpoint = "gpipe_fortran_test_ckpt.h5"
  integer(c_int32_t) :: labels(8)
  real(c_double) :: loss, first_loss
  character(len=*), parameter :: deck = &
    "model: {input: 4, layers: [{type: dense, units: 16}, {type: relu}, {type: dense, units: 3}]}" // &
    new_line('a') // "training: {epochs: 1, batch_size: 8, micro_batches: 2}" // &
    new_line('a') // "optimizer: {type: adam, lr: 0.05}"
  character(len=*), parameter :: regression_deck = &
    "model: {input: 4, loss: mse, layers: [{type: dense, units: 16}, {type: tanh}, {type: dense, units: 2}]}" // &
    new_line('a') // "training: {epochs: 1, batch_size: 8, micro_batches: 2}" // &
    new_line('a') // "optimizer: {type: adam, lr: 0.02}"

  ! FUNNELED: what a threaded (OpenMP) Kokkos backend needs; gpipe_initialize_f checks it.
  call MPI_Init_thread(MPI_THREAD_FUNNELED, provided, ierr)
  passed = 0
  failed = 0
  call expect(gpipe_initialize_f() == GPIPE_OK, "initialize")
  call expect(gpipe_create(deck, MPI_COMM_WORLD, trainer) == GPIPE_OK, "create")
  call expect(gpipe_dimensions_f(trainer, features, classes, max_batch) == GPIPE_OK, "dimensions")
  call expect(features == 4 .and. classes == 3 .and. max_batch == 8, "dimensions are 4, 3, 8")
  call expect(gpipe_parameter_count_f(trainer, count) == GPIPE_OK, "parameter_count")
  call expect(count == 4 * 16 + 16 + 16 * 3 + 3, "131 parameters")
  do j = 1, 8
    labels(j) = mod(j, 3)
    do i = 1, 4
      inputs(i, j) = real(merge(1.0, -1.0, mod(j, 3) == i - 1), c_float)
    end do
  end do
  do i = 1, 30
    status = gpipe_train_step(trainer, inputs, labels, 8, loss)
    if (i == 1) first_loss = loss
  end do
  call expect(status == GPIPE_OK, "train_step")
  call expect(loss < 0.5 * first_loss, "loss falls")
  call expect(gpipe_skipped_steps_f(trainer, skipped) == GPIPE_OK .and. skipped == 0, "no step skipped")
  call expect(gpipe_predict_f(trainer, inputs, 8, logits) == GPIPE_OK, "predict")
  call expect(all(maxloc(logits, dim=1) - 1 == labels), "predictions match the labels")
  allocate(saved(count), values(count))
  call expect(gpipe_get_parameters_f(trainer, saved) == GPIPE_OK, "get_parameters")
  call expect(gpipe_save_checkpoint_f(trainer, checkpoint) == GPIPE_OK, "save_checkpoint")
  status = gpipe_train_step(trainer, inputs, labels, 8, loss)
  status = gpipe_get_parameters_f(trainer, values)
  call expect(any(values /= saved), "a step changes the parameters")
  call expect(gpipe_load_checkpoint_f(trainer, checkpoint) == GPIPE_OK, "load_checkpoint")
  status = gpipe_get_parameters_f(trainer, values)
  call expect(all(values == saved), "loaded parameters equal the saved ones bitwise")
  call expect(gpipe_predict_f(trainer, inputs, 8, reloaded) == GPIPE_OK, "predict after load")
  call expect(all(reloaded == logits), "predictions after load equal those before bitwise")
  call expect(gpipe_load_checkpoint_f(trainer, "no/such/file.h5") /= GPIPE_OK, "missing checkpoint rejected")
  labels(1) = 7
  call expect(gpipe_train_step(trainer, inputs, labels, 8, loss) /= GPIPE_OK, "bad label rejected")
  call expect(gpipe_last_error_f() == "gpipe_train_step: labels[0] = 7 is outside [0, 3)", "error message")
  call expect(gpipe_destroy_f(trainer) == GPIPE_OK, "destroy")

  ! Regression: targets (x1 + x2, x3 - x4) from float targets with mse.
  call expect(gpipe_create(regression_deck, MPI_COMM_WORLD, surrogate) == GPIPE_OK, "create regression")
  call expect(gpipe_dimensions_f(surrogate, features, classes, max_batch) == GPIPE_OK, "regression dimensions")
  call expect(features == 4 .and. classes == 2 .and. max_batch == 8, "regression dimensions are 4, 2, 8")
  do j = 1, 8
    targets(1, j) = inputs(1, j) + inputs(2, j)
    targets(2, j) = inputs(3, j) - inputs(4, j)
  end do
  do i = 1, 200
    status = gpipe_train_step_targets_f(surrogate, inputs, targets, 8, loss)
    if (i == 1) first_loss = loss
  end do
  call expect(status == GPIPE_OK, "train_step_targets")
  call expect(loss < 0.01 * first_loss, "regression loss falls 100-fold")
  call expect(gpipe_predict_f(surrogate, inputs, 8, outputs) == GPIPE_OK, "regression predict")
  call expect(maxval(abs(outputs - targets)) < 0.2, "regression outputs within 0.2 of the targets")
  call expect(gpipe_train_step(surrogate, inputs, labels, 8, loss) /= GPIPE_OK, "labels rejected by an mse deck")
  call expect(gpipe_last_error_f() == "gpipe_train_step: model.loss is mse: pass float targets with " // &
              "gpipe_train_step_targets", "regression error message")
  call expect(gpipe_destroy_f(surrogate) == GPIPE_OK, "destroy regression")
  call expect(gpipe_finalize_f() == GPIPE_OK, "finalize")
  open(newunit=i, file=checkpoint, status="old", iostat=ierr)
  if (ierr == 0) close(i, status="delete")
  call MPI_Finalize(ierr)
  print '(i0, " passed, ", i0, " failed")', passed, failed
  if (failed > 0) error stop 1

contains
  subroutine expect(condition, what)
    logical, intent(in) :: condition
    character(len=*), intent(in) :: what
    if (condition) then
      passed = passed + 1
    else
      failed = failed + 1
      print '("FAIL: ", a)', what
    end if
  end subroutine
end program
